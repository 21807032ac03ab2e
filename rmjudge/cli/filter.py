"""`rmjudge filter`: write a cleaned preference dataset from a judged table."""

from __future__ import annotations

from dataclasses import dataclass

import click

from rmjudge.analysis.filter import FilterSettings
from rmjudge.cli.common import check_not_being_written, fail, rewrite_failed
from rmjudge.cli.layout import echo
from rmjudge.cli.options import (given_options, option_dests, settings_from, settings_options,
                                 settings_values)
from rmjudge.cli.upload import upload_options
from rmjudge.core.errors import DiskError
from rmjudge.core.extras import install_hint
from rmjudge.core.settings import setting
from rmjudge.publish.hub import UploadSettings, check_upload
from rmjudge.rank.outputs import RankFilterSettings


@dataclass(frozen=True)
class FilterCall:
    """What `filter` reads, where it uploads to and what it writes."""

    table: str = setting(argument=True, metavar="TABLE")
    repo_id: str | None = setting(None, "Then upload the dataset with a generated card to this "
                                  "Hugging Face dataset repository (" + install_hint("hub") +
                                  "; token from HF_TOKEN or `hf auth login`).",
                                  option="--push-to-hub", metavar="ORG/NAME")
    output: str | None = setting(None, "Dataset to write, .jsonl or .parquet (default: next to "
                                 "TABLE, NAME.dpo.jsonl, NAME.rm.jsonl or NAME.kto.jsonl).",
                                 option=("-o", "--output"))


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
@settings_options(FilterCall, only=("table", "output"))
@settings_options(FilterSettings, only=FilterSettings.OPTIONS)
@settings_options(RankFilterSettings)
@settings_options(FilterCall, only=("repo_id",))
@upload_options("--push-to-hub")
def command(**kw) -> None:
    """Write the pairs of a judged TABLE that the judge supports as a training dataset
    (Parquet or JSONL, loadable with datasets.load_dataset), and say how many were kept,
    swapped, labelled and dropped, and why.

    On a ranked store (`rmjudge rank`), the pairs come from each prompt's ranking instead:
    best against worst, or every pair above --rank-margin (docs/rank.md)."""
    from rmjudge.analysis.filter import empty_warning, render
    from rmjudge.rank.outputs import filter_judged

    call, up = settings_from(FilterCall, kw), settings_from(UploadSettings, kw)
    table, repo_id = call.table, call.repo_id
    check_upload(repo_id, up)  # a bad id, a missing extra or token fails before any work
    fs = settings_from(FilterSettings, kw)
    rank_choice = settings_values(RankFilterSettings, kw)
    out = call.output or default_output(table, fs.format)
    check_not_being_written(table, "filter")
    try:
        named = tuple(given_options(option_dests(FilterSettings)
                                    | option_dests(RankFilterSettings)))
        summary, ranked = filter_judged(table, out, fs, rank_choice, named)
    except DiskError as exc:
        raise rewrite_failed(exc, "filter", out) from None
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}; choose another -o")
    if ranked is not None:
        from rmjudge.rank.outputs import render_filter

        echo(render_filter(summary, ranked), err=True)
    else:
        echo(render(summary), err=True)
    warning = empty_warning(summary)
    if warning:
        echo(warning, err=True)
    if repo_id:
        from rmjudge.cli.upload import publish

        publish(out, repo_id, private=up.private, license_=up.license, dry_run=up.dry_run,
                after_filter=True)
