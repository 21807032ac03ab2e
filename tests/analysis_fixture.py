"""A judged table with known numbers, built without a model.

Input: `tests/data/analysis_pairs.jsonl`, eight pairs written by hand for these tests
(labels A A B A | B B A A, subsets x = p1..p4, y = p5..p8). The scripted judge:
- order (A, B): always right. In subset y the first rollout is wrong and the most confident
  (the anchor); the three others are right and beat it in self-reflection.
- order (B, A): always picks slot 1 (= B), so it is right exactly on the B-labelled pairs;
  p2's last rollout does not parse and gets a forced verdict (slot 1; forced verdicts are
  chosen with --forced), which takes no part since the other rollouts parse.
Hand-computed: ReflectRM acc(A,B) 8/8, acc(B,A) 3/8, consistency 3/8, final 3/8 (the five
A-labelled pairs flip -> tie); first rollout acc(A,B) 4/8, consistency 1/8; majority = ReflectRM.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers import pref, refl, unparsed

from rmjudge.engine.fake import ScriptedEngine, stage_of
from rmjudge.runs.pipeline import score
from rmjudge.core.settings import JudgeSettings

FIXTURE = Path(__file__).parent / "data" / "analysis_pairs.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def _row_of(req) -> dict:
    body = req.messages[-1]["content"]
    hits = [r for r in ROWS if r["prompt"] in body]
    return max(hits, key=lambda r: len(r["prompt"]))


def respond(req, i):
    row = _row_of(req)
    order = req.share_key[1]
    if stage_of(req) == "reflection":
        body = req.messages[-1]["content"]
        c1 = body.split("### Critique 1\n", 1)[1].split("\n\n### Critique 2", 1)[0]
        return refl(1 if "right" in c1 else 2)
    if order == "ab":
        right = 1 if row["label"] == "A" else 2
        if row["subset"] == "y" and i == 0:
            return pref(3 - right, -0.05, "wrong")
        return pref(right, -0.5, "right")
    if row["id"] == "p2" and i == 3:
        return unparsed()
    return pref(1, -0.3, "slot1")


def build(tmp_path, output: str = "judged.duckdb", **kw) -> str:
    out = str(tmp_path / output)
    js = JudgeSettings(**{"samples": 4, "seed": 0, "forced": True, **kw})
    score(str(FIXTURE), ScriptedEngine(respond, force=lambda req, i, text: (0.8, 0.2)), js,
          output=out)
    return out
