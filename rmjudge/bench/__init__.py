"""`rmjudge bench`: standard pairwise benchmarks, judged through the normal score pipeline and
scored as their authors score them; the best-of-N ones (RewardBench 2, RMB's Best-of-N set) are
judged through `rmjudge rank` and scored from its rankings.

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
from rmjudge.bench.rewardbench2 import RewardBench2
from rmjudge.bench.rmb import RMB
from rmjudge.bench.rmb_bon import RMBBestOfN
from rmjudge.bench.rmbench import RMBench

BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    RewardBench(), RMBench(), RMB(), JudgeBench(), LLMBar(), HelpSteer3(), RewardBench2(),
    RMBBestOfN())}


def get(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise BenchError(f"unknown benchmark {name!r}; choose from "
                         f"{', '.join(BENCHMARKS)}") from None
