"""Control-token strings inside data, for servers that take prompts only as text.

A server that tokenizes a text prompt with special-token parsing on (llama-cpp-python's
`/v1/completions`, any server's chat endpoint) reads `<|im_end|>` inside a response as the
control token, so a row could close the judge's turn and open its own. Where rmjudge cannot
send token ids (engine/server.py), it breaks every control-token string in the data's text by
inserting U+200B ZERO WIDTH SPACE after its first character: the server then reads it as plain
text (a token or two more than the in-process engine, which tokenizes the data without special
parsing), and the run records that it did so (`ModelInfo.prompt_encoding`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

BREAK = "\u200b"  # ZERO WIDTH SPACE

# Control-token spellings of common chat templates, found in a template's source: ChatML and
# Llama-3 style <|...|>, DeepSeek's fullwidth <｜...｜>, Gemma's <start_of_turn>, [INST], <s>.
_IN_TEMPLATE = re.compile(r"<\|[^<>\s|]{1,64}\|>|<｜[^<>]{1,64}?｜>|</?(?:start|end)_of_turn>"
                          r"|\[/?[A-Z][A-Z_]{1,30}\]|</?s>")
# Always broken in data, whatever the template: any <|...|> looks like a control token.
_GENERIC = r"<\|[^<>\s|]{1,64}\|>"


def looks_like_control(text: str) -> bool:
    """Whether a vocabulary's special-token text is markup worth breaking in data (not, for
    instance, a user-defined run of spaces)."""
    return len(text) >= 2 and any(c in text for c in "<>[]|｜")


def template_strings(template_source: str | None, bos: str = "", eos: str = "") -> set[str]:
    """Control-token strings a chat template (its Jinja source) and its BOS/EOS spell out."""
    found = set(_IN_TEMPLATE.findall(template_source or ""))
    return found | {s for s in (bos, eos) if looks_like_control(s)}


class Neutralizer:
    """Breaks the given control strings (and any `<|...|>`) in text with `BREAK`."""

    def __init__(self, strings: Iterable[str]):
        self.strings = sorted({s for s in strings if len(s) >= 2}, key=len, reverse=True)
        parts = [re.escape(s) for s in self.strings] + [_GENERIC]
        self._pattern = re.compile("|".join(parts))

    def __call__(self, text: str) -> str:
        for _ in range(8):  # a break can expose an overlapping string: repeat until none
            new = self._pattern.sub(lambda m: m.group(0)[0] + BREAK + m.group(0)[1:], text)
            if new == text:
                return text
            text = new
        return text

    def has_control(self, text: str) -> bool:
        return self._pattern.search(text) is not None
