"""`rmjudge view`: an offline explorer of every judgment in a judged table."""

from __future__ import annotations

import click


@click.command("view")
@click.argument("table", metavar="TABLE")
@click.option("-o", "--output", default=None, metavar="DIR",
              help="Folder to write the explorer into (default: next to TABLE, NAME.view); an "
              "earlier explorer there is replaced, any other content refused.")
def command(table: str, output: str | None) -> None:
    """Write an explorer of every pair of a judged TABLE (x.duckdb, x.parquet or x.jsonl): the
    list with filters, search and sorting, and for each pair the prompt, both responses, every
    rollout and reflection of both orders, with marks A / B / tie / skip that download as a
    file for `rmjudge review import`. It opens from disk in any browser, offline. A ranked
    store (`rmjudge rank`) opens on its prompts: candidates in rank order and the results of
    their comparisons, each a click from its full judgment."""
    from rmjudge.view.site import build_view, render

    summary = build_view(table, output)
    click.echo(render(summary), err=True)
