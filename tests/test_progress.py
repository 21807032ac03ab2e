"""The progress display's time left (rmjudge/runs/progress.py): it shows once the first
generations finish, not the first pair, and moves with the work: with the clock between two
updates, and with the work done (finished generations, and the tokens of running ones) against
the work planned. Checked with a fake clock, and on a scripted run whose pairs all end together
(as a small input's do with a batched engine)."""

from __future__ import annotations

import io
import re
import time

import pytest
from helpers import quality_engine

from rmjudge.runs.progress import Eta, TerminalProgress, clock_text, work_fraction
from rmjudge.core.settings import JudgeSettings
from rmjudge.judging.judge import Finished
from rmjudge.runs.pipeline import Progress, planned_generations, score


def test_the_plan_is_n_rollouts_and_n_minus_1_reflections_per_order():
    assert planned_generations(JudgeSettings(samples=8)) == 2 * (8 + 7)
    assert planned_generations(JudgeSettings(samples=8, reflect=False)) == 2 * 8
    assert planned_generations(JudgeSettings(samples=4, orders="ab")) == 4 + 3


def test_eta_waits_for_the_first_generations_then_moves_with_the_work():
    now = [100.0]
    eta = Eta(clock=lambda: now[0])
    fin = Finished()
    p = Progress(started=100.0, planned_per_pair=30, finished=fin)  # N = 8, both orders
    now[0] = 110.0
    assert eta(p, 4) is None and clock_text(eta(p, 4)) == "-:--:--"  # nothing finished yet
    # 20 s in, the first 16 rollouts (100 tokens each) are done: 16 of 4 x 30 generations
    fin.generations, fin.tokens = 16, 1600
    now[0] = 120.0
    assert eta(p, 4) == pytest.approx(20 * (1 - 16 / 120) / (16 / 120))  # 130 s
    now[0] = 130.0  # no new work: it counts down with the clock
    assert eta(p, 4) == pytest.approx(120.0)
    assert clock_text(eta(p, 4)) == "0:02:00"
    # running generations count: 3,200 tokens generated = 32 generations' worth of 120
    assert eta(p, 4, live_tokens=3200) == pytest.approx(30 * (1 - 32 / 120) / (32 / 120))
    # two pairs done, with 20 generations each (the unanimity shortcut skipped reflections):
    # the plan follows them, 4 x 20 = 80 generations, 40 done (of 100 tokens)
    p.done, p.generations = 2, 40
    fin.generations, fin.tokens = 40, 4000
    now[0] = 140.0
    assert eta(p, 4) == pytest.approx(40 * (1 - 40 / 80) / (40 / 80))  # 40 s
    # rows already judged (skipped) and error rows take no work
    p.skipped, p.errors = 1, 1  # 2 rows left to judge here, 40 generations, all done
    assert work_fraction(p, 4) == 1.0 and eta(p, 4) == 0.0
    assert work_fraction(p, None) is None  # no row count: no estimate


def frame(tp, width: int = 80) -> list[str]:
    """The lines the progress display draws now, rendered at `width` columns."""
    from rich.console import Console

    c = Console(file=io.StringIO(), width=width, record=True, force_terminal=True)
    c.print(tp.progress.get_renderable())
    return c.export_text().splitlines()


def seconds(bar: str) -> int | None:
    m = re.search(r"ETA (-:--:--|(\d+):(\d\d):(\d\d))$", bar)
    assert m, bar
    if m.group(1) == "-:--:--":
        return None
    return int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4))


def test_a_run_whose_pairs_end_together_shows_its_eta_before_the_first_pair_ends(tmp_path):
    """Four pairs judged at once (N = 2, self-reflection on): every pair ends in the second
    engine call, so the rows stay at 0/4 until then. Each call is made to last 60 s on the
    display's clock. After the rollouts (16 of the 24 generations planned, all of one length)
    the ETA is 60 s x (8/24) / (16/24) = 30 s, and it counts down while the reflections run."""
    from rich.console import Console

    src = tmp_path / "in.jsonl"
    src.write_text("".join(f'{{"id": "p{i}", "prompt": "q{i}", "chosen": "answer q=9", '
                           f'"rejected": "answer q=1"}}\n' for i in range(4)))
    offset = [0.0]
    engine = quality_engine(pairs_in_flight=4)
    tp = TerminalProgress(4, console=Console(file=io.StringIO(), width=80, force_terminal=True),
                          clock=lambda: time.monotonic() + offset[0])
    seen = []
    generate = engine.generate

    def bar() -> str:
        return next(line for line in frame(tp) if "rows" in line)

    def slow_generate(requests):
        seen.append(bar())
        if len(seen) == 2:  # the rollouts are done, no pair is: 10 s later, 10 s less
            offset[0] += 10.0
            seen.append(bar())
        offset[0] += 60.0
        return generate(requests)

    engine.generate = slow_generate
    try:
        summary = score(str(src), engine, JudgeSettings(samples=2, shortcut=False),
                        output=str(tmp_path / "o.duckdb"), on_progress=tp)
        end = bar()
    finally:
        tp.close()
    assert summary.judged == 4 and len(engine.calls) == 2
    first, after, later = seen
    assert "0/4 rows" in first and seconds(first) is None  # nothing has finished yet
    assert "0/4 rows" in after and 28 <= seconds(after) <= 32, after
    assert "0/4 rows" in later and 18 <= seconds(later) <= 22, later
    assert "4/4 rows" in end and seconds(end) == 0


def test_a_log_line_gives_the_eta_once_generations_finished(capsys):
    from rmjudge.runs.progress import ProgressLine

    fin = Finished(generations=10, tokens=1000)
    p = Progress(done=1, generations=10, planned_per_pair=10, finished=fin)
    p.started -= 30.0  # 1 of 4 pairs in 30 s: 90 s left
    log = ProgressLine(True, total=4, tty=False, log_interval=0.0)
    log(p)
    line = capsys.readouterr().err
    assert "1/4 rows" in line and re.search(r"\| ETA 0:01:(29|30|31)$", line.strip()), line
