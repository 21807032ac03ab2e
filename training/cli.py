"""`rmjudge-train`: sft, build-data, grpo, eval. Thin click layers over training.sft/data/grpo/
evaluate.

    rmjudge-train sft pairs.jsonl -o runs/warm                      # format warm-start

    rmjudge-train build-data pairs.jsonl -o train.jsonl            # rollouts with the embedded GGUF
    rmjudge-train grpo --model DIR --data train.jsonl -o runs/judge
    rmjudge-train grpo ... --resume                                 # latest checkpoint in -o
    rmjudge-train eval --model DIR --adapter runs/judge/adapter --data runs/judge/heldout.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from rmjudge import __version__
from rmjudge.cli.server_options import server_options, server_settings
from rmjudge.cli.common import ExtrasGroup
from rmjudge.cli.mapping_options import dataset_options, input_source, map_option
from rmjudge.cli.options import settings_options
from rmjudge.core.extras import TRAIN, require

from rmjudge.io.mapping import parse_map

from training.data import DataConfig, DataError, build_data, check_outputs, stats_path
from training.grpo import GRPOSettings
from training.sft import SFTSettings


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        click.echo(text, err=True)


@click.group(cls=ExtrasGroup)
@click.version_option(__version__, prog_name="rmjudge-train")
def main() -> None:
    """Train a ReflectRM judge: rollouts -> unified Pref + Refl data -> GRPO QLoRA adapter."""


# -- build-data ------------------------------------------------------------------------------


def _rollout_source(model, gguf_file, backend, sampling, parallel, threads, server=None,
                    lora=None):
    """(source, description): llama.cpp on a GGUF (with a GGUF LoRA adapter when `lora`), an
    OpenAI-compatible server (`server`: ServerSettings; `model`, when a GGUF, gives its chat
    template), or transformers on an HF model."""
    from training.rollouts import EngineRollouts, TransformersRollouts

    if server is not None:
        from rmjudge.engine import load_engine
        from rmjudge.core.settings import EngineSettings

        engine = load_engine(EngineSettings(model=model), server=server)
        return EngineRollouts(engine, sampling), engine.describe()

    gguf = None
    if model is None:
        from rmjudge.engine.models import resolve_model

        gguf = resolve_model(None)
    elif gguf_file:
        gguf = str(Path(model) / gguf_file)
    elif model.lower().endswith(".gguf"):
        gguf = model
    if backend == "llama" and gguf is None:
        raise DataError("--backend llama needs a GGUF: --model file.gguf (or --gguf-file)")
    if lora is not None and (server is not None or gguf is None or backend == "transformers"):
        raise DataError("--lora is a GGUF LoRA applied by llama.cpp: use it with a GGUF --model "
                        "(or the embedded default) and without --server or --backend "
                        "transformers")
    if gguf is not None and backend != "transformers":
        from rmjudge.engine import load_engine
        from rmjudge.core.settings import EngineSettings

        engine = load_engine(EngineSettings(model=gguf, parallel=parallel, threads=threads,
                                            lora=lora))
        return EngineRollouts(engine, sampling), (f"llama.cpp on {gguf}"
                                                  + (f" + LoRA {lora}" if lora else ""))
    from training.hf import ModelSource, load_base, load_tokenizer, materialize, model_suffix

    src = ModelSource.parse(gguf or model)
    require("the transformers backend", "train", TRAIN)
    base = materialize(src)
    hf_model = load_base(base, quantization="none")
    hf_model.eval()
    return (TransformersRollouts(hf_model, load_tokenizer(ModelSource(base)), sampling,
                                 model_suffix(hf_model), src.name),
            f"transformers on {src.name}")


def _template_source(model, gguf_file, criteria):
    """What `sft --analyses template` needs of the base without sampling from it: the prompt
    suffix of its family (read from the GGUF's metadata with the `gguf` package, no llama.cpp
    load; or from an HF folder's config)."""
    from training.sft_templates import TemplateSource

    if model is not None and not gguf_file and not model.lower().endswith(".gguf"):
        from rmjudge.prompts import suffix_for_model

        cfg = Path(model) / "config.json"
        arch = json.loads(cfg.read_text()).get("model_type") if cfg.is_file() else None
        return TemplateSource(suffix_for_model(arch, model), criteria)
    import gguf as gguf_lib

    from rmjudge.engine.models import resolve_model
    from rmjudge.prompts import suffix_for_model

    path = str(Path(model) / gguf_file) if model and gguf_file else resolve_model(model)
    fields = gguf_lib.GGUFReader(path).fields

    def meta(key: str) -> str | None:  # a string field, as llama.cpp reads it (engine/vocab.py)
        f = fields.get(key)
        return bytes(f.parts[f.data[0]]).decode("utf-8", "replace") if f is not None else None

    name = meta("general.name") or Path(path).name
    return TemplateSource(suffix_for_model(meta("general.architecture"), name), criteria)


def _limit_note(limited_by: str) -> str:
    if limited_by in ("refl", "pref"):
        return f"; all {limited_by.capitalize()} kept, the other kind subsampled to the ratio"
    return f"; {limited_by}" if limited_by else ""


def format_stats(st: dict) -> str:
    lines = [
        f"rows read            {st['rows_read']} (bad {st['rows_bad']}, unlabelled "
        f"{st['rows_unlabelled']})",
        f"items sampled        {st['items']} (from cache {st['items_from_cache']}, unsampled "
        f"{st['items_unsampled']})",
        f"rollouts             {st['rollouts']} (correct {st['rollouts_correct']}, base accuracy "
        f"{st['base_accuracy']:.1%})",
        f"parse failures       {st['parse_failures']} ({st['parse_failure_rate']:.1%}; counted "
        "as incorrect)",
        f"all-correct dropped  {st['all_correct_dropped']}",
        f"all-incorrect        {st['all_incorrect']} (kept for Pref)",
        f"mixed-outcome items  {st['mixed']}",
        f"Pref available       {st['pref_available']}",
        f"Refl built           {st['refl_built']} (mixed items without a usable critique pair: "
        f"{st['refl_unusable']})",
        f"Pref kept            {st['pref_kept']} (label 1: {st['pref_label_1']})",
        f"Refl kept            {st['refl_kept']} (label 1: {st['refl_label_1']})",
        f"ratio                {st['final_ratio']} (requested {st['ratio_requested']}"
        + _limit_note(st["limited_by"]) + ")",
    ]
    return "\n".join(lines)


@main.command("build-data")
@click.argument("source")
@click.option("-o", "--output", required=True, help="Training file: .jsonl or .parquet.")
@click.option("--model", default=None, help="Base model: a GGUF (llama.cpp; default: the "
              "embedded model) or an HF directory (transformers).")
@click.option("--gguf-file", default=None, help="GGUF file name inside --model.")
@click.option("--backend", type=click.Choice(["auto", "llama", "transformers"]), default="auto",
              show_default=True, help="auto: llama.cpp for a GGUF, transformers otherwise.")
@click.option("--samples", default=8, show_default=True, help="Rollouts per item.")
@click.option("--temperature", default=1.0, show_default=True)
@click.option("--max-tokens", default=1024, show_default=True, help="Max tokens per rollout.")
@click.option("--ratio", default="4:1", show_default=True, help="Pref:Refl; 1:0 = RFT baseline.")
@click.option("--seed", default=0, show_default=True)
@click.option("--limit", type=int, default=None, help="Read at most N rows.")
@map_option
@dataset_options
@click.option("--cache", default=None, help="Rollout cache (default: OUTPUT.rollouts.jsonl).")
@click.option("--chunk-items", default=16, show_default=True, help="Items per generate call.")
@click.option("--parallel", type=int, default=None, help="llama.cpp live sequences per batch.")
@click.option("--threads", type=int, default=None, help="llama.cpp CPU threads.")
@click.option("--lora", default=None, help="A GGUF LoRA adapter applied to the GGUF --model "
              "(e.g. a warm-start adapter from `rmjudge-export lora`).")
@click.option("--criteria", default=None, metavar="NAME|@FILE|TEXT",
              help="Judging criteria in both prompts, as `rmjudge score --criteria`: a built-in "
              "name, @FILE or the text (train the judge for that rubric).")
@click.option("--overwrite", is_flag=True, help="Replace an existing -o (and its stats file) "
              "that build-data did not write; an input is never replaced.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@server_options
def build_data_cmd(source, output, model, gguf_file, backend, samples, temperature, max_tokens,
                   ratio, seed, limit, mapping, cache, chunk_items, parallel, threads, lora,
                   criteria, overwrite, quiet, **kw):
    """Sample rollouts from the base model and write unified Pref + Refl training data
    (in-process, or through an OpenAI-compatible server with --server URL)."""
    from training.rollouts import SamplingSettings

    server = server_settings(kw)
    source = input_source(source, kw)

    config = DataConfig(ratio=ratio, seed=seed, limit=limit, mapping=parse_map(mapping),
                        chunk_items=chunk_items)
    if samples < 2:
        raise DataError("--samples must be at least 2 (mixed outcomes need two rollouts)")
    from rmjudge.prompts.criteria import resolve_criteria

    sampling = SamplingSettings(samples=samples, temperature=temperature,
                                max_tokens=max_tokens, seed=seed,
                                criteria=resolve_criteria(criteria))
    gguf = str(Path(model) / gguf_file) if model and gguf_file else None
    check_outputs(source, output, cache, inputs=(model, gguf, lora), overwrite=overwrite)
    src, desc = _rollout_source(model, gguf_file, backend, sampling, parallel, threads,
                                server, lora)
    _say(quiet, f"rollouts: {samples} per item, temperature {temperature}, {desc}")
    done = [0]

    def progress(n: int) -> None:
        done[0] += n
        _say(quiet, f"  {done[0]} items")

    stats = build_data(source, output, src, config, cache_path=cache, progress=progress,
                       overwrite=overwrite)
    click.echo(format_stats(stats.as_dict()))
    click.echo(f"wrote {output} and {stats_path(output)}")


# -- grpo ------------------------------------------------------------------------------------

@main.command("grpo")
@settings_options(GRPOSettings)
@click.option("--resume", is_flag=False, flag_value="latest", default=None,
              help="Continue from a checkpoint: --resume (latest in -o) or --resume DIR.")
@click.option("--overwrite", is_flag=True, help="Write into an -o folder that holds files "
              "another command wrote (files of the same name are replaced).")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def grpo_cmd(resume, overwrite, quiet, **kw):
    """GRPO + QLoRA on the unified data; saves checkpoints, the adapter and a greedy eval."""
    from training.grpo import check_output, format_length_report, train

    def progress(rec: dict) -> None:
        keys = ("reward", "reward_pref", "reward_refl", "parse_failure_rate", "kl", "loss")
        parts = [f"{k} {rec[k]:.4g}" for k in keys if isinstance(rec.get(k), (int, float))]
        if parts:
            _say(quiet, f"step {rec['step']}: " + ", ".join(parts))

    settings = GRPOSettings(**kw)
    check_output(settings, overwrite)
    require("rmjudge-train grpo", "train", TRAIN + ("trl",))
    summary = train(settings, resume=resume, progress=progress, overwrite=overwrite,
                    say=lambda t: _say(quiet, t))
    click.echo(f"adapter: {summary['adapter']}  ({summary['steps']} steps, "
               f"{summary['train_examples']} training examples)")
    click.echo("prompt length filter: " + format_length_report(summary["prompt_length_filter"]))
    if summary["eval"]:
        click.echo("held-out eval: " + json.dumps(summary["eval"]))
    click.echo(f"summary: {Path(settings.output_dir) / 'training.json'}")


# -- sft (format warm-start) -----------------------------------------------------------------


@main.command("sft")
@settings_options(SFTSettings)
@click.option("--backend", type=click.Choice(["auto", "llama", "transformers"]), default="auto",
              show_default=True, help="Rollouts: llama.cpp for a GGUF, transformers otherwise.")
@click.option("--resume", is_flag=False, flag_value="latest", default=None,
              help="Continue from a checkpoint: --resume (latest in -o) or --resume DIR.")
@click.option("--overwrite", is_flag=True, help="Write into an -o folder that holds files "
              "another command wrote (files of the same name are replaced).")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def sft_cmd(backend, resume, overwrite, quiet, **kw):
    """Format warm-start: supervised targets (base analyses + gold verdicts, both tasks, both
    orders) so a weak base learns to write parseable verdicts before build-data and GRPO."""
    from training.rollouts import SamplingSettings
    from training.sft import check_output, run

    def progress(rec: dict) -> None:
        if isinstance(rec.get("loss"), (int, float)):
            _say(quiet, f"step {rec['step']}: loss {rec['loss']:.4g}")

    from rmjudge.prompts.criteria import resolve_criteria

    settings = SFTSettings(**kw)
    criteria = resolve_criteria(settings.criteria)  # a bad value fails before anything loads
    check_output(settings, overwrite)
    require("rmjudge-train sft", "train", TRAIN)
    if settings.analyses == "template":
        src = _template_source(settings.model, settings.gguf_file, criteria)
        _say(quiet, "targets: templated analyses, no base rollouts (--analyses template)")
    else:
        sampling = SamplingSettings(samples=settings.samples,
                                    temperature=settings.rollout_temperature,
                                    max_tokens=settings.rollout_max_tokens, seed=settings.seed,
                                    criteria=criteria)
        src, desc = _rollout_source(settings.model, settings.gguf_file, backend, sampling,
                                    settings.parallel, settings.threads)
        _say(quiet, f"rollouts: {settings.samples} per item, {desc}")
    summary = run(settings, src, resume=resume, progress=progress,
                  say=lambda t: _say(quiet, t), overwrite=overwrite)
    click.echo(f"model: {summary['model']}  ({summary['steps']} steps, "
               f"{summary['train_examples']} examples, loss {summary['first_loss']} -> "
               f"{summary['last_loss']})")
    for when in ("check_before", "check_after"):
        c = summary[when]
        if c:
            click.echo(f"{when.split('_')[1]:6}: parse failures {c['parse_failures']} of "
                       f"{c['prompts']} greedy Pref generations ({c['parse_failure_rate']:.1%}), "
                       f"slot 1 {c['slot_1_share']:.1%}")
    click.echo(f"summary: {Path(settings.output_dir) / 'sft.json'}")


# -- eval ------------------------------------------------------------------------------------


@main.command("eval")
@click.option("--model", required=True, help="Base model: HF directory or a .gguf file.")
@click.option("--gguf-file", default=None, help="GGUF file name inside --model.")
@click.option("--adapter", default=None, help="LoRA adapter directory (none: the base alone).")
@click.option("--data", required=True, help="Examples (e.g. OUTPUT_DIR/heldout.jsonl).")
@click.option("--max-tokens", default=1024, show_default=True)
@click.option("--limit", type=int, default=None, help="Evaluate at most N examples.")
@click.option("--quantization", type=click.Choice(["nf4", "none"]), default="none",
              show_default=True)
@click.option("--batch", default=8, show_default=True, help="Prompts per generate call.")
def eval_cmd(model, gguf_file, adapter, data, max_tokens, limit, quantization, batch):
    """Greedy accuracy and positional consistency (Pref in both orders) of a judge."""
    from training.data import read_examples
    from training.evaluate import evaluate
    from training.hf import ModelSource, load_base, load_tokenizer, materialize

    examples = read_examples(data)[:limit] if limit else read_examples(data)
    src = ModelSource.parse(model, gguf_file)
    require("rmjudge-train eval", "train", TRAIN)
    base = materialize(src)
    m = load_base(base, quantization)
    if adapter:
        from peft import PeftModel

        m = PeftModel.from_pretrained(m, adapter)
    m.eval()
    res = evaluate(m, load_tokenizer(ModelSource(base)), examples, max_tokens, batch)
    click.echo(json.dumps(res.as_dict(), indent=2))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
