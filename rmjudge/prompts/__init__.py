"""The two ReflectRM task prompts, per-family prompt suffixes, and verdict parsing.

This module is the single source of truth for prompt wording and parsing: `rmjudge score`,
`training/` (data building, GRPO reward) and evaluation all import from here, so a model is
judged at inference exactly as it was trained.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

from rmjudge.core.types import ForceSpec, Message

if TYPE_CHECKING:
    from rmjudge.prompts.formats import JudgeFormat
    from rmjudge.prompts.template import PromptTemplate

Task = Literal["pref", "refl"]

ANALYSIS_OPEN = "<Analysis>"
ANALYSIS_CLOSE = "</Analysis>"
RESULT_OPEN = "<Result>"
RESULT_CLOSE = "</Result>"
STOP = (RESULT_CLOSE,)
# Generation starts inside the analysis block: small models follow the format far more often.
ASSISTANT_PREFIX = ANALYSIS_OPEN + "\n"

_NOUN = {"pref": "Response", "refl": "Critique"}

# The prompts' format, recorded with a run's settings so that a rerun never mixes verdicts of
# two formats in one output; also written into training data, rollout caches and exported
# adapters (`rmjudge.prompt_format`), so that a judge is used with the prompts it learned.
# 2: the reflection prompt opens with the response-preference prompt's text (rmjudge 0.4.0).
# 3: that shared opening is neutral (no task in the role line or headings) and the reflection
# prompt states right after it that the two texts to compare are critiques.
PROMPT_FORMAT = 3

# Per-family prompt suffixes, keyed by a substring of the GGUF architecture or model name.
# Qwen3 backbones get the no-thinking switch, as in the paper.
FAMILY_SUFFIXES: dict[str, str] = {"qwen3": " /no_think"}


def suffix_for_model(architecture: str | None, name: str | None) -> str:
    """The prompt suffix for a model family (empty when the family needs none)."""
    hay = f"{architecture or ''} {name or ''}".lower()
    for key, suffix in FAMILY_SUFFIXES.items():
        if key in hay:
            return suffix
    return ""


def render_conversation(messages: Sequence[Message]) -> str:
    """History + final query as plain text for the Context block."""
    if len(messages) == 1:
        return messages[0]["content"]
    parts = []
    for m in messages:
        role = {"user": "User", "assistant": "Assistant", "system": "System"}.get(
            m["role"], m["role"].capitalize()
        )
        parts.append(f"[{role}]\n{m['content']}")
    return "\n\n".join(parts)


def _answer_format(task: Task) -> str:
    """How to answer: the analysis block, then exactly one of the task's two verdicts."""
    noun = _NOUN[task]
    return (
        f"First write your analysis inside {ANALYSIS_OPEN}...{ANALYSIS_CLOSE}. "
        f"Then give your verdict inside {RESULT_OPEN}...{RESULT_CLOSE} as exactly one of:\n"
        f"{noun} 1 is better than {noun} 2\n"
        f"{noun} 2 is better than {noun} 1"
    )


@dataclass(frozen=True)
class PromptStyle:
    """What a run changes in the wording of its prompts: `criteria` (`--criteria`, the rubric
    text), `template` (`--prompt-template`, ReflectRM's prompts reworded) and `format`
    (`--judge-format`: None is ReflectRM's; rmjudge.prompts.choice.format_of). The default
    style is ReflectRM's plain prompts."""

    criteria: str | None = None
    template: "PromptTemplate | None" = None
    format: "JudgeFormat | None" = None

DEFAULT_STYLE = PromptStyle()


def criteria_block(criteria: str | None) -> str:
    """The criteria slot: empty without criteria, so the prompts stay as they were."""
    if not criteria:
        return ""
    return f"## Criteria\nJudge by these criteria:\n{criteria}\n\n"


