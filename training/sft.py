"""`rmjudge-train sft`: the format warm-start stage (supervised fine-tuning before GRPO).

Steps, all resumable:
1. read labelled pairs (anything `rmjudge score` reads), slots drawn from (seed, item id) as in
   build-data (`training.data.read_items`);
2. sample a few rollouts per item from the base (llama.cpp for a GGUF, cached per item id in
   OUTPUT_DIR/rollouts.jsonl, the build-data cache format: a rerun samples only what is missing);
3. build targets (`training.sft_data`): Pref in both slot orders and Refl in both critique
   orders, the base's own analyses followed by the gold verdict;
4. tokenize exactly as inference does (`training.tokens`: template pieces with special-token
   parsing, data pieces and targets without), loss on the target tokens only; examples longer
   than `max_length` are left out and counted, never truncated;
5. train with transformers' `Trainer`: a LoRA adapter (default) or all weights (`--method
   full`), checkpoints every `--save-steps` (`--resume` continues), loss logged per step to
   stderr and OUTPUT_DIR/log.jsonl;
6. save OUTPUT_DIR/model/ (the warm-started model as a plain HF folder: LoRA merged in, the
   tokenizer beside it; the `--model` of the next stages, and what `rmjudge-export convert`
   turns into a GGUF for build-data), plus OUTPUT_DIR/adapter/ for LoRA;
7. format check: greedy generations on the Pref prompts of the first `--check-items` items, both
   orders, before and after training; the parse-failure rates go to OUTPUT_DIR/sft.json.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson

from rmjudge.core.errors import UserError
from rmjudge.io.mapping import joined_map
from rmjudge.io.readers import detect_format
from rmjudge.prompts import PROMPT_FORMAT, parse_verdict

from rmjudge.training.hf import DEFAULT_TARGETS, check_target_modules, lora_config
from rmjudge.training.outputs import write_adapter_info
from rmjudge.training.precision import (PRECISION_HELP, PRECISIONS, check_precision, precision_name,
                                use_bf16)
from rmjudge.training.sft_data import TASKS, SFTStats, sft_examples

ANALYSES = ("base", "template")


class SFTError(UserError):
    """The warm-start stage cannot run as asked; the message says how to fix it."""


@dataclass(frozen=True)
class SFTSettings:
    """What a warm-start run does."""

    source: str = field(metadata={"help": "Labelled pairs (any input `rmjudge score` reads).",
                                  "argument": True})
    output_dir: str = field(metadata={"help": "Rollouts, checkpoints, logs, model/ and adapter/.",
                                      "short": "-o"})
    model: str | None = field(default=None, metadata={
        "help": "Base model: a .gguf file (default: the embedded model) or an HF directory."})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file name inside --model."})
    map: str | None = field(default=None, metadata={
        "help": "Column mapping, as `rmjudge score`.", "multiple": True, "parse": joined_map})
    limit: int | None = field(default=None, metadata={"help": "Read at most N rows."})
    tasks: str = field(default="pref,refl", metadata={"help": "Target tasks: pref, refl or both."})
    analyses: str = field(default="base", metadata={
        "help": "Where target analyses come from: base (the base's own rollouts) or template "
                "(short templated descriptions of both responses, no rollouts: a format-only "
                "warm-start; training/sft_templates.py)."})
    samples: int = field(default=2, metadata={"help": "Base rollouts per item (analysis source)."})
    rollout_max_tokens: int = field(default=96, metadata={"help": "Max tokens per rollout."})
    rollout_temperature: float = field(default=1.0, metadata={"help": "Rollout temperature."})
    max_analysis_chars: int = field(default=200, metadata={
        "help": "Analyses are cut at a sentence boundary within this many characters (keep "
                "analysis + verdict under the --max-tokens used at inference: ~4 chars/token)."})
    max_length: int = field(default=2048, metadata={
        "help": "Examples with more prompt + target tokens are left out (counted)."})
    method: str = field(default="lora", metadata={"help": "lora (adapter, merged at the end) or "
                                                          "full (all weights; tiny models)."})
    epochs: float = field(default=2.0, metadata={"help": "Passes over the examples."})
    max_steps: int = field(default=-1, metadata={"help": "Stop after N steps (-1: epochs)."})
    batch_size: int = field(default=8, metadata={"help": "Examples per optimizer step."})
    micro_batch: int = field(default=2, metadata={"help": "Examples per forward/backward."})
    learning_rate: float = field(default=5e-4, metadata={
        "help": "Learning rate (LoRA; use about 1e-4 with --method full)."})
    warmup_ratio: float = field(default=0.05, metadata={"help": "Linear warmup share."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    target_modules: str = field(default=DEFAULT_TARGETS, metadata={
        "help": "Comma-separated module names for LoRA, or all-linear."})
    save_steps: int = field(default=50, metadata={"help": "Checkpoint every N optimizer steps."})
    save_total_limit: int = field(default=2, metadata={"help": "Checkpoints kept."})
    logging_steps: int = field(default=1, metadata={"help": "Log every N optimizer steps."})
    check_items: int = field(default=8, metadata={
        "help": "Items whose Pref prompts (both orders) are generated greedily before and after "
                "training to measure parse failures (0: skip)."})
    check_max_tokens: int = field(default=128, metadata={"help": "Max tokens per check generation."})
    chunk_items: int = field(default=16, metadata={"help": "Items per rollout generate call."})
    parallel: int | None = field(default=None, metadata={"help": "llama.cpp live sequences."})
    threads: int | None = field(default=None, metadata={
        "help": "CPU threads (llama.cpp rollouts and torch)."})
    seed: int = field(default=0, metadata={"help": "Seed of slots, targets, shuffling and init."})
    precision: str = field(default="auto", metadata={
        "help": PRECISION_HELP, "choices": PRECISIONS})
    criteria: str | None = field(default=None, metadata={
        "help": "Judging criteria in both prompts, as `rmjudge score --criteria`: a built-in "
                "name, @FILE or the text (train the judge for that rubric).",
        "metavar": "NAME|@FILE|TEXT"})

    def __post_init__(self) -> None:
        check_precision(self.precision, SFTError)
        for name in ("samples", "rollout_max_tokens", "max_analysis_chars", "max_length",
                     "batch_size", "micro_batch", "lora_r", "lora_alpha", "save_steps",
                     "save_total_limit", "logging_steps", "check_max_tokens", "chunk_items"):
            if getattr(self, name) < 1:
                raise SFTError(f"--{name.replace('_', '-')} must be at least 1")
        if self.limit is not None and self.limit < 1:
            raise SFTError("--limit must be at least 1")
        if self.check_items < 0:
            raise SFTError("--check-items must be 0 or more")
        if not 0.0 <= self.rollout_temperature <= 5.0:  # `rmjudge score --temperature`'s bounds
            raise SFTError("--rollout-temperature must be between 0 and 5")
        if self.analyses not in ANALYSES:
            raise SFTError(f"--analyses {self.analyses!r}: give base or template")
        if self.method not in ("lora", "full"):
            raise SFTError("--method must be lora or full")
        if not self.task_list or any(t not in TASKS for t in self.task_list):
            raise SFTError(f"--tasks {self.tasks!r}: give pref, refl or pref,refl")
        if self.batch_size % self.micro_batch:
            raise SFTError(f"--micro-batch {self.micro_batch} must divide --batch-size "
                           f"{self.batch_size}")
        if self.epochs <= 0 and self.max_steps <= 0:
            raise SFTError("give --epochs > 0 or --max-steps > 0")
        if self.learning_rate <= 0 or not 0.0 <= self.warmup_ratio < 1.0:
            raise SFTError("--learning-rate must be > 0 and --warmup-ratio in [0, 1)")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise SFTError("--lora-dropout must be in [0, 1)")

    @property
    def task_list(self) -> tuple[str, ...]:
        return tuple(t.strip() for t in self.tasks.split(",") if t.strip())


# -- data --------------------------------------------------------------------------------------


def build_examples(s: SFTSettings, rollout_source, progress=None) -> tuple[list[dict], SFTStats,
                                                                             dict]:
    """Warm-start examples of every item (rollouts cached in OUTPUT_DIR/rollouts.jsonl; with
    `--analyses template`, `rollout_source` is a `TemplateSource` and nothing is sampled)."""
    from rmjudge.io.mapping import parse_map

    from rmjudge.training.cache import RolloutCache
    from rmjudge.training.data import DataConfig, Stats, read_items, sample_all

    config = DataConfig(seed=s.seed, limit=s.limit, mapping=parse_map(s.map),
                        chunk_items=s.chunk_items)
    read_stats = Stats()
    stats = SFTStats()
    examples: list[dict] = []
    criteria = getattr(rollout_source, "criteria", None)
    if s.analyses == "template":
        from rmjudge.prompts import PromptStyle

        from rmjudge.training.sft_templates import template_examples

        for item in read_items(s.source, config, read_stats):
            made = template_examples(item, rollout_source.suffix, s.task_list,
                                     PromptStyle(criteria))
            stats.count(made, templated=True)
            examples += made
    else:
        cache = RolloutCache(Path(s.output_dir) / "rollouts.jsonl", rollout_source.fingerprint())
        for item, rollouts in sample_all(read_items(s.source, config, read_stats),
                                         rollout_source, cache, config, read_stats, progress):
            examples += sft_examples(item, rollouts, rollout_source.suffix, s.task_list,
                                     s.max_analysis_chars, s.seed, stats, criteria)
    rows = {"rows_read": read_stats.rows_read, "rows_bad": read_stats.rows_bad,
            "rows_unlabelled": read_stats.rows_unlabelled,
            "items_from_cache": read_stats.items_from_cache}
    return examples, stats, rows


def tokenize_examples(examples: list[dict], tokenizer, max_length: int,
                      stats: SFTStats) -> list[dict]:
    """input_ids / labels (-100 on the prompt) per example; too long ones are counted out."""
    from rmjudge.training.tokens import encode_prompt, encode_target

    rows = []
    for e in examples:
        p = encode_prompt(tokenizer, e["prompt"])
        t = encode_target(tokenizer, e["completion"])
        if len(p) + len(t) > max_length:
            stats.too_long += 1
            continue
        rows.append({"input_ids": p + t, "labels": [-100] * len(p) + t})
    return rows


def pad_collator(pad_id: int):
    """Right-padding collator: pad ids, mask, and -100 labels on the padding."""

    def collate(batch: list[dict]) -> dict:
        import torch

        width = max(len(b["input_ids"]) for b in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, b in enumerate(batch):
            n = len(b["input_ids"])
            ids[i, :n] = torch.tensor(b["input_ids"])
            labels[i, :n] = torch.tensor(b["labels"])
            mask[i, :n] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}

    return collate


# -- format check ------------------------------------------------------------------------------


def check_prompts(examples: list[dict], n_items: int) -> list[dict]:
    """The Pref examples (both orders) of the first `n_items` items."""
    ids: list[str] = []
    for e in examples:
        if e["source_id"] not in ids:
            ids.append(e["source_id"])
    keep = set(ids[:n_items])
    return [e for e in examples if e["task"] == "pref" and e["source_id"] in keep]


def parse_failure_rate(model, tokenizer, examples: list[dict], max_tokens: int,
                       batch: int = 8, bf16: bool = False) -> dict[str, Any]:
    """Greedy generations on the examples' prompts: parse failures and accuracy."""
    from rmjudge.training.hf import greedy_completions

    if not examples:
        return {"prompts": 0}
    texts = greedy_completions(model, tokenizer, [e["prompt"] for e in examples], max_tokens,
                               batch, bf16)
    preds = [parse_verdict(t, e["task"]) for t, e in zip(texts, examples)]
    n = len(examples)
    return {"prompts": n,
            "parse_failures": sum(p is None for p in preds),
            "parse_failure_rate": round(sum(p is None for p in preds) / n, 4),
            "slot_1_share": round(sum(p == 1 for p in preds) / n, 4),
            "accuracy": round(sum(p == e["label"] for p, e in zip(preds, examples)) / n, 4),
            "first_text": texts[0]}


