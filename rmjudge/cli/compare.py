"""`rmjudge compare`: judges of the same input side by side, and their jury."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from rmjudge.analysis.compare import CompareSettings
from rmjudge.cli.common import fail
from rmjudge.cli.layout import echo, output_width
from rmjudge.cli.options import settings_from, settings_options
from rmjudge.core.settings import setting
from rmjudge.core.words import count


@dataclass(frozen=True)
class CompareCall:
    """What `compare` reads, prints and writes, besides the bootstrap's settings."""

    tables: tuple[str, ...] = setting(argument=True, nargs=-1, metavar="A B [C ...]")
    max_flips: int = setting(20, "Flip-table rows to print (--json lists all).",
                             option="--flips", metavar="N")
    as_json: bool = setting(False, "Print the figures as JSON.", flag="--json")
    jury: bool = setting(False, "Also write the majority-of-judges verdict table (-o) for "
                         "`rmjudge filter`.", flag="--jury")
    output: str | None = setting(None, "--jury: the table to write (a new file or an earlier "
                                 "jury table): a run store (.duckdb) or a judged export "
                                 "(.parquet, .jsonl).", option=("-o", "--output"),
                                 metavar="JURY.duckdb|.parquet|.jsonl")


@click.command("compare")
@settings_options(CompareCall, only=("tables",))
@settings_options(CompareSettings)
@settings_options(CompareCall, only=("max_flips", "as_json", "jury", "output"))
def command(**kw) -> None:
    """Compare judges on the same input: each judge's accuracy (both orders pooled), its
    paired bootstrap gain over the first, Cohen's kappa between judges and against gold, and
    the pairs where their verdicts differ. TABLES are judged tables (x.duckdb, x.parquet or
    x.jsonl) of one input."""
    import orjson

    from rmjudge.analysis.compare import render
    from rmjudge.analysis.jury import compare_files

    call = settings_from(CompareCall, kw)
    tables, jury, output = call.tables, call.jury, call.output

    if len(tables) < 2:
        fail("give at least two judged tables to compare (rmjudge compare A.duckdb B.duckdb)")
    if jury and not output:
        fail("--jury needs -o JURY.duckdb (or .parquet, .jsonl): the table to write")
    if output and not jury:
        fail("-o goes with --jury")
    cs = settings_from(CompareSettings, kw)
    result, rows = compare_files(tables, cs, output if jury else None)
    if call.as_json:
        data = result.as_dict()
        if jury:
            data["jury"] = {"output": output, "pairs": rows}
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render(result, call.max_flips, output_width(sys.stdout)))
    if jury:
        echo(f"wrote the jury's verdicts on {count(rows, 'pair')} -> {output}", err=True)
