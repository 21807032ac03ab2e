"""`rmjudge merge`: check run stores judged in shards and merge them into one."""

from __future__ import annotations

import click

from rmjudge.cli.common import fail
from rmjudge.cli.mapping_options import dataset_options, input_source


@click.command("merge")
@click.argument("shards", nargs=-1, required=True, metavar="SHARD.duckdb...")
@click.option("-o", "--output", required=True, help="The merged run store (.duckdb).")
@click.option("--input", "source", default=None, metavar="FILE",
              help="Check against the input that every row is in exactly one shard.")
@click.option("--map", "mapping", default=None, metavar="KEY=COL,...",
              help="The --map the shards were scored with, for shards that did not record it "
              "(the --input check).")
@dataset_options
@click.option("--allow-incomplete", is_flag=True,
              help="Write the merge even when shards or rows are missing or a run did not finish.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output.")
def command(shards: tuple[str, ...], output: str, source: str | None, mapping: str | None,
            allow_incomplete: bool, overwrite: bool, **kw) -> None:
    """Merge run stores of `rmjudge score --shard I/N` (e.g. out-*.duckdb) into one, after
    checking that they agree on settings and model and hold every pair exactly once."""
    from rmjudge.io.mapping import parse_map
    from rmjudge.runs.merge import merge

    cols = parse_map(mapping)
    if source is not None:
        source = input_source(source, kw)
    elif kw.get("hub_config") is not None or kw.get("hub_split") is not None:
        fail("--config and --split choose the config and split of the --input dataset: give "
             "--input too")
    report = merge(list(shards), output, input=source, mapping=cols, overwrite=overwrite,
                   allow_incomplete=allow_incomplete)
    click.echo(render(report), err=True)
    if report.output is None:
        fail("nothing written; fix the problems above or pass --allow-incomplete")


def render(r) -> str:
    lines = [f"rmjudge merge: {len(r.shards)} shard(s)"]
    for s in r.shards:
        spec = ", ".join(x or "unsharded" for x in s.specs) or "no runs"
        lines.append(f"  {s.path}: {s.pairs} pairs, {s.errors} errors, {s.runs} run(s) "
                     f"[{spec}; last run {s.last_status}]")
    if r.input_rows is not None:
        lines.append(f"  input: {r.input_rows} rows")
    for p in r.problems:
        lines.append(f"  problem: {p}")
    if r.output is not None:
        lines.append(f"  -> {r.output}: {r.pairs} pairs, {r.errors} errors, {r.samples} samples, "
                     f"{r.runs} runs")
    return "\n".join(lines)

