"""A run's judge format and prompt style, chosen once, before any model loads: `--judge-format`
(a built-in's name or a format file) with `--criteria` and `--prompt-template` (`run_style`),
and the format of a style (`format_of`: ReflectRM's when none was chosen)."""

from __future__ import annotations

import os

from rmjudge.prompts import PromptStyle, prompt_style
from rmjudge.prompts.builtin_formats import BUILTIN
from rmjudge.prompts.formats import (DEFAULT_FORMAT, FORMATS_FIX, JudgeFormat, JudgeFormatError,
                                     check_style_options)
from rmjudge.prompts.reflectrm_format import REFLECTRM


def judge_format(value: str | None, what: str = "--judge-format") -> JudgeFormat:
    """The format `--judge-format` names: a built-in's name, or the path of a format file
    (TOML), checked in full here (errors name the value as `what` gives it)."""
    name = DEFAULT_FORMAT if value is None else value
    if name in BUILTIN:
        return BUILTIN[name]
    if name.endswith(".toml") or "/" in name or name.startswith(".") or os.path.exists(name):
        from rmjudge.prompts.format_file import load_format_file

        return load_format_file(name, what)
    raise JudgeFormatError(f"{what} {name!r}: no built-in format of that name and not a "
                           f"format file (a .toml path); built-in: {', '.join(BUILTIN)}; "
                           f"{FORMATS_FIX}")


def run_style(criteria: str | None = None, template: str | None = None,
              judge_format_value: str | None = None) -> PromptStyle:
    """The style of `--criteria`, `--prompt-template` and `--judge-format`, resolved and
    checked: a bad value, `--criteria` for a format without a rubric slot or
    `--prompt-template` with a format other than ReflectRM's raises a UserError."""
    chosen = judge_format(judge_format_value)
    if chosen is REFLECTRM:
        return prompt_style(criteria, template)
    check_style_options(chosen, criteria, template)
    return PromptStyle(prompt_style(criteria).criteria, None, chosen)


def format_of(style: PromptStyle) -> JudgeFormat:
    """The judge format of a style (ReflectRM's when none was chosen)."""
    return style.format or REFLECTRM


def format_has_rubric(value: str | None) -> bool:
    """Whether the format `--judge-format value` names has a rubric slot."""
    return judge_format(value).rubric
