"""`rmjudge review export`: the pairs a human should look at, as files to label.

Files are written whole (a reader never sees half of one) and never over an existing file:
a review file may hold labels being filled in, so a second export into the same folder is
refused (choose another -o, or move the old files away).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from rmjudge.analysis.tables import JudgedTable
from rmjudge.core.errors import UserError
from rmjudge.core.settings import setting
from rmjudge.core.words import count
from rmjudge.review import formats
from rmjudge.review.select import DEFAULT_THRESHOLD, Selection, review_rows, select_ids
from rmjudge.files import check_not_sidecar, make_dir, write_file


class ReviewError(UserError):
    """A review file cannot be written or read as asked; the message names the fix."""


@dataclass(frozen=True)
class ReviewSettings:
    """What `rmjudge review export` writes: its options."""

    table: str = setting(argument=True, metavar="X.duckdb")
    out_dir: str = setting(help="Folder to write the review files into (existing review files "
                           "in it are never replaced).", option=("-o", "--output"),
                           metavar="DIR")
    selects: tuple[str, ...] = setting(
        help="Which pairs (repeatable; the union is written): flipped (the orders name "
        "different winners), low-confidence (vote share for A within --threshold of 0.5), "
        "disagree-with-gold (verdict A/B/tie other than the gold label), jury-split (a jury "
        "table whose judges differ), random:N (N pairs, --seed).", option="--select",
        multiple=True, metavar="flipped|low-confidence|disagree-with-gold|jury-split|random:N")
    fmts: tuple[str, ...] = setting((), "File formats (repeatable; default csv).",
                                    option="--format", multiple=True, choices=formats.FORMATS)
    threshold: float = setting(DEFAULT_THRESHOLD, "low-confidence: largest distance of the vote "
                               "share for A from 0.5.")
    seed: int = setting(0, "random:N: the draw's seed.")
    push_name: str | None = setting(None, "Also create an Argilla dataset NAME from the argilla "
                                    "files (pip install argilla; server from ARGILLA_API_URL "
                                    "and ARGILLA_API_KEY).", option="--push-argilla",
                                    metavar="NAME")


@dataclass
class ExportSummary:
    out_dir: str
    pairs: int
    total: int
    by_rule: dict[str, int]
    files: list[str] = field(default_factory=list)


def planned_files(out_dir: str, fmts: list[str]) -> dict[str, list[str]]:
    """format -> the files it writes under `out_dir`."""
    ls, ar = os.path.join(out_dir, "labelstudio"), os.path.join(out_dir, "argilla")
    return {
        "csv": [os.path.join(out_dir, "review.csv")],
        "jsonl": [os.path.join(out_dir, "review.jsonl")],
        "labelstudio": [os.path.join(ls, "tasks.json"), os.path.join(ls, "config.xml")],
        "argilla": [os.path.join(ar, ".argilla", "settings.json"),
                    os.path.join(ar, ".argilla", "dataset.json"),
                    os.path.join(ar, "records.json")],
    }


def _refuse_existing(path: str) -> None:
    if os.path.lexists(path):
        raise ReviewError(f"{path} exists (it may hold labels being filled in) and is left "
                          "untouched: choose another -o, or move it away")


def export_review(table: JudgedTable, out_dir: str, selections: list[Selection],
                  fmts: list[str], threshold: float = DEFAULT_THRESHOLD, seed: int = 0,
                  name: str | None = None) -> ExportSummary:
    """Select pairs of `table` and write them in each format under `out_dir`."""
    import orjson

    if not 0.0 <= threshold <= 0.5:
        raise ReviewError(f"--threshold {threshold:g}: give a distance from 0.5 between 0 "
                          "and 0.5 (0.1 selects vote shares from 0.4 to 0.6)")
    check_not_sidecar(out_dir)
    plan = planned_files(out_dir, fmts)
    targets = [p for f in fmts for p in plan[f]]
    for p in targets:
        _refuse_existing(p)
    chosen = select_ids(table, selections, threshold, seed)
    rows = review_rows(table, chosen)
    total = table.one("SELECT count(*) FROM pairs")[0]
    by_rule = {s.name: sum(s.name in v for v in chosen.values()) for s in selections}
    name = name or os.path.splitext(os.path.basename(table.path))[0] + "-review"
    content = {
        "csv": [formats.csv_bytes(rows)],
        "jsonl": [formats.jsonl_bytes(rows)],
        "labelstudio": [formats.labelstudio_tasks(rows), formats.labelstudio_config()],
        "argilla": [orjson.dumps(formats.argilla_settings(), option=orjson.OPT_INDENT_2),
                    formats.argilla_dataset(name), formats.argilla_records(rows)],
    }
    written = []
    for f in fmts:
        for path, data in zip(plan[f], content[f]):
            try:
                make_dir(os.path.dirname(os.path.abspath(path)))
            except OSError as exc:
                raise ReviewError(f"cannot create the folder for {path}: {exc.strerror}; "
                                  "choose a writable -o") from None
            write_file(path, data, check=lambda p=path: _refuse_existing(p))
            written.append(path)
    return ExportSummary(out_dir, len(rows), total, by_rule, written)


def check_argilla():
    """The argilla module and the server settings for --push-argilla, checked before any work
    (ReviewError with the fix when one is missing)."""
    try:
        import argilla as rg  # optional, never a dependency
    except ImportError:
        raise ReviewError("--push-argilla needs the argilla client: pip install argilla "
                          "(or load the exported folder with rg.Dataset.from_disk yourself)") from None
    url, key = os.environ.get("ARGILLA_API_URL"), os.environ.get("ARGILLA_API_KEY")
    if not url or not key:
        raise ReviewError("--push-argilla needs ARGILLA_API_URL and ARGILLA_API_KEY set to your "
                          "Argilla server and API key")
    return rg, url, key


def push_argilla(folder: str, name: str) -> str:
    """Create an Argilla dataset from the exported folder (`rg.Dataset.from_disk`), with the
    client from ARGILLA_API_URL / ARGILLA_API_KEY. Needs `pip install argilla`."""
    rg, url, key = check_argilla()
    client = rg.Argilla(api_url=url, api_key=key)
    ds = rg.Dataset.from_disk(folder, name=name, client=client)
    return str(getattr(ds, "name", name))


def run_export(rs: ReviewSettings, on_written: Callable[[ExportSummary], None] | None = None
               ) -> str | None:
    """`rmjudge review export`: the selected pairs of `rs.table` written in every format asked
    (csv by default), `on_written` told what was written, then (`push_name`) the Argilla
    dataset created from the argilla files; its name, else None. A missing argilla client or
    server setting fails before any work."""
    from rmjudge.analysis.tables import open_judged
    from rmjudge.review.select import parse_selection

    selections = list(dict.fromkeys(parse_selection(s) for s in rs.selects))
    rules = {s.rule for s in selections}
    if rs.threshold != DEFAULT_THRESHOLD and "low-confidence" not in rules:
        raise ReviewError("--threshold applies only to --select low-confidence; leave it out "
                          "or add --select low-confidence")
    if rs.seed != 0 and "random" not in rules:
        raise ReviewError("--seed applies only to --select random:N; leave it out or add "
                          "--select random:N")
    fmts = list(dict.fromkeys(rs.fmts or ("csv",)))
    if rs.push_name:
        check_argilla()  # before any work
        if "argilla" not in fmts:
            fmts.append("argilla")
    with open_judged(rs.table) as t:
        summary = export_review(t, rs.out_dir, selections, fmts, rs.threshold, rs.seed)
    if on_written is not None:
        on_written(summary)
    if not rs.push_name:
        return None
    return push_argilla(os.path.join(rs.out_dir, "argilla"), rs.push_name)


def render(s: ExportSummary) -> str:
    rules = ", ".join(f"{k}: {v}" for k, v in s.by_rule.items())
    lines = [f"selected {s.pairs} of {count(s.total, 'pair')} for review ({rules})"]
    lines += [f"  wrote {p}" for p in s.files]
    if not s.pairs:
        larger = " or a larger --threshold" if "low-confidence" in s.by_rule else ""
        lines.append(f"note: no pair matched; the files have no rows (try another --select"
                     f"{larger})")
    return "\n".join(lines)
