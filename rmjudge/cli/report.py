"""`rmjudge report`: position/length bias, parse failures, vote entropy and calibration of a
judged table, as a terminal summary and one offline HTML page."""

from __future__ import annotations

from dataclasses import dataclass

import click

from rmjudge.cli.common import check_not_being_written, fail, rewrite_failed
from rmjudge.cli.options import settings_from, settings_options
from rmjudge.core.errors import DiskError
from rmjudge.core.settings import setting


@dataclass(frozen=True)
class ReportCall:
    """What `report` reads, writes and prints."""

    table: str = setting(argument=True, metavar="TABLE")
    output: str | None = setting(None, "HTML file to write (default: next to TABLE, "
                                 "NAME.report.html).", option=("-o", "--output"))
    group_by: tuple[str, ...] = setting((), "Break figures down by this passthrough column "
                                        "(repeatable; default: source and subset when present).",
                                        option="--by", multiple=True, metavar="COLUMN")
    as_json: bool = setting(False, "Print the figures as JSON instead of the summary (the HTML "
                            "is still written).", flag="--json")


def default_output(table: str) -> str:
    from rmjudge.files import table_stem

    return f"{table_stem(table)}.report.html"


@click.command("report")
@settings_options(ReportCall)
def command(**kw) -> None:
    """Report the judge's position and length bias, parse failures and forced verdicts, vote
    entropy and confidence calibration on a judged TABLE (x.duckdb, x.parquet or x.jsonl),
    overall and per source/subset, in one self-contained HTML page."""
    import orjson

    from rmjudge.analysis.report import render_text, write_report
    from rmjudge.analysis.tables import open_judged

    call = settings_from(ReportCall, kw)
    table, group_by = call.table, call.group_by
    out = call.output or default_output(table)
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
    if call.as_json:
        click.echo(orjson.dumps(data.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        from rmjudge.cli.layout import echo

        echo(render_text(data, out), err=True)
