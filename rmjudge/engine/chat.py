"""Chat-template rendering that keeps the data's text apart from the template's control text.

A judge prompt is the model's chat template (Jinja, from the GGUF or the HF tokenizer) around
message contents that come from untrusted data. `ChatTemplate.segments` returns the rendered
prompt as `(text, is_template)` pieces: engines tokenize template pieces with special-token
parsing on (so `<|im_start|>` is the control token) and data pieces with it off (so the same
characters inside a prompt or response stay plain text). `render` is the same text joined, for
engines that send text (servers, the naive path). Pure Python: no llama.cpp needed.
"""

from __future__ import annotations

from typing import Sequence

from rmjudge.core.types import Message, RawPrompt
from rmjudge.prompts.sandbox import (TemplateError, sandbox_environment,  # noqa: F401
                                     template_failure)

# The conversation every judge prompt has: one user turn (rmjudge.prompts). A template that
# cannot render it cannot build any prompt, so it is refused when it is loaded.
_PROBE = ({"role": "user", "content": "Which response is better?"},)


class ChatTemplate:
    """`origin` names where the template came from and `fix` what to do when it fails, for
    the one-line error (e.g. "the chat template of judge.gguf" / "use another GGUF")."""

    def __init__(self, template: str | None, bos: str = "", eos: str = "", *,
                 origin: str = "the chat template",
                 fix: str = "fix the template or give a working one"):
        self.source = template
        self.bos = bos
        self.eos = eos
        self.origin = origin
        self.fix = fix
        self._template = None
        if template:
            env = sandbox_environment()

            def raise_exception(message):
                raise TemplateError(f"{origin} refused the prompt: {message}; {fix}")

            env.globals["raise_exception"] = raise_exception
            try:
                self._template = env.from_string(template)
            except Exception as exc:  # noqa: BLE001 - any failure of untrusted template code
                raise template_failure(exc, origin, fix) from None
            self.segments(_PROBE)

    def _failure(self, exc: Exception) -> TemplateError:
        return template_failure(exc, self.origin, self.fix)

    def render(self, messages: Sequence[Message], assistant_prefix: str = "") -> str:
        return "".join(t for t, _ in self.segments(messages, assistant_prefix))

    def segments(self, messages: Sequence[Message],
                 assistant_prefix: str = "") -> list[tuple[str, bool]]:
        """The prompt as (text, is_template) pieces, in order; data pieces are the message
        contents and the assistant prefix, everything else is the template's."""
        if isinstance(messages, RawPrompt):  # a completion prompt: no template around it
            pieces = [(m["content"], False) for m in messages]
        elif self._template is None:  # no template: a plain transcript, all of it data-like text
            pieces: list[tuple[str, bool]] = []
            for m in messages:
                pieces += [(f"{m['role'].capitalize()}: ", True), (m["content"], False),
                           ("\n\n", True)]
            pieces.append(("Assistant: ", True))
        else:
            from rmjudge.prompts.render_limit import render_bounded

            try:
                text = render_bounded(self._template, messages=list(messages),
                                      add_generation_prompt=True, bos_token=self.bos,
                                      eos_token=self.eos)
            except TemplateError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of untrusted template code
                raise self._failure(exc) from None
            pieces = _split_contents(text, [m["content"] for m in messages])
        if assistant_prefix:
            pieces.append((assistant_prefix, False))
        return [(t, tmpl) for t, tmpl in pieces if t]


def _split_contents(text: str, contents: list[str]) -> list[tuple[str, bool]]:
    """Find each message content in the rendered text, in order; the rest is template.

    A template may trim a content; then its trimmed form is looked for. A content the template
    changed beyond that is not found and its text stays in a template piece, so a data piece is
    always exactly the data's characters."""
    pieces: list[tuple[str, bool]] = []
    pos = 0
    for c in contents:
        for cand in (c, c.strip()):
            i = text.find(cand, pos) if cand else -1
            if i >= 0:
                pieces.append((text[pos:i], True))
                pieces.append((cand, False))
                pos = i + len(cand)
                break
    pieces.append((text[pos:], True))
    return pieces
