"""`--prompt-template FILE`: the user's own wording of both judging prompts, as one Jinja2
template rendered in the sandbox that chat templates render in (rmjudge.prompts.sandbox).

The template receives `task` ("pref": which response is better; "refl": which critique is
better), `context` (the conversation as text), `messages` (the conversation as role/content
dicts), `response1`, `response2`, `critique1`, `critique2` (empty for "pref"), `criteria`
(the `--criteria` text, or none) and `answer_format` (the task's answer instructions with its
two verdict lines). The model family's prompt suffix is appended to what it renders.

`load_template` checks a template before any model loads: it compiles, renders both tasks with
marker values, and each required slot's marker and both verdict lines of each task must appear
in what it renders; any failure is one TemplateError naming the file, the slot and the fix.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from rmjudge.core.errors import UserError

FIX = "see docs/scoring.md, \"Criteria and prompt templates\""


class PromptTemplateError(UserError):
    """A `--prompt-template` cannot be used; the message names the file, the fault and the fix."""


class PromptTemplate:
    """A compiled `--prompt-template` (`text`: its source; `origin`: its file name)."""

    def __init__(self, text: str, origin: str, what: str | None = None, fix: str = FIX,
                 error: type[UserError] = PromptTemplateError):
        """`what`: how its errors name it (default "--prompt-template ORIGIN"); `fix` and
        `error`: what they advise and raise (a format file's prompts say theirs)."""
        from rmjudge.prompts.sandbox import sandbox_environment

        self.text = text
        self.origin = origin
        self._given = (what, fix, error)  # what `__reduce__` makes it again from
        self.what = what or f"--prompt-template {origin}"
        self.fix = fix
        self.error = error
        self.sha256 = hashlib.sha256(text.encode()).hexdigest()
        try:
            self._template = sandbox_environment().from_string(text)
        except Exception as exc:  # noqa: BLE001 - any failure of untrusted template code
            raise self._failure(exc) from None


    def __reduce__(self):
        """Pickled as its source, compiled again when unpickled (a Ray worker gets the run's
        template without reading its file)."""
        return (PromptTemplate, (self.text, self.origin, *self._given))
    def _failure(self, exc: Exception) -> UserError:
        from rmjudge.prompts.sandbox import template_failure

        return template_failure(exc, self.what, self.fix, self.error)

    def render(self, **variables: Any) -> str:
        from rmjudge.prompts.render_limit import render_bounded

        try:
            return render_bounded(self._template, **variables)
        except Exception as exc:  # noqa: BLE001 - any failure of untrusted template code
            raise self._failure(exc) from None


def read_template(path: str) -> PromptTemplate:
    """The compiled template in `path`; an unreadable file is a PromptTemplateError."""
    from rmjudge.io.textfile import TEXT_FILE_LIMIT, read_text_file, size_words

    text = read_text_file(path, f"--prompt-template {path}",
                          f"give a readable UTF-8 Jinja2 file of at most "
                          f"{size_words(TEXT_FILE_LIMIT)}", PromptTemplateError)
    if not text.strip():
        raise PromptTemplateError(f"--prompt-template {path} is empty; {FIX}")
    return PromptTemplate(text, path)


def check_rendered(template: PromptTemplate, task: str, rendered: str,
                   required: dict[str, str], verdicts: tuple[str, ...]) -> None:
    """Refuse a template whose rendering of `task` lacks a slot (`required`: slot name ->
    its marker value) or a verdict line."""
    what = {"pref": "the response-preference prompt (task == \"pref\")",
            "refl": "the reflection prompt (task == \"refl\")"}[task]
    for slot, marker in required.items():
        if marker not in rendered:
            raise PromptTemplateError(
                f"--prompt-template {template.origin}: {what} lacks the slot {{{{ {slot} }}}}; "
                f"{FIX}")
    for line in verdicts:
        if line not in rendered:
            raise PromptTemplateError(
                f"--prompt-template {template.origin}: {what} lacks the verdict format (the "
                f"line \"{line}\"; {{{{ answer_format }}}} gives it); {FIX}")


def load_template(path: str, check: Callable[[PromptTemplate], None]) -> PromptTemplate:
    """The template in `path`, checked by `check` (rmjudge.prompts.check_template)."""
    template = read_template(path)
    check(template)
    return template
