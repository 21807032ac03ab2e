"""An independent re-implementation of the verdict rule (reflectrm.md §2-3) over stored rows.

It reads only the `samples` table (and the pair's `policy` setting from `meta`) and must
reproduce every `pairs.verdict_ab/verdict_ba/verdict`; it shares no code with rmjudge.judging.protocol.
"""

from __future__ import annotations

import json
from collections import defaultdict

import duckdb


def own_verdict(r: dict) -> bool:
    """A verdict the model wrote itself, in a generation not cut at the token limit."""
    return r["verdict_source"] == "generated" and r["finish_reason"] != "length"


def order_verdict(rollouts: list[dict], reflected: bool) -> int | None:
    parsed = [r for r in rollouts if own_verdict(r)]
    if not parsed:  # the forced fallback: majority of forced verdicts, no reflection
        parsed = [r for r in rollouts
                  if r["verdict_source"] == "forced" and r["prediction"] is not None]
        reflected = False
    anchors = [r for r in rollouts if r["is_anchor"]]
    if not parsed:
        assert not anchors
        return None
    assert len(anchors) == 1 and anchors[0] in parsed
    anchor = anchors[0]
    # the anchor is the most confident rollout that takes part (lowest idx on ties)
    best = max(parsed, key=lambda r: (r["confidence"], -r["idx"]))
    assert best["idx"] == anchor["idx"]
    if not reflected:
        votes = [r["prediction"] for r in parsed]
        c1, c2 = votes.count(1), votes.count(2)
        if c1 == c2:
            return anchor["prediction"]
        return 1 if c1 > c2 else 2
    group = [r["prediction"] for r in parsed if r["won_reflection"]]
    c1, c2 = group.count(1), group.count(2)
    if c1 == c2:
        group.append(anchor["prediction"])
        c1, c2 = group.count(1), group.count(2)
    return 1 if c1 > c2 else 2


def letter(order: str, pred: int | None) -> str | None:
    if pred is None:
        return None
    return ("A" if pred == 1 else "B") if order == "ab" else ("B" if pred == 1 else "A")


def recompute_all(db: str) -> int:
    con = duckdb.connect(db, read_only=True)
    settings = json.loads(con.execute("SELECT value FROM meta WHERE key='settings'").fetchone()[0])
    cols = [d[0] for d in con.execute("SELECT * FROM samples LIMIT 0").description]
    by = defaultdict(list)
    for row in con.execute("SELECT * FROM samples").fetchall():
        r = dict(zip(cols, row))
        by[(r["pair_id"], r["order"])].append(r)
    pairs = con.execute("SELECT id, verdict, verdict_ab, verdict_ba FROM pairs").fetchall()
    con.close()
    checked = 0
    for pid, verdict, vab, vba in pairs:
        letters = {}
        for order in ("ab", "ba"):
            rows = by.get((pid, order))
            if not rows:
                continue
            rollouts = sorted((r for r in rows if r["stage"] == "rollout"), key=lambda r: r["idx"])
            reflections = [r for r in rows if r["stage"] == "reflection"]
            # reflection rows agree with the winner flags they produced
            for f in reflections:
                assert f["verdict_source"] != "forced"  # reflections never ask for one
                critique = rollouts[f["reflection_of"]]
                assert own_verdict(critique) and not critique["is_anchor"]
                won = f["prediction"] == f["reflection_slot"] if own_verdict(f) else None
                assert critique["won_reflection"] == won
            reflected = settings["reflect"] and bool(reflections)
            letters[order] = letter(order, order_verdict(rollouts, reflected))
        assert (letters.get("ab") or "error") == vab, (pid, letters, vab)
        if "ba" in letters:
            assert (letters["ba"] or "error") == vba, (pid, letters, vba)
        ok = [v for v in letters.values() if v is not None]
        if not ok:
            want = "error"
        elif len(ok) == 1 or ok[0] == ok[-1]:
            want = ok[0]
        else:
            want = {"tie": "tie", "drop": "dropped"}.get(settings["on_inconsistent"], verdict)
        assert want == verdict, (pid, letters, verdict)
        checked += 1
    return checked
