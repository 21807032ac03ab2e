"""JudgeBench (ScalerLab/JudgeBench, splits `gpt` and `claude`): pair_id, original_id, source,
question, response_model, response_A, response_B, label ("A>B" or "B>A").

Official scoring (ScalerLab/JudgeBench `utils/metrics.py` `compute_final_metrics`, as
`run_judge.py` calls it): each pair is judged twice, the second time with the responses swapped
and its decision swapped back. Each decision adds +1 when it equals the label, -1 when it is the
opposite, 0 otherwise (a tie or no decision); the pair is correct when the sum is positive, so
an inconsistent pair (one right, one wrong) counts as wrong, and one right decision with one
missing counts as right. Categories by `source` prefix: mmlu-pro (knowledge),
livebench-reasoning, livebench-math, livecodebench (coding); overall = all pairs. With
`--orders ab` (the official single game) a pair is correct when its one decision is.
"""

from __future__ import annotations

from typing import Any, Iterator

from rmjudge.bench.base import BenchResult, Benchmark, Cell, Item, RowProblem, mean, text

CATEGORIES = (("Knowledge", "mmlu-pro"), ("Reasoning", "livebench-reasoning"),
              ("Math", "livebench-math"), ("Coding", "livecodebench"))
LABELS = {"A>B": "A", "B>A": "B"}


def combined_correct(item: Item) -> bool:
    """The published rule: the sum of +1 (right) / -1 (wrong) / 0 (none) over orders is > 0."""
    return sum({True: 1, False: -1, None: 0}[v] for v in item.correct.values()) > 0


class JudgeBench(Benchmark):
    name = "judgebench"
    title = "JudgeBench"
    default_source = "hf://datasets/ScalerLab/JudgeBench@gpt"
    layout = ("JSON Lines (or the Hub split) of {pair_id, source, question, response_A, "
              "response_B, label: 'A>B'|'B>A'}")
    rule = ("both orders, +1 right / -1 wrong / 0 none per order, a pair is correct when the "
            "sum is > 0; categories by source prefix, overall = all pairs")

    def convert(self, n: int, obj: dict[str, Any], fields: dict[str, Any]) -> Iterator[dict]:
        label = obj.get("label")
        if label not in LABELS:
            raise RowProblem(f"label {label!r} is not 'A>B' or 'B>A'")
        pid = obj.get("pair_id")
        yield {"id": str(pid) if pid is not None else str(n), "prompt": text(obj, "question"),
               "response_a": text(obj, "response_A"), "response_b": text(obj, "response_B"),
               "label": LABELS[label], "source": text(obj, "source")}

    def score(self, items: list[Item]) -> BenchResult:
        cells = []
        for name, prefix in CATEGORIES:
            its = [it for it in items if str(it.fields["source"]).startswith(prefix)]
            cells.append(Cell(name, mean(float(combined_correct(it)) for it in its), len(its)))
        overall = Cell("JudgeBench", mean(float(combined_correct(it)) for it in items),
                       len(items))
        return self.result(items, [overall], cells + [overall])