def _pair_head(conversation: Sequence[Message], r1: str, r2: str,
               criteria: str | None = None) -> str:
    """The opening both tasks share, word for word: a neutral role line, the conversation, the
    two responses and the criteria, if any. It names no task: each prompt states its own task
    after it."""
    return (
        "You are an impartial judge.\n\n"
        f"## Context\n{render_conversation(conversation)}\n\n"
        "## The two responses\n"
        f"### Response 1\n{r1}\n\n### Response 2\n{r2}\n\n"
        f"{criteria_block(criteria)}"
    )


def _from_template(style: PromptStyle, task: Task, conversation: Sequence[Message], r1: str,
                   r2: str, c1: str, c2: str, suffix: str) -> tuple[Message, ...]:
    body = style.template.render(  # type: ignore[union-attr]
        task=task, context=render_conversation(conversation),
        messages=[dict(m) for m in conversation], response1=r1, response2=r2, critique1=c1,
        critique2=c2, criteria=style.criteria, answer_format=_answer_format(task))
    return ({"role": "user", "content": body + suffix},)


def pref_messages(
    conversation: Sequence[Message], r1: str, r2: str, suffix: str = "",
    style: PromptStyle = DEFAULT_STYLE,
) -> tuple[Message, ...]:
    """Response-preference prompt: which of two responses is better."""
    if style.template is not None:
        return _from_template(style, "pref", conversation, r1, r2, "", "", suffix)
    body = (
        f"{_pair_head(conversation, r1, r2, style.criteria)}"
        "## Your task\n"
        "Decide which of the two responses above is the better answer to the conversation. "
        f"{_answer_format('pref')}{suffix}"
    )
    return ({"role": "user", "content": body},)


def refl_messages(
    conversation: Sequence[Message], r1: str, r2: str, c1: str, c2: str, suffix: str = "",
    style: PromptStyle = DEFAULT_STYLE,
) -> tuple[Message, ...]:
    """Self-reflection prompt: which of two critiques (analyses) of (r1, r2) is better.

    It opens with the response-preference prompt's text up to its task (`_pair_head`), so an
    engine that kept the rollout prompt's evaluated prefix (the llama.cpp engine's prefix
    cache) evaluates only the task, the critiques and the answer format; the N-1 reflections
    of one pair and order share that prefix and the first critique when the anchor sits in
    slot 1. Right after the shared head the prompt says plainly that the two texts to compare
    are critiques of the responses, not the responses themselves. `style`: the criteria and
    template of the run, the same for both prompts.
    """
    if style.template is not None:
        return _from_template(style, "refl", conversation, r1, r2, c1, c2, suffix)
    body = (
        f"{_pair_head(conversation, r1, r2, style.criteria)}"
        "## Your task\n"
        "Below are two critiques, each an analysis of the two responses above that ends in a "
        "judgment of which response is better. Decide which critique is better: which one "
        "analyses the two responses more accurately and reaches the right judgment. You are "
        "judging the two critiques, not the responses.\n\n"
        "## The two critiques\n"
        f"### Critique 1\n{c1}\n\n### Critique 2\n{c2}\n\n"
        "## Your verdict\n"
        f"Compare the two critiques above. {_answer_format('refl')}{suffix}"
    )
    return ({"role": "user", "content": body},)


def verdict_lines(task: Task) -> tuple[str, str]:
    """The two verdicts a task's answer ends in."""
    noun = _NOUN[task]
    return (f"{noun} 1 is better than {noun} 2", f"{noun} 2 is better than {noun} 1")


