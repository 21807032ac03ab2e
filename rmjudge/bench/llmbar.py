"""LLMBar (princeton-nlp/LLMBar, folder `Dataset/LLMBar`): `Natural/dataset.json` and
`Adversarial/{Neighbor,GPTInst,GPTOut,Manual}/dataset.json`, JSON arrays of
{input, output_1, output_2, label: 1|2}.

Official scoring (princeton-nlp/LLMBar `LLMEvaluator/evaluate.py`): each instance is judged in
both orders; accuracy ("correct_average") is the number of correct decisions over both orders
divided by twice the instances, a missing decision being wrong; positional agreement ("equal")
is the share of instances whose two decisions are the same (two missing decisions count as the
same, as there). The paper reports Natural and the four Adversarial subsets with their plain
average. A headline needs its parts: Natural n/a without Natural instances, Adversarial n/a
unless all four Adversarial subsets have instances (a note says which are missing).
"""

from __future__ import annotations

import os
from typing import Any, Iterator

from rmjudge.bench.base import (BenchError, BenchResult, Benchmark, Cell, Item, RowProblem, mean,
                                missing_parts, text)

ADVERSARIAL = ("Neighbor", "GPTInst", "GPTOut", "Manual")
SUBSETS = ("Natural",) + ADVERSARIAL
MISSING = 0.0


def agreement(items: list[Item]) -> float | None:
    both = [it for it in items if len(it.letters) == 2]
    return mean(float(it.letters["ab"] == it.letters["ba"]) for it in both)


class LLMBar(Benchmark):
    name = "llmbar"
    title = "LLMBar"
    layout = ("the folder Dataset/LLMBar: Natural/dataset.json and "
              "Adversarial/{Neighbor,GPTInst,GPTOut,Manual}/dataset.json")
    rule = ("accuracy = correct decisions over both orders (none = wrong); agreement = same "
            "decision in both orders; Adversarial = plain mean of its four subsets")

    def files(self, source: str) -> list[tuple[str, dict[str, Any]]]:
        if not os.path.isdir(source):
            raise BenchError(f"LLMBar is read from its published folder ({self.layout}); "
                             f"{source} is not a folder: give --data llmbar=PATH/Dataset/LLMBar")
        out = [(path, {"subset": sub}) for sub, path in self.paths(source)
               if os.path.exists(path)]
        if not out:
            raise BenchError(f"{source} holds none of LLMBar's files ({self.layout})")
        return out

    @staticmethod
    def paths(source: str) -> list[tuple[str, str]]:
        """(subset, its dataset.json) for every published subset."""
        return [(sub, os.path.join(source, "Natural" if sub == "Natural"
                                   else os.path.join("Adversarial", sub), "dataset.json"))
                for sub in SUBSETS]

    def absent(self, source: str) -> list[str]:
        if not os.path.isdir(source):
            return []
        return [path for _, path in self.paths(source) if not os.path.exists(path)]

    def convert(self, n: int, obj: dict[str, Any], fields: dict[str, Any]) -> Iterator[dict]:
        label = obj.get("label")
        if label not in (1, 2, "1", "2"):
            raise RowProblem(f"label {label!r} is not 1 or 2")
        yield {"id": f"{fields['subset']}/{n}", "prompt": text(obj, "input"),
               "response_a": text(obj, "output_1"), "response_b": text(obj, "output_2"),
               "label": "A" if str(label) == "1" else "B", "subset": fields["subset"]}

    def score(self, items: list[Item]) -> BenchResult:
        by = {s: [it for it in items if it.fields["subset"] == s] for s in SUBSETS}
        acc = {s: mean(it.pooled(MISSING) for it in by[s]) for s in SUBSETS}
        cells = []
        for s in SUBSETS:
            if by[s]:
                cells.append(Cell(s, acc[s], len(by[s])))
                cells.append(Cell(f"{s} agreement", agreement(by[s]), len(by[s])))
        adv = [acc[s] for s in ADVERSARIAL if acc[s] is not None]
        n_adv = sum(len(by[s]) for s in ADVERSARIAL)
        have = [s for s in SUBSETS if by[s]]
        notes = [n for n in (missing_parts("LLMBar Natural", ("Natural",), have, "instances"),
                             missing_parts("LLMBar Adversarial", ADVERSARIAL, have,
                                           "instances")) if n]
        head = [Cell("LLMBar Natural", acc["Natural"], len(by["Natural"])),
                Cell("LLMBar Adversarial", mean(adv) if len(adv) == len(ADVERSARIAL) else None,
                     n_adv)]
        return self.result(items, head, cells + head, notes=notes)
