"""`rmjudge eval`: accuracy and positional consistency of a judged table against gold labels."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from rmjudge.analysis.metrics import EvalSettings
from rmjudge.cli.common import check_not_being_written, judge_input
from rmjudge.cli.layout import echo, output_width
from rmjudge.cli.options import (engine_options, given_options, judge_options, option_dests,
                                 settings_from, settings_options)
from rmjudge.cli.mapping_options import input_source
from rmjudge.cli.run_options import parse_run_options, run_options
from rmjudge.cli.server_options import server_options
from rmjudge.core.settings import EngineSettings, JudgeSettings, setting
from rmjudge.servers.settings import ServerSettings


@dataclass(frozen=True)
class EvalCall:
    """What `eval` is given besides the figures' settings and the judging options."""

    table: str = setting(argument=True, metavar="TABLE")
    as_json: bool = setting(False, "Print the results as JSON.", flag="--json")
    greedy_baseline: bool = setting(
        False, "Add the base model's greedy row: one greedy rollout per pair and order with the "
        "run's prompts (runs the model; stored in the table, so reruns are cheap).",
        flag="--greedy-baseline")
    max_groups: int | None = setting(None, "Groups shown per table (default: as many of the 8 "
                                     "largest as fit the width, docs/evaluation.md; --json has "
                                     "all).")
    output: str | None = setting(None, "When TABLE is unjudged input: where to write the judged "
                                 "table (default INPUT.judged.duckdb).", option=("-o", "--output"))


@click.command("eval")
@settings_options(EvalCall, only=("table", "as_json", "greedy_baseline"))
@settings_options(EvalSettings, only=("group_by",))
@settings_options(EvalCall, only=("max_groups",))
@settings_options(EvalSettings, only=("resamples", "seed"))
@settings_options(EvalCall, only=("output",))
@judge_options
@engine_options
@server_options
@run_options
def command(**kw) -> None:
    """Evaluate a judged TABLE (x.duckdb, or the x.parquet / x.jsonl exports) against its gold
    labels: accuracy (both orders pooled) and per order, positional consistency and the
    combined-verdict agreement (ties apart; accuracy with ties = 0.5), overall and
    per source/subset, with bootstrap intervals, next to the first-rollout and majority-vote
    baselines of the same run. When human labels were imported (`rmjudge review import`), the
    judge's agreement with them follows (accuracy, kappa, intervals).

    TABLE may also be labelled input that was not judged yet (.jsonl, .parquet, .csv,
    file.duckdb:table): it is judged first (the judging options apply) into -o.

    A ranked store (`rmjudge rank`) gets top-1 accuracy and Kendall tau against its gold ranks,
    with bootstrap intervals over prompts (docs/rank.md)."""
    import orjson

    from rmjudge.analysis.eval_run import check_no_input_options, evaluate_table
    from rmjudge.analysis.metrics import render
    from rmjudge.analysis.agreement import render as render_human

    call, ev = settings_from(EvalCall, kw), settings_from(EvalSettings, kw)
    as_json, max_groups = call.as_json, call.max_groups
    table = input_source(call.table, kw)
    check_not_being_written(table, "eval")
    from rmjudge.rank.outputs import evaluate_if_ranked, render_eval

    opts = parse_run_options(kw)
    # what judging would use, given on the command line: refused on a judged table or ranked
    # store, but for the engine's and server's with --greedy-baseline (the greedy rollouts run
    # with the table's own judge settings)
    judge_named = given_options(option_dests(JudgeSettings) | {"commit_every"})
    engine_named = given_options(option_dests(EngineSettings) | option_dests(ServerSettings))
    ranked = evaluate_if_ranked(table, ev, check=lambda: check_no_input_options(
        table, call.output, opts, ranked=True, greedy=call.greedy_baseline, judging=judge_named,
        engine=engine_named))
    if ranked is not None:  # a ranked store (rmjudge rank): top-1 and Kendall tau
        if as_json:
            click.echo(orjson.dumps(ranked.as_dict(), option=orjson.OPT_INDENT_2).decode())
        else:
            echo(render_eval(ranked))
        return
    run = evaluate_table(table, ev, opts, output=call.output, judging=judge_named,
                         engine_options=engine_named,
                         greedy=call.greedy_baseline, judge=judge_input,
                         greedy_progress=lambda done, total: click.echo(
                             f"greedy baseline: {done}/{total} pair-orders", err=True))
    g = run.greedy
    if g is not None:
        echo(f"greedy baseline: {g.generated} rollouts generated, {g.reused} reused, "
             f"{g.parse_failures} without a parsed verdict -> {g.target}", err=True)
    res, human, path = run.results, run.human, run.path
    if as_json:
        data = res.as_dict() if res is not None else {"table": path, "labelled": 0}
        if human is not None:
            data["human"] = human
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        if res is not None:
            click.echo(render(res, max_groups=8 if max_groups is None else max_groups,
                              width=output_width(sys.stdout), fit=max_groups is None))
        else:
            echo(f"{path}: no gold labels; judge against the imported human labels only")
        if human is not None:
            click.echo("")
            echo(render_human(human, ev.level))
