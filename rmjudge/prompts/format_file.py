"""Format files: `--judge-format my-judge.toml` for a judge rmjudge has no built-in format for.

```toml
name = "my-judge"                  # recorded with the run's settings; not a built-in's name
title = "My judge, pairwise"       # optional
labels = ["A", "B"]                # how the prompt names the first and the second response
system = "You are a fair judge."   # optional system prompt
prompt = '''
Question: {{ context }}
Answer A: {{ response1 }}
Answer B: {{ response2 }}
{% if criteria %}Rubric: {{ criteria }}{% endif %}
End with [[A]] or [[B]].'''

[verdict]
first = '\\[\\[A\\]\\]'             # regular expressions (Python `re`)
second = '\\[\\[B\\]\\]'
tie = '\\[\\[C\\]\\]'               # optional: a tie form
where = "last"                     # last | first | only: which match is the verdict
ignore_case = false
force = "\\n[["                    # optional: the text that leads to the verdict, for --forced
force_choices = ["A", "B"]

[reflection]                       # optional: a critique-comparison prompt of the judge's own
prompt = '''... {{ critique1 }} ... {{ critique2 }} ... [[1]] or [[2]]'''
first = '\\[\\[1\\]\\]'
second = '\\[\\[2\\]\\]'
```

The prompt is a Jinja2 template rendered in the sandbox `--prompt-template` renders in, with
`context`, `messages` (the conversation's turns), `response1`, `response2` and `criteria`
(`--criteria`, or none; a format whose prompt does not use `criteria` refuses `--criteria`).
The file is checked in full before any model loads: unknown keys, missing keys, bad types,
patterns that do not compile or match an empty text, a prompt that lacks a slot (with criteria
and without) or fails to render, a forced-verdict text that cannot be used; each is one
`JudgeFormatError` naming the file, the key and the fix. Patterns are searched with a time
bound (rmjudge.prompts.native_format).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rmjudge.prompts.formats import JudgeFormatError
from rmjudge.prompts.native_format import NativeFormat, Reflection, pattern_reader

FIX = "see docs/judges.md, \"Format files\""
TOP_KEYS = {"name", "title", "labels", "system", "prompt", "verdict", "reflection"}
VERDICT_KEYS = {"first", "second", "tie", "where", "ignore_case", "force", "force_choices"}
REFLECTION_KEYS = {"prompt", "first", "second", "where", "ignore_case"}
MARKS = {"context": "\u27e6CONVERSATION\u27e7", "response1": "\u27e6RESPONSE-1\u27e7",
         "response2": "\u27e6RESPONSE-2\u27e7", "criteria": "\u27e6CRITERIA\u27e7",
         "critique1": "\u27e6CRITIQUE-1\u27e7", "critique2": "\u27e6CRITIQUE-2\u27e7"}


def load_format_file(path: str, what: str = "--judge-format") -> NativeFormat:
    """The format in the TOML file `path`, checked in full (module docstring); errors name it
    as `what` gives it ("--judge-format", "rmjudge formats")."""
    from rmjudge.io.textfile import read_text_file

    text = read_text_file(path, f"{what} {path}", f"give a readable UTF-8 TOML file; "
                          f"{FIX}", JudgeFormatError)
    return format_from_text(path, text, what)


def format_from_text(path: str, text: str, what: str = "--judge-format") -> "FileFormat":
    """The format of a format file whose text `text` was read from `path`, checked in full."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise JudgeFormatError(f"{what} {path} is not valid TOML ({exc}); {FIX}") from None
    except RecursionError:
        raise JudgeFormatError(f"{what} {path} nests its values too deeply to read; "
                               f"{FIX}") from None
    return _FileReader(path, data, what, text).format()


@dataclass(frozen=True, eq=False)
class FileFormat(NativeFormat):
    """A format file's format. Pickled as the file's text, read again when unpickled (a Ray
    worker gets the run's format without reading its file; its compiled prompts and readers
    do not pickle)."""

    file: tuple[str, str, str] = ("", "", "")  # (path, text, what)

    def __reduce__(self):
        return (format_from_text, self.file)


