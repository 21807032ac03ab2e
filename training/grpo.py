"""GRPO training of a QLoRA adapter on unified Pref + Refl data (docs/reflectrm.md §5).

TRL's `GRPOTrainer` on a base loaded in 4-bit NF4 (bitsandbytes) with a LoRA adapter (peft).
Prompts are the examples' chat messages rendered with the base's own chat template plus
`ASSISTANT_PREFIX`, exactly as at inference; the reward is `training.reward.verdict_reward`.

Batch semantics [ours]: `batch_size` counts prompts per optimizer step, each with
`num_generations` completions, so one step sees batch_size x num_generations completions;
`micro_batch` completions go through one forward/backward (gradient accumulation makes up the
rest) and `generation_prompts` prompts are sampled per `generate` call (that bounds the KV cache).

Outputs in `output_dir`: `checkpoint-*/` (TRL/transformers checkpoints, `--resume` continues
from them), `log.jsonl` (one line per logging step: reward, reward_pref/refl, parse failure
rate, KL, ...), `heldout.jsonl` (the evaluation split, by source item), `adapter/` (the final
LoRA adapter, loadable with `peft.PeftModel.from_pretrained`), `training.json` (settings,
split sizes, final metrics and the greedy evaluation).
"""

from __future__ import annotations

from rmjudge.core.errors import UserError

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson

from rmjudge.core.extras import install_hint
from rmjudge.core.seeds import derive_seed

from rmjudge.training.data import DataError, Stats, check_prompt_format, mix, read_examples
from rmjudge.training.hf import (DEFAULT_TARGETS, ModelSource, check_target_modules, load_base,
                         load_tokenizer, lora_config, materialize, render_prompt)
from rmjudge.training.outputs import write_adapter_info
from rmjudge.training.precision import (PRECISION_HELP, PRECISIONS, check_precision, precision_name,
                                use_bf16)


class TrainError(UserError):
    """Training cannot run as asked; the message says how to fix it."""


