"""`rmjudge merge`: check run stores judged in shards and merge them into one."""

from __future__ import annotations

import click

from rmjudge.cli.common import fail
from rmjudge.cli.layout import echo
from rmjudge.cli.mapping_options import dataset_options, input_source
from rmjudge.cli.options import settings_from, settings_options
from rmjudge.core.words import count
from rmjudge.io.mapping import ReadingChoice
from rmjudge.runs.merge import MAP_HELP, MergeSettings


@click.command("merge")
@settings_options(MergeSettings, only=("shards", "output", "source"))
@settings_options(ReadingChoice, only=("mapping",), helps={"mapping": MAP_HELP})
@dataset_options
@settings_options(MergeSettings, only=("allow_incomplete", "overwrite"))
def command(**kw) -> None:
    """Merge run stores of `rmjudge score --shard I/N` (e.g. out-*.duckdb) into one, after
    checking that they agree on settings and model and hold every pair exactly once."""
    from rmjudge.io.mapping import parse_map
    from rmjudge.runs.merge import merge

    ms = settings_from(MergeSettings, kw)
    cols, source = parse_map(kw.pop("mapping")), ms.source
    if source is not None:
        source = input_source(source, kw)
    elif kw.get("hub_config") is not None or kw.get("hub_split") is not None:
        fail("--config and --split choose the config and split of the --input dataset: give "
             "--input too")
    report = merge(list(ms.shards), ms.output, input=source, mapping=cols,
                   overwrite=ms.overwrite, allow_incomplete=ms.allow_incomplete)
    echo(render(report), err=True)
    if report.output is None:
        fail("nothing written; fix the problems above or pass --allow-incomplete")


def render(r) -> str:
    lines = [f"rmjudge merge: {count(len(r.shards), 'shard')}"]
    for s in r.shards:
        spec = ", ".join(x or "unsharded" for x in s.specs) or "no runs"
        lines.append(f"  {s.path}: {count(s.pairs, 'pair')}, {count(s.errors, 'error')}, "
                     f"{count(s.runs, 'run')} "
                     f"[{spec}; last run {s.last_status}]")
    if r.input_rows is not None:
        lines.append(f"  input: {count(r.input_rows, 'row')}")
    for p in r.problems:
        lines.append(f"  problem: {p}")
    if r.output is not None:
        lines.append(f"  -> {r.output}: {count(r.pairs, 'pair')}, {count(r.errors, 'error')}, "
                     f"{count(r.samples, 'sample')}, {count(r.runs, 'run')}")
    return "\n".join(lines)

