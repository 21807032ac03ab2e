"""`rmjudge-train`: sft, build-data, grpo, eval. Thin click layers over training.sft/build/grpo/
evaluate.

    rmjudge-train sft pairs.jsonl -o runs/warm                      # format warm-start

    rmjudge-train build-data pairs.jsonl -o train.jsonl            # rollouts with the embedded GGUF
    rmjudge-train grpo --model DIR --data train.jsonl -o runs/judge
    rmjudge-train grpo ... --resume                                 # latest checkpoint in -o
    rmjudge-train eval --model DIR --adapter runs/judge/adapter --data runs/judge/heldout.jsonl

Every option is generated from a settings dataclass (rmjudge.cli.options.settings_options): a
command parses its options into settings, makes one library call and prints the result.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import fields
from pathlib import Path

import click

from rmjudge import __version__
from rmjudge.cli.server_options import server_options, server_settings
from rmjudge.cli.common import ExtrasGroup
from rmjudge.cli.mapping_options import dataset_options, input_source, map_option
from rmjudge.cli.options import settings_from, settings_options

from rmjudge.training.build import BuildDataSettings, run_build_data
from rmjudge.training.controls import FolderControls, Quiet
from rmjudge.training.data import stats_path
from rmjudge.training.evaluate import EvalJudgeSettings
from rmjudge.training.grpo import GRPOSettings
from rmjudge.training.sft import SFTSettings
from rmjudge.training.sources import RolloutBackend


# bitsandbytes' CPU backend logs a warning when it is imported on a CPU with AVX512-BF16 and the
# optional `kernels` package (a faster CPU 4-bit kernel) is not installed: every command printed
# it, 4-bit or not. docs/training-guide.md says how to get that kernel.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        click.echo(text, err=True)


@click.group(cls=ExtrasGroup)
@click.version_option(__version__, prog_name="rmjudge-train")
def main() -> None:
    """Train a ReflectRM judge: rollouts -> unified Pref + Refl data -> GRPO QLoRA adapter."""


# -- build-data ------------------------------------------------------------------------------


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


# build-data lists its options around the input options (--map, --config, --split) as ever
_BUILD = [f.name for f in fields(BuildDataSettings)]
_BEFORE_MAP = tuple(_BUILD[:_BUILD.index("mapping")])
_AFTER_MAP = tuple(_BUILD[_BUILD.index("mapping") + 1:])


@main.command("build-data")
@settings_options(BuildDataSettings, only=_BEFORE_MAP)
@map_option
@dataset_options
@settings_options(BuildDataSettings, only=_AFTER_MAP)
@settings_options(Quiet)
@server_options
def build_data_cmd(**kw):
    """Sample rollouts from the base model and write unified Pref + Refl training data
    (in-process, or through an OpenAI-compatible server with --server URL)."""
    server = server_settings(kw)
    kw["source"] = input_source(kw["source"], kw)
    quiet = settings_from(Quiet, kw).quiet
    settings = settings_from(BuildDataSettings, kw)
    stats = run_build_data(settings, server, say=lambda t: _say(quiet, t))
    click.echo(format_stats(stats.as_dict()))
    click.echo(f"wrote {settings.output} and {stats_path(settings.output)}")


# -- grpo ------------------------------------------------------------------------------------

@main.command("grpo")
@settings_options(GRPOSettings)
@settings_options(FolderControls)
@settings_options(Quiet)
def grpo_cmd(**kw):
    """GRPO + QLoRA on the unified data; saves checkpoints, the adapter and a greedy eval."""
    from rmjudge.training.grpo import format_length_report, run_grpo

    quiet = settings_from(Quiet, kw).quiet
    folder = settings_from(FolderControls, kw)

    def progress(rec: dict) -> None:
        keys = ("reward", "reward_pref", "reward_refl", "parse_failure_rate", "kl", "loss")
        parts = [f"{k} {rec[k]:.4g}" for k in keys if isinstance(rec.get(k), (int, float))]
        if parts:
            _say(quiet, f"step {rec['step']}: " + ", ".join(parts))

    settings = settings_from(GRPOSettings, kw)
    summary = run_grpo(settings, resume=folder.resume, progress=progress,
                       overwrite=folder.overwrite, say=lambda t: _say(quiet, t))
    click.echo(f"adapter: {summary['adapter']}  ({summary['steps']} steps, "
               f"{summary['train_examples']} training examples)")
    click.echo("prompt length filter: " + format_length_report(summary["prompt_length_filter"]))
    if summary["eval"]:
        click.echo("held-out eval: " + json.dumps(summary["eval"]))
    click.echo(f"summary: {Path(settings.output_dir) / 'training.json'}")


# -- sft (format warm-start) -----------------------------------------------------------------


@main.command("sft")
@settings_options(SFTSettings)
@settings_options(RolloutBackend)
@settings_options(FolderControls)
@settings_options(Quiet)
def sft_cmd(**kw):
    """Format warm-start: supervised targets (base analyses + gold verdicts, both tasks, both
    orders) so a weak base learns to write parseable verdicts before build-data and GRPO."""
    from rmjudge.training.sft import warm_start

    quiet = settings_from(Quiet, kw).quiet
    folder = settings_from(FolderControls, kw)
    backend = settings_from(RolloutBackend, kw).backend

    def progress(rec: dict) -> None:
        if isinstance(rec.get("loss"), (int, float)):
            _say(quiet, f"step {rec['step']}: loss {rec['loss']:.4g}")

    settings = settings_from(SFTSettings, kw)
    summary = warm_start(settings, backend, resume=folder.resume, progress=progress,
                         say=lambda t: _say(quiet, t), overwrite=folder.overwrite)
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
@settings_options(EvalJudgeSettings)
def eval_cmd(**kw):
    """Greedy accuracy and positional consistency (Pref in both orders) of a judge."""
    from rmjudge.training.evaluate import evaluate_judge

    res = evaluate_judge(settings_from(EvalJudgeSettings, kw))
    click.echo(json.dumps(res.as_dict(), indent=2))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
