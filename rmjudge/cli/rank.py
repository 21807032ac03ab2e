"""`rmjudge rank`: rank K candidate responses per prompt with pairwise ReflectRM comparisons."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from rmjudge.cli.common import engine_activity, make_progress, status
from rmjudge.cli.options import (engine_options, judge_options, settings_from,
                                 settings_options)
from rmjudge.cli.score import RUN_FIELDS, parse_run_options
from rmjudge.cli.server_options import server_options
from rmjudge.core.errors import EXIT_STRICT, UserError
from rmjudge.core.settings import setting
from rmjudge.core.words import count
from rmjudge.rank.runner import RUN_OPTION_HELP, RankOptions
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

    def progress(total, engine):
        return make_progress(True, total, activity=engine_activity(engine))

    summary = rank_input(source, output, opts, ropts, status=lambda line: status(line, quiet),
                         progress=None if quiet else progress)
    if not quiet:
        from rmjudge.cli.layout import output_width

        click.echo(render_summary(summary, output_width(sys.stderr)), err=True)
    if summary.ranked == 0:
        raise UserError(f"nothing was ranked: {count(summary.prompts, 'prompt')} read from "
                        f"{source}, "
                        f"{summary.problems} of them in the errors table of {summary.output}; "
                        "fix the input (docs/rank.md) and rerun with --overwrite (it replaces "
                        "these error rows)")
    if call.strict and (summary.problems or summary.failed):
        sys.exit(EXIT_STRICT)


def render_summary(s, width: int | None = None) -> str:
    """The ranking's summary, its lines wrapped at spaces to `width` (None: as they are)."""
    from rmjudge.cli.score import error_lines
    from rmjudge.rank.outputs import top1_line

    what = ""
    if s.candidates:
        lo, hi = s.candidates
        what = (f" ({lo if lo == hi else f'{lo} to {hi}'} candidates per prompt ranked)")
    lines = [f"rmjudge: ranked {s.ranked} of {count(s.prompts, 'prompt')}{what}: "
             f"{count(s.judged, 'comparison')} judged, {s.skipped} already done, {s.failed} "
             f"failed, {count(s.rounds, 'round')} in {s.wall_seconds:.1f}s -> {s.output}"]
    if s.problem_kinds:
        lines += error_lines(s.problem_kinds, s.problem_rows)
    if s.strategies:
        lines.append("  strategy: " + ", ".join(f"{k} for {count(v, 'prompt')}"
                                                 for k, v in sorted(s.strategies.items())))
    if s.repeated:
        lines.append(f"  {count(s.repeated, 'prompt')} with repeated candidate texts: each text "
                     "compared once, its copies share its score")
    top1 = top1_line(s.own_rankings())
    if top1:
        lines.append(f"  {top1}")
    if s.others:
        lines.append(f"  the store also holds {count(s.others, 'ranked prompt')} that this input "
                     "does not name (an earlier, larger input or --limit); its rankings table, "
                     "eval and filter include them")
    for name, n in sorted(s.gold_elsewhere.items()):
        verb = "has" if n == 1 else "have"
        lines.append(f"  note: {count(n, 'prompt')} without gold ranks {verb} {name} on every "
                     f"completion: --gold-field {name} ranks against it")
    if s.wall_seconds > 0 and s.judged:
        lines.append(f"  {s.wall_seconds / s.judged:.1f} s/comparison, "
                     f"{s.generated_tokens / s.wall_seconds:.0f} generated tok/s")
    from rmjudge.cli.layout import wrap

    return wrap("\n".join(lines), width or 10**9)
