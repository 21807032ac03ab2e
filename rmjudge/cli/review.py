"""`rmjudge review`: export pairs for human review, import the labels that come back."""

from __future__ import annotations

import click


@click.group("review")
def command() -> None:
    """Human review of a judged table: `export` the pairs a person should look at (CSV, JSONL,
    Label Studio, Argilla), `import` their labels into the run store; `rmjudge eval` and
    `rmjudge compare` then report the judge's agreement with them, and `rmjudge filter
    --prefer human` uses them."""


@command.command("export")
@click.argument("table", metavar="X.duckdb")
@click.option("-o", "--output", "out_dir", required=True, metavar="DIR",
              help="Folder to write the review files into (existing review files in it are "
              "never replaced).")
@click.option("--select", "selects", multiple=True, required=True,
              metavar="flipped|low-confidence|disagree-with-gold|jury-split|random:N",
              help="Which pairs (repeatable; the union is written): flipped (the orders name "
              "different winners), low-confidence (vote share for A within --threshold of "
              "0.5), disagree-with-gold (verdict A/B/tie other than the gold label), "
              "jury-split (a jury table whose judges differ), random:N (N pairs, --seed).")
@click.option("--format", "fmts", multiple=True,
              type=click.Choice(["csv", "jsonl", "labelstudio", "argilla"]),
              help="File formats (repeatable; default csv).")
@click.option("--threshold", default=0.1, show_default=True,
              help="low-confidence: largest distance of the vote share for A from 0.5.")
@click.option("--seed", default=0, show_default=True, help="random:N: the draw's seed.")
@click.option("--push-argilla", "push_name", default=None, metavar="NAME",
              help="Also create an Argilla dataset NAME from the argilla files (pip install "
              "argilla; server from ARGILLA_API_URL and ARGILLA_API_KEY).")
def export_command(table: str, out_dir: str, selects: tuple[str, ...], fmts: tuple[str, ...],
                   threshold: float, seed: int, push_name: str | None) -> None:
    """Write the pairs of a judged TABLE that a human should look at, with the judge's vote
    share, both orders' verdicts, the anchor analysis and the gold label, for labelling A, B
    or tie (Response 1 is slot A)."""
    from rmjudge.analysis.tables import open_judged
    from rmjudge.review.export import check_argilla, export_review, push_argilla, render
    from rmjudge.review.select import parse_selection

    selections = list(dict.fromkeys(parse_selection(s) for s in selects))
    formats = list(dict.fromkeys(fmts or ("csv",)))
    if push_name:
        check_argilla()  # before any work
        if "argilla" not in formats:
            formats.append("argilla")
    with open_judged(table) as t:
        summary = export_review(t, out_dir, selections, formats, threshold, seed)
    click.echo(render(summary), err=True)
    if push_name:
        import os

        name = push_argilla(os.path.join(out_dir, "argilla"), push_name)
        click.echo(f"created the Argilla dataset {name}", err=True)


@command.command("import")
@click.argument("table", metavar="X.duckdb")
@click.argument("labels", metavar="LABELS")
@click.option("--reviewer", default=None, metavar="NAME",
              help="Name the reviewer of every label in the file (default: the annotator the "
              "file names, else none).")
def import_command(table: str, labels: str, reviewer: str | None) -> None:
    """Read the human labels in LABELS (the edited review.csv / review.jsonl, Label Studio's
    JSON export, Argilla's records.json or export folder) into TABLE's human_labels table.
    Importing again replaces the labels of the same pair and reviewer."""
    from rmjudge.review.importer import import_labels, render

    summary = import_labels(table, labels, reviewer)
    click.echo(render(summary), err=True)
