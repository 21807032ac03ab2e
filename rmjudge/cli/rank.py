"""`rmjudge rank`: rank K candidate responses per prompt with pairwise ReflectRM comparisons."""

from __future__ import annotations

import sys

import click

from rmjudge.cli.common import engine_activity, make_progress, status
from rmjudge.cli.options import engine_options, engine_settings, judge_options, judge_settings
from rmjudge.cli.server_options import server_options, server_settings
from rmjudge.core.errors import EXIT_STRICT, UserError
from rmjudge.rank.layouts import DEFAULT_MAX_CANDIDATES, GOLD_FIELDS, LAYOUTS
from rmjudge.rank.strategies import ROUND_ROBIN_MAX, STRATEGIES


@click.command("rank")
@click.argument("source", metavar="INPUT")
@click.option("-o", "--output", default=None,
              help="The ranked run store (.duckdb; default INPUT.ranked.duckdb); rerun to resume.")
@click.option("--strategy", type=click.Choice(STRATEGIES), default="auto", show_default=True,
              help=f"Which pairs are compared: every pair (round-robin), Swiss rounds (about "
              f"K/2 (log2 K + 1) comparisons), or auto (round-robin up to {ROUND_ROBIN_MAX} "
              "candidates, Swiss above).")
@click.option("--layout", type=click.Choice(LAYOUTS), default=None,
              help="The input's layout (default: recognized from the first row).")
@click.option("--group-by", default=None, metavar="COLUMN",
              help="One row per response: group rows into prompts by this prompt id column.")
@click.option("--gold-field", type=click.Choice(GOLD_FIELDS), default=GOLD_FIELDS[0],
              show_default=True, help="UltraFeedback: the completion score read as gold.")
@click.option("--max-candidates", type=click.IntRange(2, 128), default=DEFAULT_MAX_CANDIDATES,
              show_default=True,
              help="Prompts with more candidates are error rows (at most 128).")
@judge_options
@engine_options
@server_options
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Rank only the first N prompts.")
@click.option("--shard", default=None, metavar="I/N",
              help="Rank only shard I of N (stable partition by prompt id), for array jobs.")
@click.option("--commit-every", default=8, show_default=True,
              help="Commit results every N comparisons.")
@click.option("--overwrite", is_flag=True,
              help="Discard an existing output (a store no other run is writing) and start again.")
@click.option("--rejudge-changed", is_flag=True,
              help="On resume, judge again the comparisons whose prompt or candidates were "
              "edited since, replacing their verdicts (without it such a resume is refused).")
@click.option("--strict", is_flag=True,
              help=f"Exit {EXIT_STRICT} when any prompt or comparison lands in errors.")
@click.option("--quiet", "-q", is_flag=True, help="No progress line and no summary.")
def command(source: str, output: str | None, strategy: str, layout: str | None,
            group_by: str | None, gold_field: str, max_candidates: int, limit: int | None,
            shard: str | None, commit_every: int, overwrite: bool, rejudge_changed: bool,
            strict: bool, quiet: bool, **kw) -> None:
    """Rank the candidate responses of each prompt in INPUT: each compared pair is judged by
    ReflectRM in both orders, and the verdicts are aggregated into Bradley-Terry scores, win
    counts and a confidence per rank, stored with every comparison in a resumable run store
    (its `rankings` table). Layouts: a `responses` list column, UltraFeedback `completions`,
    RewardBench 2 `chosen`/`rejected` lists, RMB Best-of-N `bon_best`/`loser_list`, or one row
    per response with --group-by (docs/rank.md)."""
    from rmjudge.io.mapping import Mapper
    from rmjudge.rank.runner import RankOptions, rank_input
    from rmjudge.runs.setup import RunOptions, parse_shard

    js = judge_settings(kw)
    opts = RunOptions(js, engine_settings(kw), Mapper({}, seed=js.seed), limit=limit,
                      shard=parse_shard(shard), commit_every=commit_every, overwrite=overwrite,
                      rejudge_changed=rejudge_changed, server=server_settings(kw))
    ropts = RankOptions(strategy=strategy, layout=layout, group_by=group_by,
                        gold_field=gold_field, max_candidates=max_candidates)

    def progress(total, engine):
        return make_progress(True, total, activity=engine_activity(engine))

    summary = rank_input(source, output, opts, ropts, status=lambda line: status(line, quiet),
                         progress=None if quiet else progress)
    if not quiet:
        click.echo(render_summary(summary), err=True)
    if summary.prompts == 0:
        raise UserError(f"nothing was ranked: {source} holds no rows"
                        + (" within --limit/--shard" if limit or shard else "")
                        + "; give a file with a prompt and its candidates per row (docs/rank.md)")
    if summary.ranked == 0:
        raise UserError(f"nothing was ranked: {summary.prompts} prompts read from {source}, "
                        f"{summary.problems} of them in the errors table of {summary.output}; "
                        "fix the input (docs/rank.md) and rerun")
    if strict and (summary.problems or summary.failed):
        sys.exit(EXIT_STRICT)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def render_summary(s) -> str:
    from rmjudge.cli.score import error_lines
    from rmjudge.rank.outputs import top1_line

    what = ""
    if s.candidates:
        lo, hi = s.candidates
        what = (f" ({lo if lo == hi else f'{lo} to {hi}'} candidates per prompt ranked)")
    lines = [f"rmjudge: ranked {s.ranked} of {_n(s.prompts, 'prompt')}{what}: "
             f"{_n(s.judged, 'comparison')} judged, {s.skipped} already done, {s.failed} "
             f"failed, {_n(s.rounds, 'round')} in {s.wall_seconds:.1f}s -> {s.output}"]
    if s.problem_kinds:
        lines += error_lines(s.problem_kinds, s.problem_rows)
    if s.strategies:
        lines.append("  strategy: " + ", ".join(f"{k} for {_n(v, 'prompt')}"
                                                 for k, v in sorted(s.strategies.items())))
    top1 = top1_line(s.own_rankings())
    if top1:
        lines.append(f"  {top1}")
    if s.others:
        lines.append(f"  the store also holds {_n(s.others, 'ranked prompt')} that this input "
                     "does not name (an earlier, larger input or --limit); its rankings table, "
                     "eval and filter include them")
    if s.wall_seconds > 0 and s.judged:
        lines.append(f"  {s.wall_seconds / s.judged:.1f} s/comparison, "
                     f"{s.generated_tokens / s.wall_seconds:.0f} generated tok/s")
    return "\n".join(lines)
