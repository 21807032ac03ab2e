"""The shape of every format other than ReflectRM's: a system prompt (or none), one user prompt
with slots, a verdict reader, an optional forced-verdict continuation and an optional
critique-comparison prompt (`Reflection`).

The slots are the ones `--prompt-template` knows: `context` (the conversation as text,
rmjudge.prompts.render_conversation), `response1` and `response2` (the responses in the order
shown), `criteria` (the rubric: `--criteria`, else the format's own default). A built-in's
prompt is its authors' text with `{slot}` marks filled in one pass (a response that contains
`{response2}` stays as it is); a format file's is a Jinja2 template rendered in the sandbox.

`pattern_reader` reads a verdict by regular expressions, for the built-ins whose official rule
is a pattern search and for format files. Patterns run in the `regex` module (compatible with
`re`), which bounds each search's time (`SEARCH_SECONDS`): a pattern that backtracks
catastrophically on an answer makes that answer a parse failure instead of a hung run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from rmjudge.core.types import ForceSpec, Message
from rmjudge.prompts.formats import TIE, JudgeFormat, Verdict

if TYPE_CHECKING:
    from rmjudge.prompts import PromptStyle

Reader = Callable[[str], "Verdict | None"]
_SLOT = re.compile(r"\{(context|response1|response2|criteria)\}")
SEARCH_SECONDS = 1.0  # the longest one pattern may search one answer


def bounded_finditer(rx, text: str):
    """`rx.finditer(text)` (a `regex` pattern) within `SEARCH_SECONDS`, zero-width matches left
    out; a search that runs out of time finds nothing."""
    try:
        return [m for m in rx.finditer(text, timeout=SEARCH_SECONDS) if m.end() > m.start()]
    except TimeoutError:
        return []


def fill(text: str, slots: dict[str, str]) -> str:
    """`text` with each `{slot}` mark replaced by its value, in one pass."""
    return _SLOT.sub(lambda m: slots[m.group(1)], text)


def pattern_reader(first: str, second: str, tie: str | None = None, where: str = "last",
                   flags: int = 0) -> Reader:
    """A reader that finds the patterns of the first position, the second and (where the
    format has one) a tie, and takes `where`: "last" (the match that stands last wins),
    "first" (the first), or "only" (exactly one of the kinds is found, however often; two
    kinds are a failure)."""
    import regex

    kinds = [(1, regex.compile(first, flags)), (2, regex.compile(second, flags))]
    if tie is not None:
        kinds.append((TIE, regex.compile(tie, flags)))

    def read(text: str) -> Verdict | None:
        found = sorted((m.start(), m.end(), kind) for kind, rx in kinds
                       for m in bounded_finditer(rx, text))
        if not found:
            return None
        if where == "only":
            if len({k for _, _, k in found}) != 1:
                return None
            start, end, kind = found[-1]
        else:
            start, end, kind = found[-1] if where == "last" else found[0]
        return Verdict(kind, start, end)

    return read


@dataclass(frozen=True)
class Reflection:
    """A critique-comparison prompt: which of two critiques of the pair is better (1 | 2)."""

    messages: Callable[..., tuple[Message, ...]]  # (conversation, r1, r2, c1, c2, suffix, style)
    parse: Callable[[str], "int | None"]
    identity: str
    assistant_prefix: str = ""
    stop: tuple[str, ...] = ()


def reflectrm_reflection() -> Reflection:
    """ReflectRM's critique-comparison prompt: the reflection of `reflectrm`, and the generic
    one that `--reflect` opts into for a format without its own (an ablation)."""
    from rmjudge import prompts

    return Reflection(
        messages=prompts.refl_messages,
        parse=lambda text: prompts.parse_verdict(text, "refl"),
        identity=f"reflectrm-reflection/{prompts.PROMPT_FORMAT}",
        assistant_prefix=prompts.ASSISTANT_PREFIX, stop=prompts.STOP)


@dataclass(frozen=True, eq=False)
class NativeFormat(JudgeFormat):
    """A format given by its texts and rules (module docstring). `render(slots)` -> the user
    prompt; `force`: the continuation that brings an unparsed answer to its verdict and the two
    choices read there (first position, second); `rule`: the verdict rule in words, part of the
    format's identity with the texts. `render(slots, conversation)` -> the user prompt."""

    system: str | None = None
    user: str = ""
    render: Callable[[dict, Sequence[Message]], str] | None = None
    default_criteria: str | None = None
    reader: Reader | None = None
    rule: str = ""
    force: tuple[str, tuple[str, str]] | None = None

    def pref_messages(self, conversation: Sequence[Message], r1: str, r2: str, suffix: str,
                      style: "PromptStyle") -> tuple[Message, ...]:
        from rmjudge.prompts import render_conversation

        slots = {"context": render_conversation(conversation), "response1": r1,
                 "response2": r2, "criteria": style.criteria or self.default_criteria or ""}
        body = (self.render(slots, conversation) if self.render is not None
                else fill(self.user, slots))
        user: Message = {"role": "user", "content": body + suffix}
        if self.system:
            return ({"role": "system", "content": self.system}, user)
        return (user,)

    def parse(self, text: str) -> Verdict | None:
        assert self.reader is not None
        return self.reader(text)

    def force_spec(self) -> ForceSpec | None:
        if self.force is None:
            return None
        continuation, choices = self.force
        return ForceSpec(
            continuation=lambda text: None if self.parse(text) is not None else continuation,
            choices=choices)

    def identity(self) -> str:
        parts = [self.name, self.system or "", self.user, self.default_criteria or "",
                 self.rule, repr(self.force), repr(self.labels), str(self.ties)]
        if self.reflection is not None:
            parts.append(self.reflection.identity)
        return "\x1f".join(parts)
