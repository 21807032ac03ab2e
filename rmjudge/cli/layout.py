"""What the commands print goes through here: prose wrapped to the width of its stream, and
the layout helpers of rmjudge/core/layout.py (tables, Markdown tables, the width)."""

from __future__ import annotations

import sys

from rmjudge.core.layout import (DEFAULT_WIDTH, fit_markdown, fit_table,  # noqa: F401
                                 output_width, stacked, table, wrap, wrap_line)


def echo(text: str, err: bool = False) -> None:
    """Print prose wrapped to the width of the stream it goes to (an `Error:` line is not
    printed here: it stays one line, rmjudge.cli.common.report_user_error)."""
    import click

    click.echo(wrap(text, output_width(sys.stderr if err else sys.stdout)), err=err)
