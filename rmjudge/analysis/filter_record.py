"""The filter record: what `rmjudge filter` knew about the dataset it wrote.

`rmjudge filter ... -o X` writes, beside X, a hidden JSON file `.X.rmjudge.json` (hidden, so
`load_dataset(data_dir=...)` and globs over the folder skip it) holding the source dataset, the
judge (model file name and sha256, settings), the filter settings, the counts kept / swapped /
labelled / dropped per reason, the columns, the eval figures when the pairs have gold labels,
and the sha256 of X itself. `rmjudge push X` builds the dataset card from it, and refuses an X
that changed since (its sha256 differs), since the card would no longer describe it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from datetime import datetime, timezone
from typing import Any

import orjson

from rmjudge.core.errors import UserError

RECORD_VERSION = 1


class RecordError(UserError):
    """The export has no usable filter record; the message names the fix."""


def record_path(export: str) -> str:
    head, tail = os.path.split(export)
    return os.path.join(head, f".{tail}.rmjudge.json")


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _json_value(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.astimezone(timezone.utc).isoformat()
    if isinstance(v, str):
        try:
            return orjson.loads(v) if v[:1] in "{[" else v
        except orjson.JSONDecodeError:
            return v
    return v


def _eval_figures(table) -> dict | None:
    """The judge's named metrics (core/counts.py) over every labelled pair of the table
    (before filtering), with 95% bootstrap intervals, and its rollout counts; None without
    gold labels."""
    from rmjudge.analysis.metrics import EvalSettings, evaluate

    if table.count_labelled() == 0:
        return None
    res = evaluate(table, EvalSettings(resamples=1000, seed=0))
    ov = "overall"
    refl, final = res.metrics["reflectrm"][ov], res.metrics["final"][ov]
    out = {"pairs": res.n_pairs, "labelled": res.n_labelled, "both_orders": res.both_orders,
           "level": res.settings["level"],
           "accuracy": refl["acc"].as_dict(),  # both orders pooled (the paper's)
           "accuracy_ab": refl["acc_ab"].as_dict(),
           "accuracy_ba": refl["acc_ba"].as_dict(),
           "consistency": refl["consistency"].as_dict() if res.both_orders else None,
           "agreement": {k: final[k].as_dict() for k in ("agree", "tie", "disagree")},
           "accuracy_ties_half": final["ties_half"].as_dict(),
           "rollout_counts": res.rollout_counts or None}
    return out


def build_record(table, summary, fs) -> dict:
    """The record of one filter run: `table` a JudgedTable, `summary` its FilterSummary."""
    from rmjudge import __version__

    runs = [{k: _json_value(v) for k, v in r.items()} for r in table.runs()]
    settings = dataclasses.asdict(fs)
    settings["keep_columns"] = list(fs.keep_columns)
    return {
        "record_version": RECORD_VERSION,
        "rmjudge_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(),
        "data_file": os.path.basename(summary.output),
        "data_sha256": file_sha256(summary.output),
        "file_format": summary.file_format,
        "format": summary.format,
        "table": os.path.abspath(table.path),
        "filter": settings,
        "counts": {"pairs": summary.total, "written": summary.written, "rows": summary.rows,
                   "kept": summary.kept, "swapped": summary.swapped,
                   "labelled": summary.labelled, "dropped": dict(summary.dropped)},
        "columns": [list(c) for c in summary.columns],
        "input": table.meta.get("input"),
        "settings": table.meta.get("settings"),
        "runs": runs,
        "eval": _eval_figures(table),
    }


def is_filter_output(path: str) -> bool:
    """True when `rmjudge filter` wrote `path` and nothing changed it since: its filter record
    (`.NAME.rmjudge.json` beside it) exists, names it, and holds its current sha256."""
    try:
        record = orjson.loads(open(record_path(path), "rb").read())
    except (OSError, orjson.JSONDecodeError):
        return False
    if not isinstance(record, dict) or record.get("data_file") != os.path.basename(path):
        return False
    sha = record.get("data_sha256")
    try:
        return isinstance(sha, str) and sha == file_sha256(path)
    except OSError:
        return False


def write_record(export: str, record: dict) -> str:
    from rmjudge.files import write_file

    path = record_path(export)
    write_file(path, orjson.dumps(record, option=orjson.OPT_INDENT_2, default=str))
    return path


def read_record(export: str) -> dict:
    """The record of `export`, checked against the file; RecordError names the fix."""
    if not os.path.isfile(export):
        raise RecordError(f"no dataset file at {export}: write one with `rmjudge filter TABLE "
                          f"-o {export}`")
    path = record_path(export)
    again = f"rerun `rmjudge filter TABLE -o {export}` (it writes the record) and push again"
    if not os.path.exists(path):
        raise RecordError(f"{export} has no filter record ({path}), so its card cannot say "
                          f"where the pairs came from: {again}")
    try:
        record = orjson.loads(open(path, "rb").read())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise RecordError(f"cannot read the filter record {path} ({exc}): {again}") from None
    if not isinstance(record, dict) or record.get("record_version") != RECORD_VERSION:
        raise RecordError(f"{path} is not a filter record this rmjudge reads: {again}")
    if record.get("data_sha256") != file_sha256(export):
        raise RecordError(f"{export} changed since `rmjudge filter` wrote it (its sha256 no "
                          f"longer matches {path}), so the card would not describe it: {again}")
    return record
