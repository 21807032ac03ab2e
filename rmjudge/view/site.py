"""`rmjudge view`: write the explorer of a judged table into a folder that opens from disk.

The folder (docs/view.md):

    index.html  view.js  view.css        the page (package data, rmjudge/view/assets/)
    data/meta.js                          the table: counts, settings, runs, column vocabularies
    data/list-00000.js ...                the list: LIST_CHUNK items a file, columnar
    data/detail-00000.js ...              DETAIL_CHUNK items' details a file, read when one opens
    data/text-00000.js ...                TEXT_CHUNK items' search text a file, read on a search

Each data file is a script that hands its JSON to the page (`rmjudgeView.list(k, {...})`),
since a page opened from disk may not read files with fetch(). The folder is built beside its
target under a temporary name and moved into place whole; an existing target is replaced only
when it is an earlier explorer (its page carries `paths.GENERATOR`) or an empty folder. All
files go through the store's writers.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources

import orjson

from rmjudge import __version__
from rmjudge.analysis.report import is_report_file
from rmjudge.analysis.tables import JudgedTable, open_judged
from rmjudge.core.errors import DiskError
from rmjudge.core.words import count
from rmjudge.files import (OutputError, StoreError, check_not_busy, check_not_sidecar,
                           disk_error, make_dir, remove_tree, replace_dir, table_stem, write_file)
from rmjudge.view.data import FLAG_NAMES, FORMAT, PairItems
from rmjudge.view.ranked import PROMPT_FLAGS, PromptItems
from rmjudge.rank.layouts import ROW_STRIDE
from rmjudge.analysis.view_paths import PAGE, default_dir, is_view_dir, relative_link

LIST_CHUNK = 25_000
DETAIL_CHUNK = 100
TEXT_CHUNK = 5_000
ASSETS = ("index.html", "view.js", "view.css")
CODED = ("label", "human", "verdict", "verdict_ab", "verdict_ba")


@dataclass
class ViewSummary:
    table: str
    output: str
    items: int
    pairs: int
    errors: int
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    parts: dict[str, int] = field(default_factory=dict)  # data files per kind
    prompts: int | None = None  # a ranked store: its ranked prompts (None: not ranked)
    prompt_errors: int = 0  # a ranked store: its prompts that could not be ranked

    @property
    def page(self) -> str:
        return os.path.join(self.output, PAGE)


def check_view_output(table: str, output: str) -> None:
    """Refuse `output` unless it is new, an empty folder, or an earlier explorer."""
    leave = "it is left untouched: choose another -o"
    check_not_sidecar(output)
    check_not_busy(output)
    if os.path.realpath(output) == os.path.realpath(table):
        raise OutputError(f"{output} is the judged table itself; `rmjudge view` writes a "
                          f"folder beside it: choose another -o")
    if not os.path.lexists(output):
        return
    if os.path.islink(output):
        raise OutputError(f"{output} is a symbolic link; `rmjudge view` replaces its folder "
                          f"whole, so give the folder itself; {leave}")
    if not os.path.isdir(output):
        raise OutputError(f"{output} exists and is not a folder; `rmjudge view` writes a "
                          f"folder; {leave}")
    inside = os.path.realpath(table).startswith(os.path.realpath(output) + os.sep)
    if inside:
        raise OutputError(f"{output} holds the judged table {table}; `rmjudge view` replaces "
                          f"its folder whole; {leave}")
    if is_view_dir(output):
        foreign = sorted(set(os.listdir(output)) - {*ASSETS, "data"})
        if foreign:  # an explorer the user added files to: replacing it would delete them
            raise OutputError(f"{output} is an explorer but also holds files `rmjudge view` "
                              f"did not write ({', '.join(foreign[:3])}"
                              f"{', ...' if len(foreign) > 3 else ''}); {leave}, or move them")
        return
    try:
        empty = not os.listdir(output)
    except OSError as exc:
        raise OutputError(f"cannot read the folder {output}: {exc.strerror}") from None
    if not empty:
        raise OutputError(f"{output} holds files that `rmjudge view` did not write (its "
                          f"{PAGE} has no mark of rmjudge view); {leave}, or an empty folder")


def _script(call: str, *args: bytes) -> bytes:
    return b"rmjudgeView." + call.encode() + b"(" + b",".join(args) + b");\n"


def _chunks(rows: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    part: list[bytes] = []
    for r in rows:
        part.append(r)
        if len(part) == size:
            yield part
            part = []
    if part:
        yield part


def _json(value) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str)


def _model(run: dict) -> str | None:
    """A run's judge as the page shows it: a GGUF's file name, or for a served model (`--server`:
    its URL is the run's model path) the model's name at that URL."""
    path = run.get("model_path") or ""
    if "://" not in path:
        return os.path.basename(path) or None
    settings = run.get("settings")
    if isinstance(settings, str):
        try:
            settings = orjson.loads(settings)
        except orjson.JSONDecodeError:
            settings = None
    name = settings.get("model_name") if isinstance(settings, dict) else None
    return f"{name} at {path}" if name else path


def _runs(t: JudgedTable) -> list[dict]:
    out = []
    for r in t.runs():
        out.append({"run_id": r.get("run_id"), "model": _model(r),
                    "model_sha256": r.get("model_sha256"),
                    "lora": os.path.basename(r.get("lora_path") or "") or None,
                    "lora_sha256": r.get("lora_sha256"),
                    "started": str(r.get("started")) if r.get("started") else None,
                    "status": r.get("status"), "pairs_judged": r.get("pairs_judged"),
                    "shard": r.get("shard"), "input": r.get("input")})
    return out


def _criteria(settings) -> str | None:
    """The run's rubric in a few words; "default" when the run gave none (`--criteria`)."""
    if not isinstance(settings, dict):
        return None
    if settings.get("criteria") is None:
        return "default"
    from rmjudge.prompts.criteria import criteria_name

    return criteria_name(settings["criteria"])


def _report_link(table: str, output: str) -> str | None:
    """The relative link from the explorer to the table's report, when one is beside it."""
    report = f"{table_stem(table)}.report.html"
    if not os.path.isfile(report) or not is_report_file(report):
        return None
    return relative_link(report, output)


class _Writer:
    """Writes the files of one folder and counts them."""

    def __init__(self, root: str):
        self.root = root
        self.files = 0
        self.bytes = 0
        make_dir(os.path.join(root, "data"))

    def put(self, name: str, data: bytes) -> None:
        write_file(os.path.join(self.root, name), data)
        self.files += 1
        self.bytes += len(data)


def write_data(t: JudgedTable, w: _Writer, table: str, output: str) -> dict:
    """Every data file of the explorer of `t` into `w`; returns the page's meta."""
    items = PairItems(t)
    n = items.count
    cols = items.index_columns()
    vocab = {c: cols[c]["values"] for c in CODED}
    for c in CODED:
        cols[c] = cols[c]["codes"]
    parts: dict = {}
    groups = _put_parts(w, items, cols, parts, ("list", "detail", "text"),
                        ("list", "detail", "text"))
    settings = t.meta.get("settings")
    name = os.path.basename(table_stem(os.path.abspath(table)))
    meta = {
        "format": FORMAT, "generator": f"rmjudge {__version__}", "kind": items.kind,
        "store": table, "store_name": os.path.basename(table),
        "key": hashlib.sha256(os.path.abspath(table).encode()).hexdigest()[:16],
        "built": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "count": n, "pairs": items.pairs, "errors": n - items.pairs,
        "samples": t.has_samples, "columns": items.extra_columns,
        "chunks": {"list": parts["list"], "detail": parts["detail"], "text": parts["text"],
                   "list_size": LIST_CHUNK, "detail_size": DETAIL_CHUNK,
                   "text_size": TEXT_CHUNK},
        "flags": FLAG_NAMES, "vocab": vocab, "groups": groups,
        "settings": settings if isinstance(settings, dict) else None,
        "criteria": _criteria(settings), "runs": _runs(t),
        "report": _report_link(table, output), "labels_file": f"{name}.labels.jsonl",
    }
    from rmjudge.rank.table import is_ranked

    if is_ranked(t):
        meta["ranked"] = write_prompts(t, w, parts)
        meta["chunks"]["prompt_list"] = parts["prompt_list"]
    w.put("data/meta.js", _script("meta", _json(meta)))
    return {"meta": meta, "parts": parts}


def _put_parts(w: _Writer, items, cols: dict, parts: dict, names: tuple[str, str, str],
               keys: tuple[str, str, str]) -> list[dict]:
    """The three parts of a list of items (pairs, or a ranked store's prompts) as data files:
    the list's columns in chunks of LIST_CHUNK (`names[0]`), the details (`names[1]`) and the
    search texts (`names[2]`); `parts[keys[i]]` counts each part's files. Returns the groups'
    names and values (their codes go into the list's chunks)."""
    groups = [{"name": g["name"], "values": g["values"]} for g in cols["groups"]]
    group_codes = [g["codes"] for g in cols.pop("groups")]
    for key in keys:
        parts[key] = 0
    for k, start in enumerate(range(0, items.count, LIST_CHUNK)):
        part = {c: v[start:start + LIST_CHUNK] for c, v in cols.items()}
        part["groups"] = [g[start:start + LIST_CHUNK] for g in group_codes]
        w.put(f"data/{names[0]}-{k:05d}.js", _script(names[0], str(k).encode(), _json(part)))
        parts[keys[0]] += 1
    for k, rows in enumerate(_chunks(items.detail_rows(), DETAIL_CHUNK)):
        w.put(f"data/{names[1]}-{k:05d}.js",
              _script(names[1], str(k).encode(), b"[" + b",\n".join(rows) + b"]"))
        parts[keys[1]] += 1
    for k, rows in enumerate(_chunks(items.search_texts(), TEXT_CHUNK)):
        w.put(f"data/{names[2]}-{k:05d}.js", _script(names[2], str(k).encode(), _json(rows)))
        parts[keys[2]] += 1
    return groups


def write_prompts(t: JudgedTable, w: _Writer, parts: dict) -> dict:
    """The data files of a ranked store's prompts (`plist`, `pdetail`, `ptext`, the same three
    parts as the pairs'); returns their part of the meta."""
    items = PromptItems(t)
    groups = _put_parts(w, items, items.index_columns(), parts,
                        ("plist", "pdetail", "ptext"),
                        ("prompt_list", "prompt_detail", "prompt_text"))
    s = items.settings
    return {"count": items.count, "prompts": len(items.prompts),
            "errors": len(items.error_prompts), "flags": PROMPT_FLAGS, "groups": groups,
            "strategy": s.get("strategy"), "layout": s.get("layout"), "row_stride": ROW_STRIDE,
            "chunks": {"list": parts["prompt_list"], "detail": parts["prompt_detail"],
                       "text": parts["prompt_text"]}}


def build_view(table: str, output: str | None = None) -> ViewSummary:
    """Write the explorer of the judged `table` into the folder `output` (default: beside the
    table, NAME.view); see the module docstring."""
    out = output or default_dir(table)
    check_view_output(table, out)
    t0 = time.perf_counter()
    parent, tail = os.path.split(os.path.abspath(out).rstrip(os.sep))
    tmp = os.path.join(parent, f".{tail}.new-{uuid.uuid4().hex[:8]}")
    try:
        make_dir(tmp)
    except OSError as exc:
        err = disk_error(out, exc)
        if err is None:
            raise StoreError(f"cannot create the folder {out}: {exc.strerror}; choose a "
                             "writable -o") from None
        raise DiskError(f"cannot write {out}: {err.reason}; nothing was placed ({out} is as it "
                        "was); free space or choose a writable -o, then run `rmjudge view` "
                        "again", path=out, reason=err.reason) from None
    try:
        w = _Writer(tmp)
        with open_judged(table) as t:
            got = write_data(t, w, table, out)
        assets = resources.files("rmjudge.view") / "assets"
        for name in ASSETS:
            w.put(name, (assets / name).read_bytes())
    except DiskError as exc:
        remove_tree(tmp)
        why = exc.reason or str(exc)
        raise DiskError(f"cannot write {out}: {why}; nothing was placed ({out} is as it was); "
                        "free space or choose another -o, then run `rmjudge view` again",
                        path=out, reason=exc.reason) from None
    except BaseException:
        remove_tree(tmp)
        raise
    replace_dir(tmp, out, check=lambda: check_view_output(table, out))
    meta = got["meta"]
    ranked = meta.get("ranked") or {}
    return ViewSummary(table, out, meta["count"], meta["pairs"], meta["errors"], w.files,
                       w.bytes, time.perf_counter() - t0, got["parts"],
                       ranked.get("prompts"), ranked.get("errors", 0))


def render(s: ViewSummary) -> str:
    mb = s.bytes / 1e6
    if s.prompts is not None:
        what = (f"ranked store, {s.prompts} prompt{'' if s.prompts == 1 else 's'} "
                f"({s.pairs} comparison{'' if s.pairs == 1 else 's'})"
                + (f" and {s.prompt_errors} prompt{'' if s.prompt_errors == 1 else 's'} that "
                   "could not be ranked" if s.prompt_errors else ""))
    else:
        what = count(s.pairs, "pair") + (f" and {count(s.errors, 'error row')}" if s.errors else "")
    return (f"explorer of {s.table}: {what}"
            + f" in {count(s.files, 'file')} ({mb:.1f} MB) in {s.seconds:.1f} s -> {s.page}\n"
            f"open it in a browser: file://{os.path.abspath(s.page)}")
