"""Judge formats: how a judge is prompted and how its answer is read (`--judge-format`).

A format is a prompt builder, a verdict parser and the two position labels of its prompt. The
protocol on top (N samples per order, both orders, the anchor, self-reflection where the format
has a critique-comparison prompt, the vote) is the same for every format (rmjudge.judging).

- `reflectrm` (the default): ReflectRM's two prompts and `<Result>` verdicts (rmjudge.prompts).
- the open judges' own formats (rmjudge.prompts.builtin_formats): `mt-bench`, `prometheus2`,
  `skywork-critic`, `pandalm`, `judgelm`, `selene`, `auto-j`;
- a format file (TOML) for any other judge (rmjudge.prompts.format_file).

A parser returns a `Verdict`: the position that won in the prompt's numbering (1: the response
shown first, 2: the second) or `TIE` (0) where the format can say so, and the span of the
answer it read it from. An answer the format's rule does not read is a parse failure (None),
never a guess. `rmjudge.prompts.choice` resolves `--judge-format` once, before a model loads.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from rmjudge.core.errors import UserError
from rmjudge.core.types import ForceSpec, Message

if TYPE_CHECKING:
    from rmjudge.prompts import PromptStyle
    from rmjudge.prompts.native_format import Reflection

TIE = 0  # a verdict of "neither": the prediction of a tie, in every format that has one
DEFAULT_FORMAT = "reflectrm"
FORMATS_FIX = "`rmjudge formats` lists the built-in formats; docs/judges.md describes format files"


class JudgeFormatError(UserError):
    """A `--judge-format` cannot be used; the message names the value or file, the key and the fix."""


@dataclass(frozen=True)
class Verdict:
    """What a parser read: `prediction` 1 | 2 (the position in the prompt) or TIE, and where
    in the text it stands (`start`, `end`: character offsets)."""

    prediction: int
    start: int
    end: int


@dataclass(frozen=True, eq=False)
class JudgeFormat:
    """The interface every format implements, and the facts it states of itself (the defaults
    suit a format without a critique-comparison prompt of its own).

    `labels`: how the prompt names the first and second response; `ties`: whether the format
    can answer a tie; `rubric`: whether it has a rubric slot (`--criteria` goes there);
    `reflection`: its own critique-comparison prompt, or None (self-reflection is on by default
    only with one: `reflects`); `families`: the model families it was made for (names only);
    `assistant_prefix` and `stop`: how a generation starts and ends."""

    name: str = ""
    title: str = ""
    source: str = ""
    labels: tuple[str, str] = ("1", "2")
    ties: bool = False
    rubric: bool = False
    reflection: "Reflection | None" = None
    families: tuple[str, ...] = ()
    assistant_prefix: str = ""
    stop: tuple[str, ...] = ()
    no_force: str = "its verdict opens the answer"  # why `force_spec` is None, when it is

    @property
    def reflects(self) -> bool:
        """Whether the format has a critique-comparison prompt of its own."""
        return self.reflection is not None

    def pref_messages(self, conversation: Sequence[Message], r1: str, r2: str, suffix: str,
                      style: "PromptStyle") -> tuple[Message, ...]:
        raise NotImplementedError

    def parse(self, text: str) -> Verdict | None:
        raise NotImplementedError

    def force_spec(self) -> ForceSpec | None:
        """How an unparsed rollout is given a verdict from the logits (`--forced`); None where
        the format's verdict cannot be forced."""
        return None

    def critique(self, text: str) -> str:
        """The part of a rollout shown as a critique in self-reflection: the whole answer."""
        return text.strip()

    def identity(self) -> str:
        """Everything that decides this format's prompts and verdicts, as text: its sha256 is
        recorded with a run's verdict settings (a resume with another format is refused)."""
        raise NotImplementedError

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.identity().encode()).hexdigest()

    def confidence(self, logprobs: Sequence[float], token_ends: Sequence[int] | None,
                   text: str, fraction: float) -> float | None:
        """A rollout's confidence (the anchor is the most confident usable rollout): the mean
        log-probability of the tokens that wrote the verdict, where the engine reports where
        each token ends (`token_ends`, UTF-8 byte offsets into `text`); else the mean of the
        lowest `fraction` of all its token log-probabilities, the paper's rule."""
        verdict = self.parse(text)
        if verdict is not None and token_ends is not None:
            lps = verdict_logprobs(logprobs, token_ends, text, verdict)
            if lps:
                return sum(lps) / len(lps)
        return lowest_share_mean(logprobs, fraction)


