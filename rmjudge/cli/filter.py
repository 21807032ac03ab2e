"""`rmjudge filter`: write a cleaned preference dataset from a judged table."""

from __future__ import annotations

import os

import click

from rmjudge.cli.common import fail


def default_output(table: str, fmt: str) -> str:
    stem = table
    for ext in (".duckdb", ".parquet", ".jsonl", ".json"):
        if stem.lower().endswith(ext):
            stem = stem[: -len(ext)]
            break
    if stem.endswith(".judged"):
        stem = stem[: -len(".judged")]
    return f"{stem}.{fmt}.jsonl"


@click.command("filter")
@click.argument("table", metavar="TABLE")
@click.option("-o", "--output", default=None,
              help="Dataset to write, .jsonl or .parquet (default: next to TABLE, "
              "NAME.dpo.jsonl / NAME.rm.jsonl).")
@click.option("--format", "fmt", type=click.Choice(["dpo", "rm"]), default="dpo",
              show_default=True,
              help="dpo: TRL prompt/chosen/rejected; rm: chosen/rejected as whole conversations.")
@click.option("--chat", is_flag=True,
              help="dpo: prompt as chat messages and chosen/rejected as assistant messages.")
@click.option("--min-confidence", default=0.5, show_default=True,
              help="Minimum share of the final votes for the judge's winner (averaged over the "
              "orders; 0.5 keeps every winner, 1.0 only unanimous ones).")
@click.option("--allow-inconsistent", is_flag=True,
              help="Keep pairs whose orders disagree when the run's --on-inconsistent policy "
              "still gave a winner (confident), and pairs with one failed order.")
@click.option("--relabel", is_flag=True,
              help="Swap chosen and rejected where the judge disagrees with the label with at "
              "least --relabel-min of the votes (default: drop such pairs).")
@click.option("--relabel-min", default=0.75, show_default=True)
@click.option("--unlabelled", type=click.Choice(["label", "drop"]), default="label",
              show_default=True,
              help="Pairs without a gold label: label them with the judge's winner, or drop them.")
@click.option("--keep-columns", default="", metavar="COL,...",
              help="Columns of the judged table to carry along (passthrough columns, id, p_a, ...).")
def command(table: str, output: str | None, fmt: str, chat: bool, min_confidence: float,
            allow_inconsistent: bool, relabel: bool, relabel_min: float, unlabelled: str,
            keep_columns: str) -> None:
    """Write the pairs of a judged TABLE that the judge supports as a training dataset
    (Parquet or JSONL, loadable with datasets.load_dataset), and say how many were kept,
    swapped, labelled and dropped, and why."""
    from rmjudge.analysis.filter import FilterSettings, filter_table, render
    from rmjudge.analysis.tables import TableError, open_judged

    try:
        fs = FilterSettings(
            min_confidence=min_confidence, consistent_only=not allow_inconsistent,
            relabel=relabel, relabel_min=relabel_min, label_unlabelled=unlabelled == "label",
            format=fmt, chat=chat,
            keep_columns=tuple(c.strip() for c in keep_columns.split(",") if c.strip()))
    except ValueError as exc:
        fail(str(exc))
    out = output or default_output(table, fmt)
    try:
        with open_judged(table) as t:
            summary = filter_table(t, out, fs)
    except TableError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}; choose another -o")
    click.echo(render(summary), err=True)
    if summary.written == 0 and os.path.exists(out):
        click.echo("note: no pair passed the filter; the output is empty", err=True)
