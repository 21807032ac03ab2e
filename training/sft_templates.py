"""Templated warm-start targets (`rmjudge-train sft --analyses template`): format-only targets
made from the data alone, deterministically, with no rollouts of the base.

The base's own analyses (`training.sft_data`) cost a generation pass over every item and, from a
135M model, are mostly rambling text cut at the token limit. A judge that only has to learn the
*format* of both prompts can instead be taught with short, regular analyses that describe
concrete, checkable features of both responses and end in the verdict:

- **Pref**, both slot orders: one sentence per response (its opening words quoted, its length
  as short / medium / long, and whether it declines the request), then "Overall, Response L
  is better." with L the gold slot, then the verdict markup for L (`completion_text`). What is honest about it:
  the descriptions are true of the responses; the conclusion is the gold label and is **not**
  derived from the described features, so the targets teach the format and nothing about which
  response is better (a judge trained on them judges at chance; docs/training.md).
- **Refl**, both critique orders: the two critiques are the item's templated analysis
  concluding for the gold response and the same description concluding for the other one (the
  shape of two rollouts that disagree), and the target names each critique's conclusion and
  picks the one concluding for the gold response, as ReflectRM defines a correct critique
  (docs/reflectrm.md §4).

Every item gives 2 Pref + 2 Refl examples with exactly balanced labels, so "always 1" cannot
lower the loss. Nothing is random: the same data gives the same targets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rmjudge.prompts import DEFAULT_STYLE, PromptStyle, completion_text, pref_messages, refl_messages

from rmjudge.training.rollouts import Item

OPENING_WORDS = 6


@dataclass(frozen=True)
class TemplateSource:
    """Stands where a rollout source stands in `training.sft.build_examples`: the base's prompt
    suffix and the judging criteria, with nothing to sample."""

    suffix: str
    criteria: str | None = None


_REFUSAL = re.compile(
    r"\b(I can(?:'|\u2019)?t|I cannot|I won(?:'|\u2019)t|I will not|I(?:'|\u2019)m not able|"
    r"I am not able|I(?:'|\u2019)m sorry|I am sorry|I apologi[sz]e|not appropriate|"
    r"I do not feel comfortable|I don(?:'|\u2019)t feel comfortable)\b", re.IGNORECASE)
_TAG = re.compile(r"</?\s*(Analysis|Result)\s*>", re.IGNORECASE)


def opening(text: str, words: int = OPENING_WORDS) -> str:
    """The first `words` words of the response's first non-empty line, quoted safely (format
    tags and double quotes are neutralised so the target never closes a block early)."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    parts = _TAG.sub(" ", line).replace('"', "'").split()
    head = " ".join(parts[:words])
    more = len(parts) > words or len(text.split()) > len(parts[:words])
    return f'"{head} ..."' if more else f'"{head}"'


SHORT_WORDS, LONG_WORDS = 20, 80


def size(text: str) -> str:
    """The response's length in words as a coarse class (a 135M judge copies a class more
    faithfully than it counts): short (< 20 words), of medium length, or long (> 80)."""
    n = len(text.split())
    return "short" if n < SHORT_WORDS else "long" if n > LONG_WORDS else "of medium length"


def describe(slot: int, text: str) -> str:
    """One sentence about a response: its opening, its length and whether it declines."""
    if not text.strip():
        return f"Response {slot} is empty."
    declines = " and declines the request" if _REFUSAL.search(text) else ""
    return f"Response {slot} opens with {opening(text)}, is {size(text)}{declines}."


def conclusion(better: int) -> str:
    return f"Overall, Response {better} is better."


def pref_analysis(r1: str, r2: str, better: int) -> str:
    """The templated analysis of (r1, r2) concluding for slot `better`."""
    return f"{describe(1, r1)} {describe(2, r2)} {conclusion(better)}"


def refl_analysis(good_slot: int, gold: int) -> str:
    """The reflection target: each critique's conclusion, and the one that concludes for the
    gold response (in slot `good_slot`) chosen."""
    bad_slot, other = 3 - good_slot, 3 - gold
    first = {good_slot: gold, bad_slot: other}
    return (f"Critique 1 concludes that Response {first[1]} is better. Critique 2 concludes "
            f"that Response {first[2]} is better. The conclusion of Critique {good_slot} is "
            "the right one.")


def _example(item: Item, task: str, order: str, label: int, prompt, completion: str) -> dict:
    return {"id": f"{item.id}#{task}-{order}", "source_id": item.id, "task": task,
            "order": order, "label": label, "prompt": list(prompt), "completion": completion,
            "analyses": "template"}


def template_examples(item: Item, suffix: str, tasks: tuple[str, ...],
                      style: PromptStyle = DEFAULT_STYLE) -> list[dict]:
    """The item's examples: Pref in both slot orders, Refl in both critique orders."""
    conv, gold = item.conversation, item.label
    out: list[dict] = []
    if "pref" in tasks:
        for order, (a, b, label) in (("ab", (item.r1, item.r2, gold)),
                                     ("ba", (item.r2, item.r1, 3 - gold))):
            out.append(_example(item, "pref", order, label,
                                pref_messages(conv, a, b, suffix, style),
                                completion_text("pref", pref_analysis(a, b, label), label)))
    if "refl" in tasks:
        good = pref_analysis(item.r1, item.r2, gold)
        bad = pref_analysis(item.r1, item.r2, 3 - gold)
        for order, (c1, c2, label) in (("ab", (good, bad, 1)), ("ba", (bad, good, 2))):
            out.append(_example(item, "refl", order, label,
                                refl_messages(conv, item.r1, item.r2, c1, c2, suffix, style),
                                completion_text("refl", refl_analysis(label, gold), label)))
    return out
