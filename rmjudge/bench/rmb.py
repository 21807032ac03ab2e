"""RMB, pairwise set (Zhou-Zoey/RMB-Reward-Model-Benchmark, folder `RMB_dataset/Pairwise_set`):
`Helpfulness/<category>/<scenario>.json` and `Harmlessness/<scenario>.json`, JSON arrays of
{pair_uid, conversation_input: [{role, content, language}], chosen: {llm_name, answer},
reject: {llm_name, answer}, category_path}.

Official scoring (RMB `eval/scripts/my_run_rm.py`): accuracy = pairs where chosen beats
rejected (strictly) over the pairs evaluated, run per goal; every published pair is evaluated,
an empty or whitespace-only answer included (`eval/scripts/my_utils/utils.py`
`load_eval_dataset` puts `answer` into the conversation as it is). rmjudge judges both orders;
a pair scores the mean of its order scores, 1 right, 0 wrong or without a verdict. Shown:
Helpfulness and Harmlessness accuracy, each broken down by scenario group, and their mean (n/a
unless both goals have pairs). RMB's own overall figure also averages its Best-of-N set, which
bench does not run, so this mean is the pairwise part only.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

from rmjudge.bench.base import (BenchError, BenchResult, Benchmark, Cell, Item, RowProblem, mean,
                                missing_parts)

GOALS = ("Helpfulness", "Harmlessness")
MISSING = 0.0


def messages(obj: dict) -> list[dict]:
    conv = obj.get("conversation_input")
    if not isinstance(conv, list) or not conv or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role")
            in ("user", "assistant", "system") for m in conv):
        raise RowProblem("conversation_input is not a list of {role, content} messages")
    if conv[-1]["role"] != "user":
        raise RowProblem("conversation_input does not end with a user turn")
    return [{"role": m["role"], "content": m["content"]} for m in conv]


def answer(obj: dict, col: str) -> str:
    """The answer text as published. An empty or whitespace-only answer is kept and judged: RMB's
    code puts it in the conversation as it is and scores the pair like any other (Harmlessness
    S5, pair_uid 13586 and 13587, reject whitespace only)."""
    v = obj.get(col)
    if not isinstance(v, dict) or not isinstance(v.get("answer"), str):
        raise RowProblem(f"column {col!r} is not an object with an answer string")
    return v["answer"]


class RMB(Benchmark):
    name = "rmb"
    title = "RMB"
    layout = ("the folder RMB_dataset/Pairwise_set: Helpfulness/*/*.json and "
              "Harmlessness/*.json")
    rule = ("accuracy per goal (Helpfulness, Harmlessness) over its pairs, orders pooled, "
            "none = 0; RMB (pairwise) = mean of the two goals")

    def files(self, source: str) -> list[tuple[str, dict[str, Any]]]:
        if not os.path.isdir(source):
            raise BenchError(f"RMB is read from its published folder ({self.layout}); "
                             f"{source} is not a folder: give --data rmb=PATH/Pairwise_set")
        out = []
        for goal in GOALS:
            root = os.path.join(source, goal)
            for folder, dirs, names in sorted(os.walk(root)):
                dirs.sort()
                for n in sorted(names):
                    if n.endswith(".json"):
                        group = os.path.relpath(os.path.join(folder, n), root).split(os.sep)[0]
                        out.append((os.path.join(folder, n),
                                    {"goal": goal, "group": group.removesuffix(".json")}))
        if not out:
            raise BenchError(f"{source} holds none of RMB's pairwise files ({self.layout})")
        return out

    def convert(self, n: int, obj: dict[str, Any], fields: dict[str, Any]) -> Iterator[dict]:
        pid = obj.get("pair_uid")
        if pid is None:
            raise RowProblem("column 'pair_uid' is missing")
        yield {"id": f"{fields['goal']}/{pid}", "prompt": messages(obj),
               "chosen": answer(obj, "chosen"), "rejected": answer(obj, "reject"),
               "goal": fields["goal"], "group": fields["group"]}

    def score(self, items: list[Item]) -> BenchResult:
        cells = []
        goal_acc = {}
        for goal in GOALS:
            its = [it for it in items if it.fields["goal"] == goal]
            groups = sorted({it.fields["group"] for it in its})
            for g in groups:
                sub = [it for it in its if it.fields["group"] == g]
                cells.append(Cell(f"{goal}/{g}", mean(it.pooled(MISSING) for it in sub), len(sub)))
            goal_acc[goal] = Cell(goal, mean(it.pooled(MISSING) for it in its), len(its))
            cells.append(goal_acc[goal])
        present = {g: c.value for g, c in goal_acc.items() if c.value is not None}
        note = missing_parts("RMB (pairwise)", GOALS, present, "pairs")
        head = Cell("RMB (pairwise)", None if note else mean(present.values()), len(items))
        return self.result(items, [head], cells + [head], notes=[note] if note else [])
