"""`rmjudge compare`: judges of the same input side by side, and their jury."""

from __future__ import annotations

from contextlib import ExitStack

import click

from rmjudge.cli.common import fail


@click.command("compare")
@click.argument("tables", nargs=-1, metavar="A B [C ...]")
@click.option("--resamples", default=10000, show_default=True,
              help="Bootstrap resamples for the intervals.")
@click.option("--seed", default=0, show_default=True, help="Bootstrap seed.")
@click.option("--level", default=0.95, show_default=True, help="Interval coverage.")
@click.option("--flips", "max_flips", default=20, show_default=True, metavar="N",
              help="Flip-table rows to print (--json lists all).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--jury", is_flag=True,
              help="Also write the majority-of-judges verdict table (-o) for `rmjudge filter`.")
@click.option("-o", "--output", default=None, metavar="JURY.duckdb|.parquet|.jsonl",
              help="--jury: the table to write (a new file or an earlier jury table): a run "
              "store (.duckdb) or a judged export (.parquet, .jsonl).")
def command(tables: tuple[str, ...], resamples: int, seed: int, level: float, max_flips: int,
            as_json: bool, jury: bool, output: str | None) -> None:
    """Compare judges on the same input: each judge's accuracy (both orders pooled), its
    paired bootstrap gain over the first, Cohen's kappa between judges and against gold, and
    the pairs where their verdicts differ. TABLES are judged tables (x.duckdb, x.parquet or
    x.jsonl) of one input."""
    import orjson

    from rmjudge.analysis.compare import CompareSettings, compare, render
    from rmjudge.analysis.jury import write_jury
    from rmjudge.analysis.tables import open_judged

    if len(tables) < 2:
        fail("give at least two judged tables to compare (rmjudge compare A.duckdb B.duckdb)")
    if jury and not output:
        fail("--jury needs -o JURY.duckdb (or .parquet, .jsonl): the table to write")
    if output and not jury:
        fail("-o goes with --jury")
    cs = CompareSettings(resamples=resamples, seed=seed, level=level)
    with ExitStack() as stack:
        opened = [stack.enter_context(open_judged(t)) for t in tables]
        result = compare(opened, cs)
        rows = None
        if jury:
            try:
                rows = write_jury(opened, output, result.edited)
            except OSError as exc:
                fail(f"cannot write {output}: {exc.strerror or exc}; choose another -o")
    if as_json:
        data = result.as_dict()
        if jury:
            data["jury"] = {"output": output, "pairs": rows}
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render(result, max_flips))
    if jury:
        click.echo(f"wrote the jury's verdicts on {rows} pairs -> {output}", err=True)
