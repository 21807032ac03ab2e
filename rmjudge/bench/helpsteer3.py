"""HelpSteer3-Preference (nvidia/HelpSteer3, config `preference`, split `validation`): domain,
language, context (a message list), response1, response2, overall_preference (-3..3).

Scoring: accuracy on the pairs with a preference (overall_preference != 0; ties carry no gold
label and are left out, as the HelpSteer3 paper does), both orders pooled, a missing verdict
being wrong. rmjudge reads the published columns itself (`rmjudge.io.schemas`: < 0 prefers
response1, > 0 response2).
"""

from __future__ import annotations

from typing import Any, Iterator

from rmjudge.bench.base import BenchResult, Benchmark, Cell, Item, RowProblem, mean

KEEP = ("domain", "language", "context", "response1", "response2", "overall_preference")
MISSING = 0.0


class HelpSteer3(Benchmark):
    name = "helpsteer3"
    title = "HelpSteer3"
    default_source = "hf://datasets/nvidia/HelpSteer3:preference@validation"
    layout = ("rows with context, response1, response2, overall_preference (the `preference` "
              "config's validation split)")
    rule = "accuracy over pairs with a preference (ties left out), both orders pooled, none = wrong"

    def convert(self, n: int, obj: dict[str, Any], fields: dict[str, Any]) -> Iterator[dict]:
        missing = [c for c in ("context", "response1", "response2", "overall_preference")
                   if c not in obj]
        if missing:
            raise RowProblem(f"column {missing[0]!r} is missing")
        if not isinstance(obj["overall_preference"], (int, float)) or \
                isinstance(obj["overall_preference"], bool):
            raise RowProblem(f"overall_preference {obj['overall_preference']!r} is not a number")
        row = {"id": str(n)}
        row.update({k: obj[k] for k in KEEP if k in obj})
        yield row

    def labelled(self, row: dict) -> bool:
        return row.get("overall_preference") not in (0, None)

    def score(self, items: list[Item]) -> BenchResult:
        scored = [it for it in items if it.labelled]
        by_domain: dict[str, list[Item]] = {}
        for it in scored:
            by_domain.setdefault(str(it.fields.get("domain")), []).append(it)
        cells = [Cell(d, mean(it.pooled(MISSING) for it in its), len(its))
                 for d, its in sorted(by_domain.items())]
        head = Cell("HelpSteer3", mean(it.pooled(MISSING) for it in scored), len(scored))
        res = self.result(scored, [head], cells + [head], unlabelled=len(items) - len(scored))
        return res
