"""`rmjudge eval` as one library call: `evaluate_table`.

A TABLE that is labelled input not judged yet is judged first, as `score` judges it
(`rmjudge.runs.setup.judge_input`, into `output`); the greedy baseline, when asked for, is generated
with the engine that judged (or one loaded for it) and stored in the table
(`analysis/greedy.py`); then the figures against the gold labels (`analysis/metrics.py`) and
the judge's agreement with imported human labels (`analysis/agreement.py`). The command only
parses its options, makes this call and prints what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rmjudge.analysis.greedy import GreedySummary
from rmjudge.analysis.metrics import EvalResult, EvalSettings, evaluate

if TYPE_CHECKING:
    from rmjudge.runs.pipeline import Summary
    from rmjudge.runs.setup import RunOptions


@dataclass
class EvalRun:
    """What `evaluate_table` found: the judged table read (`path`), its figures (None when it
    has no gold labels but human labels), the human agreement (None without human labels),
    the greedy baseline generated now (None unless asked) and the judging run (None when the
    table was judged already)."""

    path: str
    results: EvalResult | None
    human: dict | None
    greedy: GreedySummary | None = None
    judged: "Summary | None" = None


def evaluate_table(table: str, ev: EvalSettings, opts: "RunOptions", *,
                   output: str | None = None, greedy: bool = False,
                   judging: Sequence[str] = (), engine_options: Sequence[str] = (),
                   judge: Callable[..., "Summary"] | None = None,
                   greedy_progress: Callable[[int, int], Any] | None = None) -> EvalRun:
    """Evaluate `table` (module docstring). `opts`: the judging options, used when the table
    must be judged first or the greedy baseline needs an engine; `judge(table, output, opts)`
    judges an unjudged input (default `rmjudge.runs.setup.judge_input`; the CLI passes its own, which
    shows progress and the summary); `greedy_progress(done, total)` hears the greedy
    baseline's progress; `judging` and `engine_options`: the judge's and the engine's and
    server's options the caller was given (as written, "--samples"), refused on a judged table,
    where they change nothing, but for `engine_options` with the greedy baseline (which runs
    with the table's own judge settings)."""
    from rmjudge.analysis.greedy import run_greedy
    from rmjudge.analysis.tables import is_judged, open_judged
    from rmjudge.analysis.agreement import table_agreement

    engine = summary = None
    path = table
    if not is_judged(table):
        from rmjudge.runs.pipeline import default_output
        from rmjudge.runs.setup import judge_input

        check_has_labels(table, opts)  # before a model loads
        summary = (judge or judge_input)(table, output, opts)
        engine = summary.engine
        path = output or default_output(table)
    else:
        check_no_input_options(table, output, opts, greedy=greedy, judging=judging,
                               engine=engine_options)
    with open_judged(path) as t:
        baseline = None
        if greedy:
            if engine is None:
                from rmjudge.runs.setup import load_judge_engine

                engine = load_judge_engine(opts.engine, opts.server)
            given = opts.judge.judge_format if "--judge-format" in judging else None
            baseline = run_greedy(t, engine, on_progress=greedy_progress, judge_format=given)
        human = table_agreement(t, ev.resamples, ev.seed, ev.level)
        # human labels alone (no gold label) still give the judge-vs-human figures
        res = None if human is not None and t.count_labelled() == 0 else evaluate(t, ev)
    return EvalRun(path, res, human, baseline, summary)


def check_no_input_options(table: str, output: str | None, opts: "RunOptions",
                           ranked: bool = False, greedy: bool = False,
                           judging: Sequence[str] = (), engine: Sequence[str] = ()) -> None:
    """-o, the options that read an input (--map, --label-values, --label) and those of a
    judging run (--limit, --shard, --overwrite, --rejudge-changed; `judging`: the judge's
    options given, as written; `engine`: the engine's and server's, which the greedy baseline
    uses) apply only to unjudged input; on a judged table, or a ranked store (which has no
    greedy baseline), they would be ignored: one error."""
    from rmjudge.analysis.tables import TableError

    if ranked and greedy:
        raise TableError(f"--greedy-baseline does not apply to a ranked store ({table}): it "
                         "compares a judge's verdicts on pairs with the base model's greedy "
                         "rollouts; leave it out (rmjudge eval on a score store has it)")
    m = opts.mapper
    given = [name for name, on in (
        ("-o", output is not None), ("--map", bool(m.mapping)),
        ("--label-values", m.label_values is not None), ("--label", m.label_choice is not None),
        ("--limit", opts.limit is not None), ("--shard", opts.shard is not None),
        ("--overwrite", opts.overwrite), ("--rejudge-changed", opts.rejudge_changed)) if on]
    if greedy and not ranked:  # the greedy baseline's engine, and a table's format file
        engine = []
        judging = [name for name in judging if name != "--judge-format"]
    given += [name for name in [*judging, *engine] if name not in given]
    if given:
        verb, it = ("apply", "them") if len(given) > 1 else ("applies", "it")
        what, again = (("a ranked store", "rank the input again with `rmjudge rank INPUT "
                        "--overwrite`") if ranked else
                       ("judged already", "judge the input again with `rmjudge score INPUT "
                        "--overwrite`"))
        when = "TABLE is input not judged yet" + (
            f" (or, for {', '.join(engine)}, with --greedy-baseline)" if engine and not ranked
            else "")
        raise TableError(f"{', '.join(given)} {verb} only when {when}; "
                         f"{table} is {what} (its input was read when it was made): leave {it} "
                         f"out, or {again} and the options you need")


def check_has_labels(source: str, opts: "RunOptions") -> None:
    """Unjudged input without one gold label (under its mapping, --limit and --shard), or
    without one readable pair, has nothing to evaluate against: one error before any model
    loads. Read the way a run reads it (`runs.setup.open_input`, label checks included) until
    the first labelled pair."""
    import copy

    from rmjudge.analysis.tables import TableError
    from rmjudge.core.words import count
    from rmjudge.io.intake import RowFailure
    from rmjudge.runs.setup import open_input

    intake = open_input(source, copy.deepcopy(opts.mapper), opts.limit, opts.shard)
    first_failure = None
    for item in intake:
        if intake.labelled:
            return
        if first_failure is None and isinstance(item, RowFailure):
            first_failure = item
    within = [o for o, on in (("--limit", opts.limit), ("--shard", opts.shard)) if on]
    where = f" within {' and '.join(within)}" if within else ""
    if intake.pairs == 0:
        if first_failure is None:
            raise TableError(f"{source} holds no rows{where}: there is nothing to evaluate")
        rows = "its one row" if intake.rows_read == 1 else \
            f"none of its {count(intake.rows_read, 'row')}"
        raise TableError(f"{source}: {rows}{where} can{'not' if intake.rows_read == 1 else ''} "
                         f"be judged ({first_failure.reason}); `rmjudge score INPUT --dry-run` "
                         "lists every row's problem")
    pairs = "its one pair" if intake.pairs == 1 else f"none of its {count(intake.pairs, 'pair')}"
    raise TableError(f"{source}: {pairs}{where} has {'no' if intake.pairs == 1 else 'a'} gold "
                     "label (a tie is none), so there is nothing to evaluate against: give "
                     "labelled input (chosen/rejected, or a label column: --map label=COL, "
                     "--label-values), or judge it with `rmjudge score` and use `rmjudge "
                     "report` / `rmjudge filter`")