@dataclass(frozen=True)
class GRPOSettings:
    """What a GRPO run does. Defaults are the paper's where it gives them."""

    model: str = field(metadata={"help": "Base model: HF directory or hub id, or a .gguf file."})
    data: str = field(metadata={"help": "Training file from `rmjudge-train build-data`."})
    output_dir: str = field(metadata={"help": "Checkpoints, logs and the final adapter.",
                                      "short": "-o"})
    gguf_file: str | None = field(default=None, metadata={
        "help": "GGUF file name inside --model (dequantized by transformers, cached as HF)."})
    epochs: float = field(default=3.0, metadata={"help": "Passes over the training split [paper]."})
    max_steps: int = field(default=-1, metadata={"help": "Stop after this many steps (-1: epochs)."})
    batch_size: int = field(default=64, metadata={"help": "Prompts per optimizer step [paper]."})
    num_generations: int = field(default=8, metadata={"help": "Completions per prompt [paper]."})
    micro_batch: int = field(default=8, metadata={"help": "Completions per forward/backward."})
    generation_prompts: int = field(default=8, metadata={"help": "Prompts per generate call."})
    temperature: float = field(default=1.0, metadata={"help": "Rollout temperature [paper]."})
    max_completion_length: int = field(default=1024, metadata={
        "help": "Max generated tokens per completion [paper]."})
    max_prompt_tokens: int = field(default=4096, metadata={
        "help": "Examples with longer prompts are left out (counted per task in training.json)."})
    keep_mix: bool = field(default=True, metadata={
        "help": "After leaving out over-long prompts (mostly Refl: they carry two analyses), "
                "subsample the other task so the Pref:Refl mix stays as the data had it."})
    learning_rate: float = field(default=1e-5, metadata={
        "help": "Adapter learning rate (the paper's 1e-6 is for full weights; LoRA wants more)."})
    beta: float = field(default=0.04, metadata={
        "help": "KL coefficient (> 0: KL is computed) [ours: the paper gives none]."})
    loss_type: str = field(default="dapo", metadata={
        "help": "TRL's GRPO loss: dapo (token mean over the whole batch: no length bias), grpo "
                "(per-sequence token mean), dr_grpo, bnpo, ... [ours: the paper names none]."})
    warmup_ratio: float = field(default=0.03, metadata={"help": "Linear warmup share."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    target_modules: str = field(default=DEFAULT_TARGETS, metadata={
        "help": "Comma-separated module names for LoRA, or all-linear."})
    init_adapter: str | None = field(default=None, metadata={
        "help": "Continue training this PEFT LoRA adapter of --model (e.g. `rmjudge-train sft`'s "
                "OUTPUT/adapter) instead of a new one; its rank, alpha and modules are kept, "
                "and the KL reference is the model with this adapter as it was loaded."})
    quantization: str = field(default="nf4", metadata={"help": "nf4 (QLoRA) or none."})
    gradient_checkpointing: bool = field(default=True, metadata={"help": "Trade compute for memory."})
    save_steps: int = field(default=25, metadata={"help": "Checkpoint every N optimizer steps."})
    save_total_limit: int = field(default=3, metadata={"help": "Checkpoints kept."})
    logging_steps: int = field(default=1, metadata={"help": "Log every N optimizer steps."})
    eval_fraction: float = field(default=0.05, metadata={
        "help": "Share of source items held out for the final evaluation."})
    eval_max_items: int = field(default=200, metadata={
        "help": "Cap on held-out examples evaluated (Pref ones in both orders)."})
    eval_batch: int = field(default=8, metadata={"help": "Prompts per greedy generate call."})
    seed: int = field(default=0, metadata={"help": "Seed of the split, LoRA init and sampling."})
    precision: str = field(default="auto", metadata={
        "help": PRECISION_HELP, "choices": PRECISIONS})

    def __post_init__(self) -> None:
        check_precision(self.precision, TrainError)
        positive = ("batch_size", "num_generations", "micro_batch", "generation_prompts",
                    "max_completion_length", "lora_r", "lora_alpha", "save_steps",
                    "logging_steps", "eval_batch", "max_prompt_tokens")
        for name in positive:
            if getattr(self, name) < 1:
                raise TrainError(f"--{name.replace('_', '-')} must be at least 1")
        if self.num_generations < 2:
            raise TrainError("--num-generations must be at least 2 (GRPO compares completions "
                             "of one prompt)")
        if self.epochs <= 0 and self.max_steps <= 0:
            raise TrainError("give --epochs > 0 or --max-steps > 0")
        if self.quantization not in ("nf4", "none"):
            raise TrainError("--quantization must be nf4 or none")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise TrainError("--eval-fraction must be in [0, 1)")
        if self.eval_max_items < 0:  # a negative cap would slice items off the end
            raise TrainError("--eval-max-items must be 0 or more")
        if not 0.0 < self.temperature <= 5.0:  # greedy completions of a prompt never differ
            raise TrainError("--temperature must be above 0 (GRPO compares sampled "
                             "completions) and at most 5")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise TrainError("--warmup-ratio must be in [0, 1)")
        if self.beta < 0 or not 0.0 <= self.lora_dropout < 1.0 or self.learning_rate <= 0:
            raise TrainError("--beta must be >= 0, --lora-dropout in [0, 1), --learning-rate > 0")
        if self.generation_prompts > self.batch_size or self.batch_size % self.generation_prompts:
            raise TrainError("--generation-prompts must divide --batch-size")
        if self.init_adapter is not None and not (
                Path(self.init_adapter) / "adapter_config.json").is_file():
            raise TrainError(f"--init-adapter {self.init_adapter}: not a PEFT adapter folder "
                             "(no adapter_config.json); give e.g. `rmjudge-train sft`'s "
                             "OUTPUT/adapter")
        if (self.generation_prompts * self.num_generations) % self.micro_batch:
            raise TrainError("--micro-batch must divide --generation-prompts x --num-generations "
                             f"({self.generation_prompts * self.num_generations})")

    @property
    def completions_per_step(self) -> int:
        return self.batch_size * self.num_generations

    @property
    def grad_accum(self) -> int:
        return self.completions_per_step // self.micro_batch


def is_heldout(source_id: str, fraction: float, seed: int) -> bool:
    """Held-out split by source item (an item's Pref and Refl examples stay together)."""
    return derive_seed(seed, source_id, "heldout") % 10_000 < round(fraction * 10_000)


def split(examples: list[dict], s: GRPOSettings) -> tuple[list[dict], list[dict]]:
    train = [e for e in examples if not is_heldout(e["source_id"], s.eval_fraction, s.seed)]
    held = [e for e in examples if is_heldout(e["source_id"], s.eval_fraction, s.seed)]
    return train, held[: s.eval_max_items]


def check_split_size(s: GRPOSettings, n_examples: int, n_train: int) -> None:
    """Refuse a run that would train 0 steps: TRL drops an incomplete batch of prompts, so a
    training split smaller than one step's prompts trains nothing and saves an untouched
    adapter."""
    if n_train >= s.batch_size:
        return
    held = n_examples - n_train
    noun = "example" if n_train == 1 else "examples"
    raise TrainError(
        f"{s.data}: {n_examples} examples, {held} held out by --eval-fraction {s.eval_fraction}, "
        f"leaving {n_train} training {noun}, fewer than --batch-size {s.batch_size} (prompts "
        "per optimizer step), so training would run 0 steps; build more data, lower "
        "--batch-size (with --generation-prompts dividing it) or lower --eval-fraction")


def find_checkpoint(output_dir: str, resume: str | None) -> str | None:
    """The checkpoint to resume from: a given path, or the latest in output_dir ('latest')."""
    if resume is None:
        return None
    if resume != "latest":
        if not (Path(resume) / "trainer_state.json").exists():
            raise TrainError(f"--resume {resume}: not a checkpoint directory (no "
                             "trainer_state.json)")
        return resume
    ckpts = sorted(Path(output_dir).glob("checkpoint-*"),
                   key=lambda p: int(p.name.split("-")[-1]) if p.name.split("-")[-1].isdigit() else -1)
    ckpts = [c for c in ckpts if (c / "trainer_state.json").exists()]
    if not ckpts:
        raise TrainError(f"--resume: no checkpoint in {output_dir}; start without --resume")
    return str(ckpts[-1])


def jsonl_log_callback(path: Path, progress: Callable[[dict], None] | None):
    from transformers import TrainerCallback

    class JsonlLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if not logs:
                return
            rec = {"step": state.global_step, "epoch": state.epoch, **logs}
            with open(path, "ab") as f:
                f.write(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            if progress:
                progress(rec)

    return JsonlLog()


def _task_counts(examples: list[dict]) -> dict[str, int]:
    return {t: sum(e["task"] == t for e in examples) for t in ("pref", "refl")}


def _ratio(counts: dict[str, int]) -> str:
    return (f"{counts['pref'] / counts['refl']:.2f}:1" if counts["refl"]
            else f"{counts['pref']}:0")


def filter_by_length(examples: list[dict], n_tokens: Callable[[dict], int],
                     max_prompt_tokens: int, keep_mix: bool, seed: int
                     ) -> tuple[list[dict], dict[str, Any]]:
    """Leave out examples whose prompt has more than `max_prompt_tokens` tokens and, with
    `keep_mix`, subsample the task that lost fewer so that the Pref:Refl mix stays as the input
    had it (Refl prompts carry two analyses and are the ones mostly over the limit; without
    this the real mix drifts above the configured 4:1). The subsampling is
    `training.data.mix`, as build-data mixes. Returns the kept examples and the counts per
    task: before, dropped as too long, dropped to keep the mix, kept."""
    before = _task_counts(examples)
    fit = [e for e in examples if n_tokens(e) <= max_prompt_tokens]
    fitting = _task_counts(fit)
    kept = fit
    if keep_mix and before["pref"] and before["refl"] and fitting != before:
        pref = [e for e in fit if e["task"] == "pref"]
        refl = [e for e in fit if e["task"] == "refl"]
        if pref and refl:
            kept = mix(pref, refl, f"{before['pref']}:{before['refl']}", seed, Stats())
    after = _task_counts(kept)
    report = {
        "max_prompt_tokens": max_prompt_tokens,
        "keep_mix": keep_mix,
        "ratio_before": _ratio(before),
        "ratio_after": _ratio(after),
        **{t: {"examples": before[t], "too_long": before[t] - fitting[t],
               "dropped_for_mix": fitting[t] - after[t], "kept": after[t]}
           for t in ("pref", "refl")},
    }
    return kept, report


def format_length_report(r: dict[str, Any]) -> str:
    """One line of the per-task counts `filter_by_length` returns."""
    parts = [f"{t.capitalize()} kept {r[t]['kept']} of {r[t]['examples']} "
             f"({r[t]['too_long']} over {r['max_prompt_tokens']} prompt tokens, "
             f"{r[t]['dropped_for_mix']} left out to keep the mix)" for t in ("pref", "refl")]
    return "; ".join(parts) + f"; Pref:Refl {r['ratio_before']} -> {r['ratio_after']}"


def prepare_dataset(examples: list[dict], tokenizer, max_prompt_tokens: int,
                    keep_mix: bool = True, seed: int = 0):
    """TRL dataset: the rendered prompt text plus the columns the reward reads, without the
    over-long prompts (`filter_by_length`); the token ids of each prompt text as the inference
    engine makes them (`training.tokens`); and the per-task counts of the length filter."""
    from datasets import Dataset

    from rmjudge.training.tokens import encode_prompt

    ids_of = {e["id"]: encode_prompt(tokenizer, e["prompt"]) for e in examples}
    kept, report = filter_by_length(examples, lambda e: len(ids_of[e["id"]]),
                                    max_prompt_tokens, keep_mix, seed)
    kept_ids = {e["id"] for e in kept}
    rows, ids_by_text = [], {}
    for e in examples:  # the data's order, whatever the subsampling drew
        if e["id"] not in kept_ids:
            continue
        text = render_prompt(tokenizer, e["prompt"])
        ids_by_text[text] = ids_of[e["id"]]
        rows.append({"prompt": text, "task": e["task"], "label": int(e["label"]), "id": e["id"]})
    return Dataset.from_list(rows), report, ids_by_text


# The first TRL with what this module uses: `GRPOTrainer(rollout_func=f)` calling
# f(prompts, trainer), and the prompt tokenization step `GRPOTrainer._tokenize_prompts`
# (returning ids, images, multimodal fields) that `engine_tokenized_trainer` hooks; also
# `loss_type="dapo"` and `generation_batch_size`. pyproject.toml's `train` extra pins it.
TRL_MIN = "0.29.1"


def engine_tokenized_trainer(trainer_cls, ids_by_text: dict[str, list[int]]):
    """`trainer_cls` (TRL's GRPOTrainer) feeding the prompts' engine-made token ids to
    generation instead of re-tokenizing their text, which would parse special-token strings
    inside the data (e.g. `<|im_end|>` in a response) as control tokens. Hooks the trainer's
    prompt tokenization step; prompts it does not know are tokenized by TRL as before. A TRL
    without that step (older than `TRL_MIN`) is refused: the hook would silently not apply."""
    if not callable(getattr(trainer_cls, "_tokenize_prompts", None)):
        from importlib.metadata import PackageNotFoundError, version

        try:
            have = version("trl")
        except PackageNotFoundError:
            have = "unknown"
        raise TrainError(f"rmjudge-train grpo needs TRL {TRL_MIN} or newer (installed: {have}); "
                         f"{install_hint('train')} to upgrade it")

    class EngineTokenizedGRPOTrainer(trainer_cls):
        def _tokenize_prompts(self, prompts: list):
            if prompts and all(isinstance(p, str) and p in ids_by_text for p in prompts):
                return [list(ids_by_text[p]) for p in prompts], None, {}
            return super()._tokenize_prompts(prompts)

    return EngineTokenizedGRPOTrainer


GRPO = "rmjudge-train grpo"


def trl_loss_types() -> list[str]:
    """The GRPO losses the installed TRL names in its `GRPOConfig.loss_type` help ("Supported
    values are 'grpo', 'dr_grpo', ..."); empty when it names none in that form."""
    import re
    from dataclasses import fields

    from trl import GRPOConfig

    text = next((f.metadata.get("help", "") for f in fields(GRPOConfig) if f.name == "loss_type"),
                "")
    m = re.search(r"Supported values are (.*?)\.", text)
    return re.findall(r"'([a-z_]+)'", m.group(1)) if m else []


def check_loss_type(loss_type: str) -> None:
    """TrainError for a --loss-type the installed TRL does not name; TRL itself refuses it only
    at the first loss, after the model loaded and the first completions were generated."""
    import trl

    names = trl_loss_types()
    if names and loss_type not in names:
        raise TrainError(f"--loss-type {loss_type}: TRL {trl.__version__} knows "
                         f"{', '.join(names)}; give one of them (dapo is rmjudge's default)")


def check_output(s: GRPOSettings, overwrite: bool = False) -> None:
    """Refuse an output folder that is an input or holds files another command wrote
    (training.outputs), before anything loads."""
    from rmjudge.training.outputs import check_output_dir

    gguf = str(Path(s.model) / s.gguf_file) if s.gguf_file else None
    check_output_dir(s, GRPO, inputs=(s.data, s.model, gguf, s.init_adapter),
                     overwrite=overwrite)


def run_grpo(s: GRPOSettings, resume: str | None = None,
             progress: Callable[[dict], None] | None = None, overwrite: bool = False,
             say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`rmjudge-train grpo` as one call: the output folder is checked before the training
    extras are (a wrong -o is reported first), then `train`."""
    from rmjudge.core.extras import TRAIN, require

    check_output(s, overwrite)
    require(GRPO, "train", TRAIN + ("trl",))
    return train(s, resume=resume, progress=progress, overwrite=overwrite, say=say)


def train(s: GRPOSettings, resume: str | None = None,
          progress: Callable[[dict], None] | None = None,
          rollout_func: Callable | None = None, overwrite: bool = False,
          say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run GRPO (resuming when asked), save the adapter, evaluate greedily; a summary dict.

    `rollout_func` replaces the trainer's own `model.generate` (TRL's rollout-function hook:
    an external generation server, or scripted completions in tests). `say` gets one-line
    notes before training (the per-task counts of the prompt-length filter).

    Steps: check the folder and the data (nothing loaded yet), claim the folder and write the
    held-out split, load the base, filter the prompts by length, build the trainer, train
    (checkpoints staged aside), save the adapter, evaluate, write training.json.
    """
    from rmjudge.files import write_file

    from rmjudge.training.outputs import StagedCheckpoints, claim_output_dir

    check_output(s, overwrite)
    checkpoint = find_checkpoint(s.output_dir, resume)
    examples, prompt_format = _read_data(s)
    train_ex, held = split(examples, s)
    check_split_size(s, len(examples), len(train_ex))
    src = ModelSource.parse(s.model, s.gguf_file)

    # the training libraries load (or fail) before the folder is claimed
    import peft  # noqa: F401
    import torch  # noqa: F401
    import trl  # noqa: F401

    from rmjudge.training.evaluate import evaluate

    check_loss_type(s.loss_type)
    out = Path(s.output_dir)
    claim_output_dir(s, GRPO)
    write_file(str(out / "heldout.jsonl"), b"".join(orjson.dumps(e) + b"\n" for e in held))

    base_dir, tokenizer, model = _load_model(s, src)
    dataset, lengths, ids_by_text = _training_prompts(s, train_ex, tokenizer, say)

    staged = StagedCheckpoints(out, s.save_total_limit)
    trainer = _make_trainer(s, model, tokenizer, dataset, ids_by_text,
                            grpo_config(s, staged.path), staged, progress, rollout_func)
    write_file(str(out / "settings.json"), (json.dumps(asdict(s), indent=2) + "\n").encode())
    result = train_staged(trainer, staged, checkpoint)
    adapter_dir = out / "adapter"
    _save_adapter(trainer, tokenizer, adapter_dir, prompt_format)

    trained = trainer.model
    trained.eval()
    bf16 = use_bf16(s.precision, TrainError)
    eval_res = evaluate(trained, tokenizer, held, s.max_completion_length,
                        s.eval_batch, bf16) if held else None
    summary = {
        "settings": asdict(s),
        "base_model_dir": base_dir,
        "prompt_suffixes": sorted({e.get("suffix") or "" for e in examples}),
        "examples": len(examples),
        "train_examples": len(dataset),
        "train_prompts_too_long": lengths["pref"]["too_long"] + lengths["refl"]["too_long"],
        "prompt_length_filter": lengths,
        "prompt_format": prompt_format,
        "criteria": sorted({e["criteria"] for e in examples if e.get("criteria")}),
        "heldout_examples": len(held),
        "steps": trainer.state.global_step,
        "resumed_from": checkpoint,
        "precision": precision_name(bf16),
        "train_metrics": result.metrics,
        "last_log": _last_log(trainer.state.log_history),
        "eval": eval_res.as_dict() if eval_res else None,
        "adapter": str(adapter_dir),
    }
    write_file(str(out / "training.json"),
               (json.dumps(summary, indent=2, default=str) + "\n").encode())
    return summary


def _read_data(s: GRPOSettings) -> tuple[list[dict], Any]:
    """The training examples and the prompt format they were built with."""
    try:
        examples = read_examples(s.data)
        return examples, check_prompt_format(examples, s.data)
    except DataError as exc:
        raise TrainError(str(exc)) from None


def _load_model(s: GRPOSettings, src: ModelSource):
    """(base folder, tokenizer, model): the base as an HF folder, loaded in --quantization
    (made ready for k-bit training under nf4)."""
    from peft import prepare_model_for_kbit_training

    base_dir = materialize(src)
    tokenizer = load_tokenizer(ModelSource(base_dir))
    model = load_base(base_dir, s.quantization)
    if s.quantization == "nf4":
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=s.gradient_checkpointing)
    return base_dir, tokenizer, model


def _training_prompts(s: GRPOSettings, train_ex: list[dict], tokenizer,
                      say: Callable[[str], None] | None):
    """The TRL dataset of the training split without over-long prompts (`prepare_dataset`),
    its length report and the prompts' engine token ids; refused when fewer than one step's
    prompts are left."""
    dataset, lengths, ids_by_text = prepare_dataset(train_ex, tokenizer, s.max_prompt_tokens,
                                                    s.keep_mix, s.seed)
    too_long = lengths["pref"]["too_long"] + lengths["refl"]["too_long"]
    if say:
        say(format_length_report(lengths))
    if len(dataset) < s.batch_size:
        raise TrainError(f"{s.data}: {too_long} of {len(train_ex)} training prompts are longer "
                         f"than --max-prompt-tokens {s.max_prompt_tokens}, leaving "
                         f"{len(dataset)} ({format_length_report(lengths)}), fewer than "
                         f"--batch-size {s.batch_size} (prompts per step), so no step would "
                         "run; raise --max-prompt-tokens or lower --batch-size")
    return dataset, lengths, ids_by_text


def grpo_config(s: GRPOSettings, output_dir: str):
    """TRL's GRPOConfig of a run, checkpointing into `output_dir` (the staged folder)."""
    import torch
    from trl import GRPOConfig

    cuda = torch.cuda.is_available()
    bf16 = use_bf16(s.precision, TrainError)
    return GRPOConfig(
        output_dir=output_dir,
        num_train_epochs=s.epochs,
        max_steps=s.max_steps,
        per_device_train_batch_size=s.micro_batch,
        gradient_accumulation_steps=s.grad_accum,
        generation_batch_size=s.generation_prompts * s.num_generations,
        num_generations=s.num_generations,
        temperature=s.temperature,
        top_p=1.0,
        max_completion_length=s.max_completion_length,
        learning_rate=s.learning_rate,
        lr_scheduler_type="constant_with_warmup" if s.max_steps > 0 and s.max_steps < 20 else "cosine",
        warmup_steps=s.warmup_ratio,  # a float in [0, 1) is a share of the steps
        beta=s.beta,
        # pinned, not inherited: TRL's default loss has changed between releases
        loss_type=s.loss_type,
        # No stop at `</Result>`: TRL's transformers generation takes no stop strings (it calls
        # `generate` without the tokenizer that `stop_strings` needs, and masks a completion
        # only after EOS), so a completion runs to EOS or max_completion_length. The reward
        # reads it only up to the first `</Result>`, where inference stops (training.reward).
        logging_steps=s.logging_steps,
        save_strategy="steps",
        save_steps=s.save_steps,
        save_total_limit=s.save_total_limit,
        seed=s.seed,
        data_seed=s.seed,
        bf16=bf16,
        fp16=False,
        use_cpu=not cuda,
        gradient_checkpointing=s.gradient_checkpointing,
        report_to="none",
        remove_unused_columns=False,
        log_completions=False,
        disable_tqdm=True,
    )


def _make_trainer(s: GRPOSettings, model, tokenizer, dataset, ids_by_text, config, staged,
                  progress, rollout_func):
    """The GRPO trainer: a new LoRA adapter, or --init-adapter continued; the verdict reward;
    engine-made prompt ids; progress to `progress` and log.jsonl, checkpoints to `staged`."""
    from trl import GRPOTrainer

    from rmjudge.training.reward import verdict_reward

    if s.init_adapter:
        # continue the given adapter: TRL keeps a frozen copy of it as the KL reference
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, s.init_adapter, is_trainable=True)
        peft_config = None
    else:
        check_target_modules(model, s)
        peft_config = lora_config(s)
    trainer = engine_tokenized_trainer(GRPOTrainer, ids_by_text)(
        model=model, reward_funcs=[verdict_reward], args=config, train_dataset=dataset,
        processing_class=tokenizer, peft_config=peft_config,
        callbacks=[jsonl_log_callback(Path(s.output_dir) / "log.jsonl", progress),
                   staged.callback()],
        rollout_func=rollout_func,
    )
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # progress goes through `progress` and log.jsonl
    return trainer


def train_staged(trainer, staged, checkpoint: str | None):
    """Train (from `checkpoint` when resuming); checkpoints are built aside and moved in whole,
    and the trainer state is saved beside them."""
    try:
        result = trainer.train(resume_from_checkpoint=checkpoint)
        staged.collect()
    finally:
        staged.close()
    staged.write_state(trainer)
    return result


def _save_adapter(trainer, tokenizer, adapter_dir: Path, prompt_format) -> None:
    """OUTPUT_DIR/adapter: the trained LoRA adapter with its tokenizer and adapter info."""
    from rmjudge.files import save_folder

    save_folder(str(adapter_dir), trainer.save_model, tokenizer.save_pretrained,
                # `rmjudge-export lora` copies it
                functools.partial(write_adapter_info, prompt_format=prompt_format))


def _last_log(history: list[dict]) -> dict:
    for rec in reversed(history):
        if "reward" in rec:
            return rec
    return history[-1] if history else {}


def steps_per_epoch(n_examples: int, batch_size: int) -> int:
    return math.ceil(n_examples / batch_size)