def check_template(template: "PromptTemplate", criteria: str | None = None) -> None:
    """Refuse a `--prompt-template` that lacks a slot or the verdict format in either task
    (rmjudge.prompts.template): both prompts are rendered with marker values."""
    from rmjudge.prompts.template import check_rendered

    marks = {"context": "\u27e6CONVERSATION\u27e7", "response1": "\u27e6RESPONSE-1\u27e7",
             "response2": "\u27e6RESPONSE-2\u27e7", "critique1": "\u27e6CRITIQUE-1\u27e7",
             "critique2": "\u27e6CRITIQUE-2\u27e7", "criteria": "\u27e6CRITERIA\u27e7"}
    style = PromptStyle(marks["criteria"] if criteria else None, template)
    conv = ({"role": "user", "content": marks["context"]},)
    slots = ["context", "response1", "response2"] + (["criteria"] if criteria else [])
    pref = pref_messages(conv, marks["response1"], marks["response2"], "", style)
    check_rendered(template, "pref", pref[0]["content"], {k: marks[k] for k in slots},
                   verdict_lines("pref"))
    refl = refl_messages(conv, marks["response1"], marks["response2"], marks["critique1"],
                         marks["critique2"], "", style)
    check_rendered(template, "refl", refl[0]["content"],
                   {k: marks[k] for k in slots + ["critique1", "critique2"]},
                   verdict_lines("refl"))


def prompt_style(criteria: str | None = None, template: str | None = None) -> PromptStyle:
    """The style of `--criteria` (a built-in name, @FILE or text) and `--prompt-template`
    (a file), resolved and checked: a bad value raises a UserError before any model loads.
    A run's style, judge format included, is `rmjudge.prompts.choice.run_style`'s."""
    from rmjudge.prompts.criteria import resolve_criteria
    from rmjudge.prompts.template import load_template

    text = resolve_criteria(criteria)
    if template is None:
        return PromptStyle(text)
    return PromptStyle(text, load_template(template, lambda t: check_template(t, text)))


_VERDICT = re.compile(
    r"^\s*\**\s*(Response|Critique)\s+([12])\s+is\s+better\s+than\s+(Response|Critique)\s+([12])",
    re.IGNORECASE,
)


def parse_verdict(text: str, task: Task | None = None) -> int | None:
    """The prediction (1 or 2) from the text inside the last <Result>, or None.

    Accepts "(Response|Critique) X is better than (Response|Critique) Y" with X != Y; for a
    given task only that task's noun. Anything else is a parse failure, never a guess.
    """
    start = text.rfind(RESULT_OPEN)
    if start < 0:
        return None
    inner = text[start + len(RESULT_OPEN):]
    end = inner.find(RESULT_CLOSE)
    if end >= 0:
        inner = inner[:end]
    m = _VERDICT.match(inner)
    if not m:
        return None
    noun1, x, noun2, y = m.groups()
    if x == y or noun1.lower() != noun2.lower():
        return None
    if task is not None and noun1.lower() != _NOUN[task].lower():
        return None
    return int(x)


def extract_analysis(text: str) -> str:
    """The analysis part of a generation (the critique shown in self-reflection)."""
    end = text.find(ANALYSIS_CLOSE)
    if end < 0:
        end = text.find(RESULT_OPEN)
    body = text if end < 0 else text[:end]
    if body.startswith(ANALYSIS_OPEN):
        body = body[len(ANALYSIS_OPEN):]
    return body.strip()


def forced_continuation(text: str, task: Task) -> str | None:
    """Text that makes the next token the verdict number; None when `text` already parses."""
    if parse_verdict(text, task) is not None:
        return None
    head = "" if ANALYSIS_CLOSE in text else f"\n{ANALYSIS_CLOSE}"
    return f"{head}\n{RESULT_OPEN}{_NOUN[task]}"


def force_spec(task: Task) -> ForceSpec:
    """The ForceSpec an engine uses to force a verdict for `task`."""
    return ForceSpec(continuation=lambda text: forced_continuation(text, task), choices=(" 1", " 2"))


def completion_text(task: Task, analysis: str, prediction: int) -> str:
    """A well-formed completion (after ASSISTANT_PREFIX) for training targets and tests."""
    noun = _NOUN[task]
    other = 2 if prediction == 1 else 1
    return (
        f"{analysis}\n{ANALYSIS_CLOSE}\n{RESULT_OPEN}{noun} {prediction} is better than "
        f"{noun} {other}{RESULT_CLOSE}"
    )
