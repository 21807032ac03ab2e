"""Where a run's files go: the output's format from its name, the DuckDB store behind a
Parquet/JSONL output, the sidecars an export writes, and the lock a writer of each takes."""

from __future__ import annotations

import os
import re

# -- file names -------------------------------------------------------------------------------

def output_format(out: str) -> str:
    """'duckdb' | 'parquet' | 'jsonl', from the output's name."""
    lower = out.lower()
    if lower.endswith(".parquet"):
        return "parquet"
    if lower.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "duckdb"


def table_stem(table: str) -> str:
    """A judged table's path without its format's extension (`x.duckdb` -> `x`): the stem of
    the outputs written beside it (`x.report.html`, `x.view/`)."""
    for ext in (".duckdb", ".parquet", ".jsonl", ".json"):
        if table.lower().endswith(ext):
            return table[: -len(ext)]
    return table


def store_path(out: str) -> str:
    """The DuckDB file that holds a run: the output itself, or for a Parquet/JSONL output a
    hidden working file beside it (`.x.parquet.rmjudge.duckdb`), out of the way of
    `load_dataset("parquet", data_dir=...)` and of globs over the export folder.

    It is also what a writer of the file `out` locks (`store_path(f) + ".lock"`), an export or
    a sidecar alike: so `-o a.parquet` (which writes `a.samples.parquet`) and
    `-o a.samples.parquet` take one same lock, and the second of two such runs is refused."""
    if output_format(out) == "duckdb":
        return out
    head, tail = os.path.split(out)
    new = os.path.join(head, f".{tail}.rmjudge.duckdb")
    legacy = legacy_store_path(out)
    return legacy if os.path.exists(legacy) and not os.path.exists(new) else new


def legacy_store_path(out: str) -> str:
    """Where versions up to 0.1.1 kept the working file of a Parquet/JSONL output."""
    return out + ".work.duckdb"


def sidecar(path: str, table: str) -> str:
    """`x.parquet` -> `x.samples.parquet` (the names an export writes beside its pairs)."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.{table}{ext}"


# What rmjudge and DuckDB keep beside a file X, by name: DuckDB's write-ahead log (`X.wal`), the
# lock a writer takes (`X.lock`), the temporaries of a write in progress (`.X.new-XXXXXXXX`,
# rmjudge.files.temps) and the hidden working store of a Parquet/JSONL output (`store_path`).
_TEMP_NAME = re.compile(r"\..+\.new-[0-9a-f]{8}")


def sidecar_role(path: str) -> str | None:
    """What `path` would be by its name alone if it were one of the files kept beside another
    one (see above), in words naming that other file; None for any other name. Writing an
    output there would make the other file unreadable (a folder on a store's WAL path) or be
    removed as a stale temporary, so every output guard refuses these names."""
    name = os.path.basename(path.rstrip(os.sep) or path)
    if name.endswith(".wal") and len(name) > 4:
        return f"the write-ahead log DuckDB keeps beside {name[:-4]}"
    if name.endswith(".lock") and len(name) > 5:
        return f"the lock file rmjudge keeps beside {name[:-5]}"
    if _TEMP_NAME.fullmatch(name):
        return f"a temporary rmjudge writes beside {name[1:].rsplit('.new-', 1)[0]}"
    if name.startswith(".") and name.endswith(".rmjudge.duckdb") and len(name) > 16:
        return f"the working store of the export {name[1:-len('.rmjudge.duckdb')]}"
    return None


def export_files(out: str) -> list[str]:
    """The files a run with output `out` writes besides its store: the export and its sidecars
    (none for a DuckDB output, which is the store)."""
    if output_format(out) == "duckdb":
        return []
    return [out, sidecar(out, "samples"), sidecar(out, "errors")]
