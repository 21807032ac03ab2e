"""`rmjudge review`: export pairs for human review, import the labels that come back."""

from __future__ import annotations

import click

from rmjudge.cli.layout import echo
from rmjudge.cli.options import settings_from, settings_options
from rmjudge.review.export import ReviewSettings
from rmjudge.review.importer import ImportSettings


@click.group("review")
def command() -> None:
    """Human review of a judged table: `export` the pairs a person should look at (CSV, JSONL,
    Label Studio, Argilla), `import` their labels into the run store; `rmjudge eval` and
    `rmjudge compare` then report the judge's agreement with them, and `rmjudge filter
    --prefer human` uses them."""


@command.command("export")
@settings_options(ReviewSettings)
def export_command(**kw) -> None:
    """Write the pairs of a judged TABLE that a human should look at, with the judge's vote
    share, both orders' verdicts, the anchor analysis and the gold label, for labelling A, B
    or tie (Response 1 is slot A)."""
    from rmjudge.review.export import render, run_export

    name = run_export(settings_from(ReviewSettings, kw),
                      on_written=lambda summary: echo(render(summary), err=True))
    if name is not None:
        echo(f"created the Argilla dataset {name}", err=True)


@command.command("import")
@settings_options(ImportSettings)
def import_command(**kw) -> None:
    """Read the human labels in LABELS (the edited review.csv / review.jsonl, Label Studio's
    JSON export, Argilla's records.json or export folder) into TABLE's human_labels table.
    Importing again replaces the labels of the same pair and reviewer."""
    from rmjudge.review.importer import import_labels, render

    s = settings_from(ImportSettings, kw)
    echo(render(import_labels(s.table, s.labels, s.reviewer)), err=True)