def lowest_share_mean(logprobs: Sequence[float], fraction: float = 0.1) -> float | None:
    """Mean of the lowest `fraction` of token log-probabilities (at least one token)."""
    lp = sorted(x for x in logprobs if x == x)  # NaN: log-probabilities were not asked for
    if not lp:
        return None
    k = max(1, math.ceil(len(lp) * fraction))
    return sum(lp[:k]) / k


def verdict_logprobs(logprobs: Sequence[float], token_ends: Sequence[int], text: str,
                     verdict: Verdict) -> list[float]:
    """The log-probabilities of the tokens that overlap the verdict's span of `text`."""
    lo = len(text[:verdict.start].encode())
    hi = len(text[:verdict.end].encode())
    out, begin = [], 0
    for lp, end in zip(logprobs, token_ends):
        if end > lo and begin < hi and lp == lp:
            out.append(lp)
        begin = end
    return out


def check_style_options(fmt: JudgeFormat, criteria: str | None, template: str | None) -> None:
    """Refuse what a format other than ReflectRM's cannot take: `--criteria` without a rubric
    slot, and `--prompt-template` (which rewords ReflectRM's prompts)."""
    if criteria is not None and not fmt.rubric:
        raise JudgeFormatError(
            f"--criteria: the judge format {fmt.name} has no rubric slot, so criteria would be "
            f"ignored; leave --criteria out, or use a format with one (prometheus2, reflectrm, "
            f"or a format file with {{{{ criteria }}}})")
    if template is not None:
        raise JudgeFormatError(
            f"--prompt-template rewords ReflectRM's prompts and cannot be used with "
            f"--judge-format {fmt.name}; write a format file instead (docs/judges.md)")


def describe(fmt: JudgeFormat) -> list[tuple[str, str]]:
    """What `rmjudge formats` says of a format, as (field, text) rows."""
    yes = {True: "yes", False: "no"}
    force = fmt.force_spec() is not None
    return [("labels", " / ".join(fmt.labels)), ("ties", yes[fmt.ties]),
            ("rubric", "yes (--criteria fills it)" if fmt.rubric else "no (--criteria refused)"),
            ("self-reflection", "yes, its own critique comparison" if fmt.reflects
             else "no: a vote over each order's rollouts (--reflect: ReflectRM's, an ablation)"),
            ("forced verdicts", "yes (--forced)" if force else f"no ({fmt.no_force})"),
            ("fits", ", ".join(fmt.families) or "the judge the file was written for"),
            ("source", fmt.source)]


def example_prompt(fmt: JudgeFormat) -> str:
    """The format's prompt for a marked example pair, as the judge would receive it (the
    messages' roles in brackets; the chat template is the model's own)."""
    from rmjudge.prompts import PromptStyle
    from rmjudge.core.types import RawPrompt

    conversation = ({"role": "user", "content": "<the conversation>"},)
    messages = fmt.pref_messages(conversation, "<response shown first>",
                                 "<response shown second>", "",
                                 PromptStyle("<criteria>" if fmt.rubric else None, None, fmt))
    how = ("a plain completion prompt, no chat template" if isinstance(messages, RawPrompt)
           else "through the model's chat template")
    parts = [f"[{m['role']}]\n{m['content']}" for m in messages]
    return f"({how})\n" + "\n\n".join(parts) + (
        f"\n[assistant]\n{fmt.assistant_prefix}" if fmt.assistant_prefix else "")