# -- training ----------------------------------------------------------------------------------


def find_checkpoint(output_dir: str, resume: str | None) -> str | None:
    from rmjudge.training.grpo import TrainError, find_checkpoint as find

    try:
        return find(output_dir, resume)
    except TrainError as exc:
        raise SFTError(str(exc)) from None


SFT = "rmjudge-train sft"


def check_output(s: SFTSettings, overwrite: bool = False) -> None:
    """Refuse an output folder that is an input or holds files another command wrote
    (training.outputs), and an input without one labelled pair, before anything loads or the
    folder is made."""
    from rmjudge.io.mapping import parse_map

    from rmjudge.training.data import DataConfig, no_items_reason, no_labelled_item
    from rmjudge.training.outputs import check_output_dir

    gguf = str(Path(s.model) / s.gguf_file) if s.model and s.gguf_file else None
    check_output_dir(s, SFT, source=s.source, inputs=(s.model, gguf), overwrite=overwrite)
    empty = no_labelled_item(s.source, DataConfig(seed=s.seed, limit=s.limit,
                                                  mapping=parse_map(s.map)))
    if empty is not None:
        raise SFTError(f"{s.source}: no warm-start example can be built: "
                       f"{no_items_reason(empty)}; nothing was written")


def warm_start(s: SFTSettings, backend: str = "auto", resume: str | None = None,
               progress: Callable[[dict], None] | None = None,
               say: Callable[[str], None] | None = None, overwrite: bool = False
               ) -> dict[str, Any]:
    """`rmjudge-train sft` as one call: the criteria, the output folder and the training extras
    are checked before anything loads; the analyses come from templates (`--analyses
    template`) or from base rollouts (`backend`: auto, llama or transformers); then `run`."""
    from rmjudge.core.extras import TRAIN, require
    from rmjudge.prompts.criteria import resolve_criteria

    from rmjudge.training.sources import rollout_source, template_source

    say = say or (lambda _: None)
    criteria = resolve_criteria(s.criteria)  # a bad value fails before anything loads
    detect_format(s.source)  # an input that cannot be read fails before anything loads
    check_output(s, overwrite)
    require(SFT, "train", TRAIN)
    if s.analyses == "template":
        src = template_source(s.model, s.gguf_file, criteria)
        say("targets: templated analyses, no base rollouts (--analyses template)")
    else:
        from rmjudge.training.rollouts import SamplingSettings

        sampling = SamplingSettings(samples=s.samples, temperature=s.rollout_temperature,
                                    max_tokens=s.rollout_max_tokens, seed=s.seed,
                                    criteria=criteria)
        src, desc = rollout_source(s.model, s.gguf_file, backend, sampling, s.parallel,
                                   s.threads)
        say(f"rollouts: {s.samples} per item, {desc}")
    return run(s, src, resume=resume, progress=progress, say=say, overwrite=overwrite)


