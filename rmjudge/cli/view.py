"""`rmjudge view`: an offline explorer of every judgment in a judged table."""

from __future__ import annotations

from dataclasses import dataclass

import click

from rmjudge.cli.options import settings_from, settings_options
from rmjudge.core.settings import setting


@dataclass(frozen=True)
class ViewCall:
    """What `view` reads and where the explorer goes."""

    table: str = setting(argument=True, metavar="TABLE")
    output: str | None = setting(None, "Folder to write the explorer into (default: next to "
                                 "TABLE, NAME.view); an earlier explorer there is replaced, any "
                                 "other content refused.", option=("-o", "--output"),
                                 metavar="DIR")


@click.command("view")
@settings_options(ViewCall)
def command(**kw) -> None:
    """Write an explorer of every pair of a judged TABLE (x.duckdb, x.parquet or x.jsonl): the
    list with filters, search and sorting, and for each pair the prompt, both responses, every
    rollout and reflection of both orders, with marks A / B / tie / skip that download as a
    file for `rmjudge review import`. It opens from disk in any browser, offline. A ranked
    store (`rmjudge rank`) opens on its prompts: candidates in rank order and the results of
    their comparisons, each a click from its full judgment."""
    from rmjudge.view.site import build_view, render

    call = settings_from(ViewCall, kw)
    summary = build_view(call.table, call.output)
    from rmjudge.cli.layout import echo

    echo(render(summary), err=True)
