"""Format warm-start targets: supervised examples that teach a weak base the verdict format.

A small base (the embedded SmolLM2-135M) almost never ends its analysis with a parseable
`<Result>`, so build-data finds almost no mixed-outcome items and the GRPO reward is almost
always zero. The warm-start stage fine-tunes it first on targets made from the data alone (no
stronger teacher), one item at a time:

- **Pref**, in both slot orders (so the two labels are exactly balanced and "always 1" cannot be
  learned): the base's own analysis of the item, cut at a sentence boundary, followed by the
  gold verdict, `completion_text("pref", analysis, label)`. A rollout whose verdict already
  matches the gold label is preferred; when the base wrote no usable analysis, a short one
  naming the better response is used. In the swapped order the analysis's "Response 1/2"
  mentions are swapped too, so the text still refers to the right responses.
- **Refl**, in both critique orders: two of the base's analyses, one concluding for the gold
  response and one for the other (a rollout's own parsed verdict where it has one, else a
  closing sentence is added), with the label on the critique that concludes for the gold
  response, as ReflectRM defines a correct critique (docs/reflectrm.md §4).

Every choice is seeded from (seed, item id). The prompts are `rmjudge.prompts.pref_messages` /
`refl_messages` with the model's suffix, exactly what `rmjudge score` shows the judge.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import Any

from rmjudge.prompts import (ANALYSIS_CLOSE, ANALYSIS_OPEN, RESULT_CLOSE, RESULT_OPEN,
                             DEFAULT_STYLE, PromptStyle, completion_text, extract_analysis,
                             parse_verdict, pref_messages, refl_messages)
from rmjudge.core.seeds import derive_seed

from rmjudge.training.cache import CachedRollouts
from rmjudge.training.rollouts import Item

TASKS = ("pref", "refl")

_TAGS = re.compile("|".join(re.escape(t) for t in (ANALYSIS_OPEN, ANALYSIS_CLOSE, RESULT_OPEN,
                                                   RESULT_CLOSE)))
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
_SLOT_REF = re.compile(r"\b(Response|response|Critique|critique)(\s+)([12])\b")


@dataclass
class SFTStats:
    items: int = 0
    items_unsampled: int = 0
    rollouts: int = 0
    rollouts_parsed: int = 0
    analyses_used: int = 0  # targets built on one of the base's own analyses
    analyses_short: int = 0  # targets that fell back to the short analysis
    analyses_templated: int = 0  # targets built by training.sft_templates (--analyses template)
    pref_examples: int = 0
    refl_examples: int = 0
    label_1: int = 0
    label_2: int = 0
    too_long: int = 0  # examples left out because prompt + target exceed --max-length

    def count(self, examples: list[dict], templated: bool = False) -> None:
        """Count one item's examples by task and label (`templated`: with --analyses
        template, which samples no rollouts)."""
        self.items += 1
        if templated:
            self.analyses_templated += len(examples)
        for e in examples:
            self.pref_examples += e["task"] == "pref"
            self.refl_examples += e["task"] == "refl"
            self.label_1 += e["label"] == 1
            self.label_2 += e["label"] == 2

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cut_analysis(text: str, max_chars: int) -> str:
    """The analysis without format tags, cut after the last sentence end within `max_chars`
    (a text without any sentence end within the limit is cut at a word boundary)."""
    clean = " ".join(_TAGS.sub(" ", text).split())
    if len(clean) <= max_chars:
        return clean
    head = clean[:max_chars]
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    if ends and ends[-1] >= max_chars // 4:
        return head[:ends[-1]].strip()
    space = head.rfind(" ")
    return (head[:space] if space > 0 else head).rstrip(" ,;:") + "."


def swap_slots(text: str) -> str:
    """'Response 1' <-> 'Response 2' (and Critique): the same analysis for the swapped order."""
    return _SLOT_REF.sub(lambda m: f"{m.group(1)}{m.group(2)}{3 - int(m.group(3))}", text)


def short_analysis(better: int) -> str:
    return (f"Response {better} follows the instruction more closely and is more accurate and "
            f"helpful than Response {3 - better}.")


def _conclusion(better: int) -> str:
    return f"Overall, Response {better} is better."


def usable_analyses(rollouts: CachedRollouts, label: int, max_chars: int) -> list[tuple[str, int | None]]:
    """(cut analysis, parsed verdict) of each rollout with a non-empty analysis, distinct texts,
    rollouts whose verdict matches the label first."""
    seen: set[str] = set()
    out: list[tuple[str, int | None]] = []
    for text in rollouts.texts:
        a = cut_analysis(extract_analysis(text), max_chars)
        if len(a) < 8 or a in seen:
            continue
        seen.add(a)
        out.append((a, parse_verdict(text, "pref")))
    return sorted(out, key=lambda x: x[1] != label)


def _example(item: Item, task: str, order: str, label: int, prompt, completion: str) -> dict:
    return {"id": f"{item.id}#{task}-{order}", "source_id": item.id, "task": task,
            "order": order, "label": label, "prompt": list(prompt), "completion": completion}


def pref_examples(item: Item, analyses: list[tuple[str, int | None]], suffix: str,
                  rng: random.Random, stats: SFTStats,
                  style: PromptStyle = DEFAULT_STYLE) -> list[dict]:
    """Both slot orders of the item, each with the gold verdict."""
    fitting = [a for a, p in analyses if p in (None, item.label)]
    if fitting:
        analysis = fitting[0] if analyses[0][1] == item.label else rng.choice(fitting)
        stats.analyses_used += 2
    else:
        analysis = short_analysis(item.label)
        stats.analyses_short += 2
    conv = item.conversation
    return [
        _example(item, "pref", "ab", item.label, pref_messages(conv, item.r1, item.r2, suffix, style),
                 completion_text("pref", analysis, item.label)),
        _example(item, "pref", "ba", 3 - item.label, pref_messages(conv, item.r2, item.r1, suffix, style),
                 completion_text("pref", swap_slots(analysis), 3 - item.label)),
    ]


def _critique(analysis: str, parsed: int | None, concludes: int) -> str:
    """The analysis as a critique concluding for `concludes` (adds the conclusion unless the
    rollout's own verdict already says so)."""
    return analysis if parsed == concludes else f"{analysis} {_conclusion(concludes)}"


def refl_examples(item: Item, analyses: list[tuple[str, int | None]], suffix: str,
                  rng: random.Random, stats: SFTStats,
                  style: PromptStyle = DEFAULT_STYLE) -> list[dict]:
    """Both critique orders: a critique concluding for the gold response against one
    concluding for the other; the label is the former's slot."""
    gold, other = item.label, 3 - item.label
    right = [(a, p) for a, p in analyses if p in (None, gold)]
    wrong = [(a, p) for a, p in analyses if p in (None, other)]
    good = right[0] if right else (short_analysis(gold), gold)
    bad_pool = [w for w in wrong if w[0] != good[0]]
    bad = rng.choice(bad_pool) if bad_pool else (short_analysis(other), other)
    stats.analyses_used += (good[0] != short_analysis(gold)) + (bad[0] != short_analysis(other))
    stats.analyses_short += (good[0] == short_analysis(gold)) + (bad[0] == short_analysis(other))
    c_good = _critique(good[0], good[1], gold)
    c_bad = _critique(bad[0], bad[1], other)
    out = []
    for order, (c1, c2, label) in (("ab", (c_good, c_bad, 1)), ("ba", (c_bad, c_good, 2))):
        k, j = label, 3 - label
        analysis = (f"Critique {k} concludes that Response {gold} is better, and the responses "
                    f"support that conclusion; Critique {j} prefers Response {other}.")
        out.append(_example(item, "refl", order, label,
                            refl_messages(item.conversation, item.r1, item.r2, c1, c2, suffix,
                                          style),
                            completion_text("refl", analysis, label)))
    return out


def sft_examples(item: Item, rollouts: CachedRollouts, suffix: str, tasks: tuple[str, ...],
                 max_chars: int, seed: int, stats: SFTStats,
                 criteria: str | None = None) -> list[dict]:
    """The warm-start examples of one item (2 per task: both orders), prompted with
    `criteria` (the judging criteria, when given)."""
    style = PromptStyle(criteria)
    if rollouts.error:
        stats.items += 1
        stats.items_unsampled += 1
        return []
    stats.rollouts += len(rollouts.texts)
    stats.rollouts_parsed += sum(parse_verdict(t, "pref") is not None for t in rollouts.texts)
    analyses = usable_analyses(rollouts, item.label, max_chars)
    rng = random.Random(derive_seed(seed, item.id, "sft-target"))
    out: list[dict] = []
    if "pref" in tasks:
        out += pref_examples(item, analyses, suffix, rng, stats, style)
    if "refl" in tasks:
        out += refl_examples(item, analyses, suffix, rng, stats, style)
    stats.count(out)
    return out
