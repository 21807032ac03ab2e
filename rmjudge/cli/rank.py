"""`rmjudge rank`: rank K candidate responses per prompt with pairwise ReflectRM comparisons."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from rmjudge.cli.common import status
from rmjudge.cli.options import (engine_options, judge_options, settings_from,
                                 settings_options)
from rmjudge.cli.run_options import RUN_FIELDS, parse_run_options
from rmjudge.cli.server_options import server_options
from rmjudge.core.errors import EXIT_STRICT
from rmjudge.core.settings import setting
from rmjudge.rank.runner import RUN_OPTION_HELP, RankOptions
from rmjudge.rank.summary import refuse_nothing_ranked, render_summary
from rmjudge.runs.progress import run_display
from rmjudge.runs.setup import RunOptions


@dataclass(frozen=True)
class RankCall:
    """What `rank` is given besides how it ranks and judges."""

    source: str = setting(argument=True, metavar="INPUT")
    output: str | None = setting(None, "The ranked run store (.duckdb; default "
                                 "INPUT.ranked.duckdb); rerun to resume.",
                                 option=("-o", "--output"))
    strict: bool = setting(False, f"Exit {EXIT_STRICT} when any prompt or comparison lands in "
                           "errors.", flag="--strict")
    quiet: bool = setting(False, "No progress line and no summary.", flag="--quiet", short="-q")


@click.command("rank")
@settings_options(RankCall, only=("source", "output"))
@settings_options(RankOptions)
@judge_options
@engine_options
@server_options
@settings_options(RunOptions, only=RUN_FIELDS, helps=RUN_OPTION_HELP)
@settings_options(RankCall, only=("strict", "quiet"))
def command(**kw) -> None:
    """Rank the candidate responses of each prompt in INPUT: each compared pair is judged by
    ReflectRM in both orders, and the verdicts are aggregated into Bradley-Terry scores, win
    counts and a confidence per rank, stored with every comparison in a resumable run store
    (its `rankings` table). Layouts: a `responses` list column, UltraFeedback `completions`,
    RewardBench 2 `chosen`/`rejected` lists, RMB Best-of-N `bon_best`/`loser_list`, or one row
    per response with --group-by (docs/rank.md)."""
    from rmjudge.rank.runner import rank_input

    call, ropts = settings_from(RankCall, kw), settings_from(RankOptions, kw)
    source, output, quiet = call.source, call.output, call.quiet
    opts = parse_run_options(kw)
    summary = rank_input(source, output, opts, ropts, status=lambda line: status(line, quiet),
                         progress=None if quiet else run_display)
    if not quiet:
        from rmjudge.core.layout import output_width

        click.echo(render_summary(summary, output_width(sys.stderr)), err=True)
    refuse_nothing_ranked(summary, source)
    if call.strict and (summary.problems or summary.failed):
        sys.exit(EXIT_STRICT)
