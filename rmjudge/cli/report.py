"""`rmjudge report`: position/length bias, parse failures, vote entropy and calibration of a
judged table, as a terminal summary and one offline HTML page."""

from __future__ import annotations

import click

from rmjudge.cli.common import check_not_being_written, fail, rewrite_failed
from rmjudge.core.errors import DiskError


def default_output(table: str) -> str:
    from rmjudge.files import table_stem

    return f"{table_stem(table)}.report.html"


@click.command("report")
@click.argument("table", metavar="TABLE")
@click.option("-o", "--output", default=None,
              help="HTML file to write (default: next to TABLE, NAME.report.html).")
@click.option("--by", "group_by", multiple=True, metavar="COLUMN",
              help="Break figures down by this passthrough column (repeatable; default: source "
              "and subset when present).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the figures as JSON instead of the summary (the HTML is still written).")
def command(table: str, output: str | None, group_by: tuple[str, ...], as_json: bool) -> None:
    """Report the judge's position and length bias, parse failures and forced verdicts, vote
    entropy and confidence calibration on a judged TABLE (x.duckdb, x.parquet or x.jsonl),
    overall and per source/subset, in one self-contained HTML page."""
    import orjson

    from rmjudge.analysis.report import render_text, write_report
    from rmjudge.analysis.tables import open_judged

    out = output or default_output(table)
    check_not_being_written(table, "report")
    try:
        with open_judged(table) as t:
            data = write_report(t, out, list(group_by) or None)
    except ImportError as exc:
        fail(str(exc))
    except DiskError as exc:
        raise rewrite_failed(exc, "report", out) from None
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}; choose another -o")
    if as_json:
        click.echo(orjson.dumps(data.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render_text(data, out), err=True)
