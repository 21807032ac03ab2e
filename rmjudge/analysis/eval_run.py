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

        summary = (judge or judge_input)(table, output, opts)
        engine = summary.engine
        path = output or default_output(table)
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

