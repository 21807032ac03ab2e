"""Core value types shared by readers, the protocol, engines and the store.

A `Pair` is one validated input row. `GenRequest`/`Generation` are the only currency between the
protocol and an engine: the protocol never touches llama.cpp, and an engine knows nothing of
ReflectRM beyond the optional `ForceSpec` callback it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

Message = dict[str, str]  # {"role": ..., "content": ...}
Order = Literal["ab", "ba"]


@dataclass(frozen=True)
class Pair:
    """One preference pair: conversation history ending in a user turn, and two responses."""

    id: str
    row_number: int
    messages: tuple[Message, ...]
    response_a: str
    response_b: str
    label: Literal["A", "B"] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def content_hash(self) -> str:
        """A digest of everything judged and stored for the pair (conversation, both responses,
        gold label, passthrough columns), kept in `pairs.content_hash`: a resume compares it to
        tell an edited row from one already judged."""
        import hashlib

        from rmjudge.core import jsontext

        blob = jsontext.dumps([list(self.messages), self.response_a, self.response_b,
                               self.label, self.extra], sort_keys=True)
        return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()


class RawPrompt(tuple):
    """Messages sent to the model as one plain completion prompt, their contents as they are,
    without the chat template around them: for the judge formats whose authors prompt their
    judge that way (rmjudge.prompts.builtin_formats). Any other tuple of messages goes through
    the chat template."""

    __slots__ = ()


@dataclass(frozen=True)
class ForceSpec:
    """How to force a verdict when a generation does not parse.

    `continuation(text)` returns the text to append after the generated text (or None when the
    text already parses); the engine then reads the probabilities of `choices` as the next
    tokens from the logits.
    """

    continuation: Callable[[str], str | None]
    choices: tuple[str, str] = ("1", "2")


@dataclass(frozen=True)
class GenRequest:
    """`n` samples for one chat prompt. Samples share the prompt; the engine prefills it once.

    `share_key`: requests with the same key share the longest common prefix of their prompts
    (the engine may evaluate it once). `seed` fixes the sampling of every sample: sample i uses
    a generator derived from (seed, i), whatever the batch it lands in.
    """

    messages: tuple[Message, ...]
    n: int = 1
    assistant_prefix: str = ""
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    force: ForceSpec | None = None
    share_key: Any = None
    # required (a keyword): the token limit comes from the run spec (rmjudge.judging.runspec), never
    # from a default here
    max_tokens: int = field(kw_only=True)


@dataclass
class Generation:
    """One generated sample. `text` excludes the assistant prefix and includes a matched stop."""

    text: str
    token_logprobs: list[float]
    finish_reason: Literal["stop", "length", "error"]
    forced_probs: tuple[float, float] | None = None  # p(choice 1), p(choice 2), normalized
    forced_logprob: float | None = None  # log p of the forced choice under the full vocab
    error: str | None = None
    # where each token ends in `text` (UTF-8 byte offsets), from engines that know it: a judge
    # format reads the log-probabilities of its verdict's tokens (rmjudge.prompts.formats)
    token_ends: list[int] | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.token_logprobs)
