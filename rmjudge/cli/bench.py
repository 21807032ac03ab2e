"""`rmjudge bench`: judge standard pairwise benchmarks and print their official figures."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from rmjudge.bench.plan import RUN_FIELDS, RUN_OPTION_HELP, BenchSettings
from rmjudge.cli.common import make_progress, status
from rmjudge.cli.options import engine_options, judge_options, settings_from, settings_options
from rmjudge.cli.run_options import parse_run_options
from rmjudge.cli.server_options import server_options
from rmjudge.core.settings import setting
from rmjudge.runs.setup import RunOptions


@dataclass(frozen=True)
class BenchOutput:
    """How `bench` prints."""

    as_json: bool = setting(False, "Print the figures as JSON.", flag="--json")
    quiet: bool = setting(False, "No progress lines or run summaries.", flag="--quiet",
                          short="-q")


@click.command("bench")
@settings_options(BenchSettings, only=("benchmarks", "data", "outdir"))
@judge_options
@engine_options
@server_options
@settings_options(RunOptions, only=RUN_FIELDS, helps=RUN_OPTION_HELP)
@settings_options(BenchSettings, only=("score_only", "check"))
@settings_options(BenchOutput)
def command(**kw) -> None:
    """Judge standard pairwise benchmarks with the same judge options as `score` and print a
    table in the paper's layout, each benchmark scored as its authors score it (docs/bench.md).
    """
    from rmjudge.bench.plan import run_bench

    settings, out = settings_from(BenchSettings, kw), settings_from(BenchOutput, kw)
    run = run_bench(settings, parse_run_options(kw),
                    status=lambda line: status(line, out.quiet),
                    progress=lambda: make_progress(not out.quiet),
                    on_judged=None if out.quiet else print_summary)
    if settings.check:
        return print_reports(run.reports, out.as_json)
    from rmjudge.bench.table import averages, render

    if out.as_json:
        import orjson

        click.echo(orjson.dumps({"judge": run.judge, "settings": run.settings,
                                 "benchmarks": [r.as_dict() for r in run.results],
                                 "averages": [a.as_dict() for a in averages(run.results)]},
                                option=orjson.OPT_INDENT_2).decode())
        return
    from rmjudge.cli.layout import echo, fit_markdown, output_width

    click.echo(fit_markdown(render(run.results, run.judge), output_width()))
    if run.shard is not None:
        echo(f"\nnote: shard {run.shard[0]}/{run.shard[1]} only; merge the shards' "
             "stores with `rmjudge merge` and rerun with --score-only for the full table")


def print_summary(bench, summary) -> None:
    """A judged benchmark's run summary on stderr (a ranking's for a best-of-N benchmark)."""
    if bench.ranked:
        from rmjudge.core.layout import output_width
        from rmjudge.rank.summary import render_summary as render_ranked

        click.echo(render_ranked(summary, output_width(sys.stderr)), err=True)
    else:
        from rmjudge.runs.summaries import render_summary

        click.echo(render_summary(summary), err=True)


def print_reports(reports: list, as_json: bool) -> None:
    """`--check`: each benchmark's published files read and counted, nothing judged."""
    from rmjudge.bench.check import failure, render
    from rmjudge.core.errors import UserError

    if as_json:
        import orjson

        click.echo(orjson.dumps([r.as_dict() for r in reports],
                                option=orjson.OPT_INDENT_2).decode())
    else:
        from rmjudge.cli.layout import echo

        echo("\n\n".join(render(r) for r in reports))
    problem = failure(reports)
    if problem:  # the reports say why, file by file; the exit status says it to a script
        raise UserError(problem)
