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
from typing import TYPE_CHECKING, Any, Callable

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
                   judge: Callable[..., "Summary"] | None = None,
                   greedy_progress: Callable[[int, int], Any] | None = None) -> EvalRun:
    """Evaluate `table` (module docstring). `opts`: the judging options, used when the table
    must be judged first or the greedy baseline needs an engine; `judge(table, output, opts)`
    judges an unjudged input (default `rmjudge.runs.setup.judge_input`; the CLI passes its own, which
    shows progress and the summary); `greedy_progress(done, total)` hears the greedy
    baseline's progress."""
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
        check_no_input_options(table, output, opts)
    with open_judged(path) as t:
        baseline = None
        if greedy:
            if engine is None:
                from rmjudge.runs.setup import load_judge_engine

                engine = load_judge_engine(opts.engine, opts.server)
            baseline = run_greedy(t, engine, on_progress=greedy_progress)
        human = table_agreement(t, ev.resamples, ev.seed, ev.level)
        # human labels alone (no gold label) still give the judge-vs-human figures
        res = None if human is not None and t.count_labelled() == 0 else evaluate(t, ev)
    return EvalRun(path, res, human, baseline, summary)



def check_no_input_options(table: str, output: str | None, opts: "RunOptions") -> None:
    """-o and the options that read an input (--map, --label-values, --label) apply only to
    unjudged input; on a judged table (or a ranked store) they would be ignored: one error."""
    from rmjudge.analysis.tables import TableError

    m = opts.mapper
    given = [name for name, on in (("-o", output is not None), ("--map", bool(m.mapping)),
                                   ("--label-values", m.label_values is not None),
                                   ("--label", m.label_choice is not None)) if on]
    if given:
        verb = "apply" if len(given) > 1 else "applies"
        raise TableError(f"{', '.join(given)} {verb} only when TABLE is input not judged yet; "
                         f"{table} is judged already (its gold labels were read when it was "
                         "judged): leave them out, or judge the input again with `rmjudge "
                         "score INPUT --overwrite` and these options")


def check_has_labels(source: str, opts: "RunOptions") -> None:
    """Unjudged input without one gold label (under its mapping, --limit and --shard) has
    nothing to evaluate against: one error before any model loads. Reads until the first
    labelled pair."""
    from rmjudge.analysis.tables import TableError
    from rmjudge.io.intake import Intake
    from rmjudge.io.mapping import Mapper
    from rmjudge.io.readers import read_rows

    m = opts.mapper  # a fresh Mapper of the same options: the run's own stays unread
    mapper = Mapper(m.mapping, m.seed, label_values=m.label_values, label_choice=m.label_choice,
                    read_labels=m.read_labels, blank_responses=m.blank_responses)
    intake = Intake(read_rows(source), mapper, shard=opts.shard, limit=opts.limit)
    for _ in intake:
        if intake.labelled:
            return
    if intake.pairs == 0:
        return  # no pair at all: the run reports its error rows (or the empty input) itself
    raise TableError(f"{source}: none of its {intake.pairs} pairs has a gold label, so there is "
                     "nothing to evaluate against: give labelled input (chosen/rejected, or a "
                     "label column: --map label=COL, --label-values), or judge it with "
                     "`rmjudge score` and use `rmjudge report` / `rmjudge filter`")
