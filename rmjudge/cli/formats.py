"""`rmjudge formats`: the judge formats `--judge-format` takes, or one of them in full."""

from __future__ import annotations

from dataclasses import dataclass

import click

from rmjudge.cli.options import settings_from, settings_options
from rmjudge.core.settings import setting


@dataclass(frozen=True)
class FormatsCall:
    """What `formats` is given."""

    name: str | None = setting(None, argument=True, required=False, metavar="[NAME|FILE.toml]")
    prompt: bool = setting(False, "Also print the format's prompt for a marked example pair.",
                           flag="--prompt")


@click.command("formats")
@settings_options(FormatsCall)
def command(**kw) -> None:
    """List the built-in judge formats, or show one (a built-in's NAME, or a format file,
    checked as a run checks it) with its labels, ties, rubric and source."""
    import shutil
    import textwrap

    from rmjudge.prompts.builtin_formats import BUILTIN
    from rmjudge.prompts.choice import judge_format
    from rmjudge.prompts.formats import describe, example_prompt

    call = settings_from(FormatsCall, kw)
    chosen = ([judge_format(call.name, "rmjudge formats")] if call.name
              else list(BUILTIN.values()))
    width = max(40, min(shutil.get_terminal_size((80, 24)).columns, 100))

    def wrap(text: str, first: str = "", rest: str = "", keep: bool = False) -> str:
        """`text` wrapped at spaces (`keep`: its own spacing kept, as a prompt's)."""
        return textwrap.fill(text, width, initial_indent=first, subsequent_indent=rest,
                             replace_whitespace=False, drop_whitespace=not keep,
                             break_long_words=False, break_on_hyphens=False) if text else ""

    for i, fmt in enumerate(chosen):
        if i:
            click.echo("")
        click.echo(wrap(f"{fmt.name}: {fmt.title}", "", "  "))
        for key, text in describe(fmt):
            click.echo(wrap(text, f"  {key}: ", "    "))
        if call.prompt:  # its long lines wrapped at spaces to fit the terminal
            click.echo("")
            for line in example_prompt(fmt).split("\n"):
                click.echo(wrap(line, keep=True))
    if not call.name:
        click.echo("")
        click.echo(wrap("--judge-format NAME picks one; --judge-format FILE.toml reads a "
                        "format file (docs/judges.md)."))