def run(s: SFTSettings, rollout_source, resume: str | None = None,
        progress: Callable[[dict], None] | None = None,
        say: Callable[[str], None] | None = None, overwrite: bool = False) -> dict[str, Any]:
    """The whole stage; returns the summary also written to OUTPUT_DIR/sft.json.

    Steps: claim the folder, build and write the examples, load the base and tokenize them,
    check the base's format, train (checkpoints staged aside), save model/ (and adapter/),
    check the warm-started format, write sft.json."""
    from rmjudge.files import write_file

    from rmjudge.training.outputs import claim_output_dir

    say = say or (lambda _: None)
    detect_format(s.source)  # again for callers of run() itself; a Hub id's lookup is remembered
    check_output(s, overwrite)
    out = Path(s.output_dir)
    claim_output_dir(s, SFT)
    checkpoint = find_checkpoint(s.output_dir, resume)
    examples, stats, rows = _write_examples(s, rollout_source, say)

    import torch
    from transformers import Trainer, TrainingArguments  # noqa: F401

    from rmjudge.training.grpo import train_staged
    from rmjudge.training.hf import load_base
    from rmjudge.training.outputs import StagedCheckpoints

    if s.threads:
        torch.set_num_threads(s.threads)
    base_dir, tokenizer, rows_tok = _tokenized(s, examples, stats)
    torch.manual_seed(s.seed)
    model = load_base(base_dir, quantization="none", dtype="float32")
    bf16 = use_bf16(s.precision, SFTError)
    check = check_prompts(examples, s.check_items)
    before = None
    if check and checkpoint is None:
        model.eval()
        before = parse_failure_rate(model, tokenizer, check, s.check_max_tokens, bf16=bf16)
        say(f"base: {before['parse_failures']} of {before['prompts']} check generations do not "
            "parse")
    if s.method == "lora":
        from peft import get_peft_model

        check_target_modules(model, s)
        model = get_peft_model(model, lora_config(s))
    model.train()

    staged = StagedCheckpoints(out, s.save_total_limit)
    trainer = _trainer(s, model, tokenizer, rows_tok, staged, progress, bf16)
    write_file(str(out / "settings.json"), (json.dumps(asdict(s), indent=2) + "\n").encode())
    result = train_staged(trainer, staged, checkpoint)
    model, model_dir = _save_models(s, trainer.model, tokenizer)
    after = None
    if check:
        model.eval()
        after = parse_failure_rate(model, tokenizer, check, s.check_max_tokens, bf16=bf16)
        say(f"warm-started: {after['parse_failures']} of {after['prompts']} check generations "
            "do not parse")
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    summary = {
        "settings": asdict(s), "base_model_dir": base_dir, "model": str(model_dir),
        "adapter": str(out / "adapter") if s.method == "lora" else None,
        "rows": rows, "stats": stats.as_dict(), "train_examples": len(rows_tok),
        "example_tokens": sum(len(r["input_ids"]) for r in rows_tok),
        "target_tokens": sum(sum(x != -100 for x in r["labels"]) for r in rows_tok),
        "steps": trainer.state.global_step, "resumed_from": checkpoint,
        "precision": precision_name(bf16),
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "train_metrics": result.metrics, "check_before": before, "check_after": after,
    }
    write_file(str(out / "sft.json"),
               (json.dumps(summary, indent=2, default=str) + "\n").encode())
    return summary


