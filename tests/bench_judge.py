"""A scripted judge for the bench fixtures (tests/data/bench): the gold response is the one
whose text holds "correct"; a directive in the prompt, "(ab=X ba=Y)", says how each order is
judged: right (picks the gold), wrong, none (no parseable verdict) or longer (picks the longer
response; equal lengths: right in ab, wrong in ba). Without a directive both orders are right.
"""

from __future__ import annotations

import re
import time

from helpers import first_slot_response, pref, unparsed

from rmjudge.engine.fake import ScriptedEngine


def second_slot_response(req) -> str:
    body = req.messages[-1]["content"]
    return body.split("### Response 2\n", 1)[1].split("\n\n## ", 1)[0]  # the next section


def action(req, order: str) -> str:
    text = " ".join(m["content"] for m in req.messages)
    m = re.search(r"\(ab=(\w+) ba=(\w+)\)", text)
    return (m.group(1) if order == "ab" else m.group(2)) if m else "right"


def respond(req, i):
    order = req.share_key[1]
    r1, r2 = first_slot_response(req), second_slot_response(req)
    gold = 1 if "correct" in r1 else 2 if "correct" in r2 else 1
    act = action(req, order)
    if act == "longer":
        gold_len, other_len = (len(r1), len(r2)) if gold == 1 else (len(r2), len(r1))
        act = ("right" if gold_len > other_len else "wrong" if gold_len < other_len
               else "right" if order == "ab" else "wrong")
    if act == "none":
        return unparsed()
    return pref(gold if act == "right" else 3 - gold)


def fixture_engine(delay: float = 0.0) -> ScriptedEngine:
    def slow(req, i):
        if delay:
            time.sleep(delay)
        return respond(req, i)

    return ScriptedEngine(slow, pairs_in_flight=1)