class _FileReader:
    def __init__(self, path: str, data: dict, what: str, text: str):
        self.path = path
        self.data = data
        self.what = what
        self.text_read = text

    def fail(self, key: str, what: str) -> JudgeFormatError:
        return JudgeFormatError(f"{self.what} {self.path}: {key} {what}; {FIX}")

    def keys(self, table: dict, allowed: set[str], where: str) -> None:
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise self.fail(f"{where}{unknown[0]}", f"is not a key of a format file (known: "
                            f"{', '.join(sorted(allowed))})")

    def text(self, table: dict, key: str, where: str = "", required: bool = True) -> str | None:
        value = table.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"{where}{key}", "must be a non-empty string" if key in table
                            else "is missing")
        return value

    def pattern(self, table: dict, key: str, where: str, flags: int,
                required: bool = True) -> str | None:
        import regex

        value = self.text(table, key, where, required)
        if value is None:
            return None
        try:
            rx = regex.compile(value, flags)
        except (regex.error, re.error, ValueError) as exc:
            raise self.fail(f"{where}{key}", f"is not a regular expression ({exc})") from None
        if rx.search(""):
            raise self.fail(f"{where}{key}", "matches an empty text; give the verdict's own words")
        return value

    def template(self, source: str, key: str, slots: list[str]):
        """The compiled prompt, and what it renders with criteria (marked); each required slot
        must show both with criteria and without (a run without --criteria gives none)."""
        from rmjudge.prompts.template import PromptTemplate

        tpl = PromptTemplate(source, self.path, what=f"{self.what} {self.path}: {key}",
                             fix=FIX, error=JudgeFormatError)
        marks = {k: MARKS[k] for k in MARKS}
        turns = [{"role": "user", "content": MARKS["context"]}]
        rendered = tpl.render(messages=turns, **marks)
        plain = tpl.render(messages=turns, **{**marks, "criteria": None})
        for slot in slots:
            for text, how in ((rendered, "with --criteria"), (plain, "without --criteria")):
                if MARKS[slot] not in text:
                    raise self.fail(key, f"lacks the slot {{{{ {slot} }}}} when rendered {how}")
        return tpl, rendered

    def reader(self, table: dict, where: str, ties: bool):
        self.keys(table, VERDICT_KEYS if where == "verdict." else REFLECTION_KEYS, where)
        where_to = table.get("where", "last")
        if where_to not in ("last", "first", "only"):
            raise self.fail(f"{where}where", "must be last, first or only")
        ignore = table.get("ignore_case", False)
        if not isinstance(ignore, bool):
            raise self.fail(f"{where}ignore_case", "must be true or false")
        flags = re.IGNORECASE if ignore else 0
        first = self.pattern(table, "first", where, flags)
        second = self.pattern(table, "second", where, flags)
        tie = self.pattern(table, "tie", where, flags, required=False) if ties else None
        rule = f"{where_to} {first!r} {second!r} {tie!r} {ignore}"
        return pattern_reader(first, second, tie, where_to, flags), rule  # type: ignore[arg-type]

    def force(self, table: dict):
        cont = table.get("force")
        choices = table.get("force_choices")
        if cont is None:
            if choices is not None:
                raise self.fail("verdict.force_choices", "needs verdict.force, the text that "
                                "leads up to the verdict")
            return None
        if not isinstance(cont, str) or not cont or not (
                isinstance(choices, list) and len(choices) == 2
                and all(isinstance(c, str) and c for c in choices) and choices[0] != choices[1]):
            raise self.fail("verdict.force", "needs a string and force_choices, two different "
                            "strings (the first position's, then the second's)")
        return cont, (choices[0], choices[1])

    def format(self) -> NativeFormat:
        from rmjudge.prompts.builtin_formats import BUILTIN

        d = self.data
        self.keys(d, TOP_KEYS, "")
        name = self.text(d, "name")
        title = self.text(d, "title", required=False)
        if title is not None and "\n" in title:
            raise self.fail("title", "must be one line")
        if name in BUILTIN:
            raise self.fail("name", f"{name!r} is a built-in format's name; choose another")
        labels = d.get("labels", ["1", "2"])
        if not (isinstance(labels, list) and len(labels) == 2
                and all(isinstance(x, str) and x for x in labels)):
            raise self.fail("labels", "must be two non-empty strings")
        verdict = d.get("verdict")
        if not isinstance(verdict, dict):
            raise self.fail("[verdict]", "is missing (the patterns of the two verdicts)"
                            if verdict is None else "must be a table ([verdict] with first "
                            "and second)")
        ties = "tie" in verdict
        source = self.text(d, "prompt")
        tpl, rendered = self.template(source, "prompt", ["context", "response1", "response2"])
        read, rule = self.reader(verdict, "verdict.", ties)
        system = self.text(d, "system", required=False)
        render = (lambda slots, conversation: tpl.render(
            messages=[dict(m) for m in conversation], critique1="", critique2="",
            **{**slots, "criteria": slots["criteria"] or None}))
        return FileFormat(
            name=name, title=title or f"format file {self.path}",  # type: ignore[arg-type]
            source=f"format file {self.path}", labels=(labels[0], labels[1]), ties=ties,
            rubric=MARKS["criteria"] in rendered, families=(), system=system, user=source,
            render=render, reader=read, rule=rule, force=self.force(verdict),
            no_force="the file gives no verdict.force",
            reflection=self.reflection(d.get("reflection")),
            file=(self.path, self.text_read, self.what))

    def reflection(self, table) -> Reflection | None:
        if table is None:
            return None
        if not isinstance(table, dict):
            raise self.fail("[reflection]", "must be a table")
        source = self.text(table, "prompt", "reflection.")
        tpl, _ = self.template(source, "reflection.prompt",
                               ["context", "response1", "response2", "critique1", "critique2"])
        read, rule = self.reader(table, "reflection.", ties=False)

        def messages(conversation, r1, r2, c1, c2, suffix, style):
            from rmjudge.prompts import render_conversation

            body = tpl.render(context=render_conversation(conversation),
                              messages=[dict(m) for m in conversation], response1=r1,
                              response2=r2, critique1=c1, critique2=c2, criteria=style.criteria)
            return ({"role": "user", "content": body + suffix},)

        def parse(text: str) -> int | None:
            verdict = read(text)
            return None if verdict is None else verdict.prediction

        return Reflection(messages=messages, parse=parse, identity=f"{source}\x1f{rule}")