def _write_examples(s: SFTSettings, rollout_source, say: Callable[[str], None]
                    ) -> tuple[list[dict], SFTStats, dict]:
    """Build the warm-start examples and write OUTPUT_DIR/sft_data.jsonl; refused when there
    are none, or fewer than one step's."""
    from rmjudge.files import write_file

    examples, stats, rows = build_examples(s, rollout_source)
    if not examples:
        raise SFTError(f"{s.source}: no warm-start example was built ({rows['rows_read']} rows "
                       f"read, {rows['rows_unlabelled']} unlabelled, {rows['rows_bad']} bad); "
                       "give labelled pairs (chosen/rejected or a label column)")
    write_file(str(Path(s.output_dir) / "sft_data.jsonl"),
               b"".join(orjson.dumps(e) + b"\n" for e in examples))
    if len(examples) < s.batch_size:
        raise SFTError(f"{s.source}: {len(examples)} warm-start examples, fewer than "
                       f"--batch-size {s.batch_size}, so no step would run; give more rows or "
                       "lower --batch-size")
    origin = ("templated analyses (no base rollouts)" if s.analyses == "template" else
              f"base analyses used {stats.analyses_used}, short {stats.analyses_short}; base "
              f"rollouts parsed {stats.rollouts_parsed} of {stats.rollouts}")
    say(f"examples: {stats.pref_examples} Pref + {stats.refl_examples} Refl (label 1: "
        f"{stats.label_1}, label 2: {stats.label_2}); {origin}")
    return examples, stats, rows


