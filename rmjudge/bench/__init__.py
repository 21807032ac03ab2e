"""`rmjudge bench`: standard pairwise benchmarks, judged through the normal score pipeline and
scored as their authors score them.

One module per benchmark (its published layout and official scoring), `sources` (reading the
published files or Hub splits), `runner` (intake file -> `rmjudge.runs.pipeline.score` -> store ->
figures) and `table` (the paper's layout). See docs/bench.md.
"""

from __future__ import annotations

from rmjudge.bench.base import BenchError, Benchmark
from rmjudge.bench.helpsteer3 import HelpSteer3
from rmjudge.bench.judgebench import JudgeBench
from rmjudge.bench.llmbar import LLMBar
from rmjudge.bench.rewardbench import RewardBench
from rmjudge.bench.rmb import RMB
from rmjudge.bench.rmbench import RMBench

BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    RewardBench(), RMBench(), RMB(), JudgeBench(), LLMBar(), HelpSteer3())}


def get(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise BenchError(f"unknown benchmark {name!r}; choose from "
                         f"{', '.join(BENCHMARKS)}") from None
