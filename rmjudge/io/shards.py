"""A dataset split over several files: a folder (`shards/`) or a glob (`'data/*.parquet'`).

The files are read one after the other in sorted path order (plain string order, as `ls`
shows them: zero-pad shard numbers), with row numbers continuing from one file to the next, so
a row keeps one number and one id however the run is resumed or sharded. Each file goes through
the single-file reader of its kind: Parquet through DuckDB's `read_parquet`, JSONL and CSV
(plain or compressed) through rmjudge's line readers, whose error rows name the shard and its
line. (DuckDB can scan all the files in one query, but its JSON reader cannot turn a bad line
into an error row, and a per-file scan keeps the order and the numbering obvious; the Parquet
row count for the progress total is one DuckDB query over all the files.)

Which files: in a folder, the files directly in it whose names end in .parquet, .jsonl,
.ndjson, .csv or .tsv (optionally compressed: .gz, .zst, .bz2, .xz), leaving out hidden
files, `_SUCCESS`-style markers and `.json` files (usually metadata); a folder with none but
subfolders that have some names them. A glob may match any of those kinds and `.json`;
matching anything else is refused with the file named, so nothing is skipped silently.
`**` matches across folders.
"""

from __future__ import annotations

import glob
import os
from typing import Iterator

from rmjudge.io import compressed
from rmjudge.io.files import count_file, file_format, read_file
from rmjudge.io.rows import InputError, RawRow

FOLDER_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".csv", ".tsv")
GLOB_SUFFIXES = FOLDER_SUFFIXES + (".json",)
KINDS = ".parquet, .jsonl or .csv"


def is_glob(source: str) -> bool:
    return any(ch in source for ch in "*?[")


def _has_suffix(path: str, suffixes: tuple[str, ...]) -> bool:
    return compressed.strip_suffix(path.lower()).endswith(suffixes)


def _folder_files(folder: str) -> list[str]:
    return sorted(
        os.path.join(folder, name) for name in os.listdir(folder)
        if not name.startswith((".", "_")) and _has_suffix(name, FOLDER_SUFFIXES)
        and os.path.isfile(os.path.join(folder, name)))


def list_shards(source: str) -> list[str]:
    """The files `source` names, in reading order; InputError when there are none."""
    if os.path.isdir(source):
        files = _folder_files(source)
        if files:
            return files
        subs = sorted(name for name in os.listdir(source)
                      if os.path.isdir(os.path.join(source, name)) and not name.startswith(".")
                      and _folder_files(os.path.join(source, name)))
        hint = (f"; its subfolders {', '.join(subs)} have some: give one of them, or a glob "
                f"such as '{os.path.join(source, '**', '*.parquet')}'") if subs else ""
        raise InputError(f"no {KINDS} files in the folder {source}{hint}")
    matches = sorted(p for p in glob.glob(source, recursive=True) if os.path.isfile(p))
    if not matches:
        raise InputError(f"no files match {source}; check the pattern (quote it so that the "
                         "shell leaves it to rmjudge)")
    others = [p for p in matches if not _has_suffix(p, GLOB_SUFFIXES)]
    if others:
        raise InputError(f"{source} matches {others[0]}, which is not a {KINDS} file"
                         f"{f' (and {len(others) - 1} more)' if len(others) > 1 else ''}; "
                         "narrow the pattern, e.g. 'data/*.parquet'")
    return matches


def shard_formats(source: str) -> list[tuple[str, str]]:
    """(file, format) for every shard; a shard that cannot be read fails here, before any row."""
    return [(path, file_format(path)) for path in list_shards(source)]


def read_shards(source: str) -> Iterator[RawRow]:
    start = 1
    for path, fmt in shard_formats(source):
        used = yield from read_file(path, fmt, start=start, name=path)
        start += used


def count_shards(source: str) -> int | None:
    shards = shard_formats(source)
    parquet = [p for p, fmt in shards if fmt == "parquet"]
    total = 0
    if parquet:
        import duckdb

        con = duckdb.connect()
        try:
            total += int(con.execute("SELECT count(*) FROM read_parquet(?)",
                                     [parquet]).fetchone()[0])
        except duckdb.Error:
            return None
        finally:
            con.close()
    for path, fmt in shards:
        if fmt != "parquet":
            n = count_file(path, fmt)
            if n is None:
                return None
            total += n
    return total
