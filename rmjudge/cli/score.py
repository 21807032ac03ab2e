"""`rmjudge score`: judge a file of preference pairs into a labelled table."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from rmjudge.cli.common import judge_input
from rmjudge.cli.mapping_options import input_source
from rmjudge.cli.options import judge_options, engine_options, settings_from, settings_options
from rmjudge.cli.run_options import run_options
from rmjudge.cli.server_options import server_options
from rmjudge.core.errors import EXIT_STRICT
from rmjudge.core.settings import setting
from rmjudge.runs.summaries import refuse_nothing_judged


@dataclass(frozen=True)
class ScoreCall:
    """What `score` is given besides the judging options: where from, where to, how to end."""

    source: str = setting(argument=True, metavar="INPUT")
    output: str | None = setting(None, "Output: .duckdb (default INPUT.judged.duckdb), .parquet "
                                 "or .jsonl.", option=("-o", "--output"))
    strict: bool = setting(False, f"Exit {EXIT_STRICT} when any row lands in errors.",
                           flag="--strict")
    dry_run: bool = setting(False, "Validate the input and estimate the work; load only the "
                            "tokenizer.", flag="--dry-run")
    quiet: bool = setting(False, "No progress line and no summary.", flag="--quiet", short="-q")


@click.command("score")
@settings_options(ScoreCall, only=("source", "output"))
@judge_options
@engine_options
@server_options
@run_options
@settings_options(ScoreCall, only=("strict", "dry_run", "quiet"))
def command(**kw) -> None:
    """Judge preference pairs in INPUT with ReflectRM, both orders, into a resumable labelled
    table.

    INPUT is a file (.jsonl, .parquet, .csv, also .gz/.zst/.bz2/.xz), file.duckdb:table, a
    folder of such files or a datasets.save_to_disk folder (DIR@split for one split of a
    DatasetDict), a quoted glob ('shards/*.parquet'), hf://datasets/ORG/NAME[@REVISION] for a
    Hub dataset (with --config/--split; needs the hub extra), or - for JSONL on stdin. Every
    form: docs/inputs.md."""
    call = settings_from(ScoreCall, kw)
    source, output = input_source(call.source, kw), call.output
    from rmjudge.cli.run_options import parse_run_options  # looked up per call (tests wrap it)

    opts = parse_run_options(kw)
    if call.dry_run:
        from rmjudge.cli.layout import echo
        from rmjudge.runs import setup as run

        echo(run.dry_run(source, opts).render())
        return
    summary = judge_input(source, output, opts, quiet=call.quiet)
    refuse_nothing_judged(summary, source, output)
    if call.strict and summary.errors:
        sys.exit(EXIT_STRICT)