def _tokenized(s: SFTSettings, examples: list[dict], stats: SFTStats):
    """(base folder, tokenizer, tokenized examples): the base (--model, else the embedded
    model) as an HF folder; refused when too few examples fit --max-length."""
    from rmjudge.models.resolve import resolve_model

    from rmjudge.training.hf import ModelSource, load_tokenizer, materialize

    base_dir = materialize(ModelSource.parse(s.model or resolve_model(None), s.gguf_file))
    tokenizer = load_tokenizer(ModelSource(base_dir))
    rows_tok = tokenize_examples(examples, tokenizer, s.max_length, stats)
    if len(rows_tok) < s.batch_size:
        raise SFTError(f"{stats.too_long} of {len(examples)} examples are longer than "
                       f"--max-length {s.max_length} tokens, leaving {len(rows_tok)}, fewer than "
                       f"--batch-size {s.batch_size}; raise --max-length")
    return base_dir, tokenizer, rows_tok


def _trainer(s: SFTSettings, model, tokenizer, rows_tok: list[dict], staged, progress,
             bf16: bool):
    """transformers' Trainer on the tokenized examples, its loss computed from the logits of
    the target positions only (`training.completion_loss`): logged to `progress` and log.jsonl,
    checkpoints to `staged`; with `bf16` under bfloat16 autocast (training.precision)."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback, TrainingArguments

    from rmjudge.training.completion_loss import completion_loss_trainer
    from rmjudge.training.grpo import jsonl_log_callback

    cuda = torch.cuda.is_available()
    args = TrainingArguments(
        output_dir=staged.path, num_train_epochs=s.epochs, max_steps=s.max_steps,
        per_device_train_batch_size=s.micro_batch,
        gradient_accumulation_steps=s.batch_size // s.micro_batch,
        learning_rate=s.learning_rate, lr_scheduler_type="cosine",
        warmup_steps=s.warmup_ratio, logging_steps=s.logging_steps, save_strategy="steps",
        save_steps=s.save_steps, save_total_limit=s.save_total_limit, seed=s.seed,
        data_seed=s.seed, use_cpu=not cuda, bf16=bf16,
        report_to="none", remove_unused_columns=False, disable_tqdm=True,
        dataloader_drop_last=False)
    trainer = completion_loss_trainer()(
        model=model, args=args, train_dataset=Dataset.from_list(rows_tok),
        data_collator=pad_collator(tokenizer.pad_token_id),
        callbacks=[jsonl_log_callback(Path(s.output_dir) / "log.jsonl", progress),
                   staged.callback()])
    trainer.remove_callback(PrinterCallback)
    return trainer


def _save_models(s: SFTSettings, model, tokenizer):
    """OUTPUT_DIR/adapter (LoRA: the adapter, then merged into the base) and OUTPUT_DIR/model
    (the warm-started model as a plain HF folder with its tokenizer); (model, its folder)."""
    from rmjudge.files import save_folder

    out = Path(s.output_dir)
    if s.method == "lora":
        save_folder(str(out / "adapter"), model.save_pretrained, tokenizer.save_pretrained,
                    # targets built with these prompts
                    functools.partial(write_adapter_info, prompt_format=PROMPT_FORMAT))
        model = model.merge_and_unload()
    model_dir = out / "model"
    save_folder(str(model_dir), functools.partial(model.save_pretrained, safe_serialization=True),
                tokenizer.save_pretrained)
    return model, model_dir
