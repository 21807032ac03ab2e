"""Streaming readers: JSONL (file or `-` for stdin), Parquet, CSV, and a DuckDB table.

Every reader yields `RawRow`s: the 1-based row number, the decoded object (or None) and, for a
row that could not be decoded, a reason a person can act on plus the offending raw text. A
problem with the file as a whole (missing, wrong type, unknown table) raises `InputError`.
Nothing reads the whole file into memory.
"""

from __future__ import annotations

from rmjudge.errors import UserError

import csv
import io
import os
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

import orjson

from rmjudge.sql import quote_ident

RAW_LIMIT = 500  # characters of an offending row kept in `errors.raw`


class InputError(UserError):
    """The input as a whole cannot be read; the message says how to fix it."""


@dataclass
class RawRow:
    row_number: int
    obj: dict[str, Any] | None
    error: str | None = None
    raw: str | None = None


def _clip(raw: bytes | str) -> str:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    return raw if len(raw) <= RAW_LIMIT else raw[:RAW_LIMIT] + "..."


def split_duckdb_source(source: str) -> tuple[str, str] | None:
    """'file.duckdb:table' -> (file, table); None for other sources."""
    for ext in (".duckdb:", ".db:", ".ddb:"):
        i = source.find(ext)
        if i > 0:
            return source[: i + len(ext) - 1], source[i + len(ext):]
    return None


def detect_format(source: str) -> str:
    """'jsonl' | 'parquet' | 'csv' | 'duckdb' from the name, then the first bytes."""
    if source == "-":
        return "jsonl"
    if split_duckdb_source(source):
        return "duckdb"
    if not os.path.exists(source):
        raise InputError(f"input file not found: {source}")
    if os.path.isdir(source):
        raise InputError(f"{source} is a directory; give a .jsonl, .parquet or .csv file")
    lower = source.lower()
    with open(source, "rb") as f:
        head = f.read(4096)
    if lower.endswith((".duckdb", ".ddb", ".db")):
        raise InputError(f"name the table to read: {source}:TABLE")
    if head.startswith(b"PAR1") or lower.endswith(".parquet"):
        if not head.startswith(b"PAR1") and head:
            raise InputError(f"{source} is not a Parquet file (no PAR1 header)")
        return "parquet"
    if lower.endswith((".csv", ".tsv")):
        return "csv"
    if b"\x00" in head:
        raise InputError(
            f"{source} looks like a binary file, not JSONL; rmjudge reads .jsonl, .parquet, "
            ".csv and file.duckdb:table"
        )
    stripped = head.lstrip()
    if lower.endswith(".json") and stripped.startswith(b"["):
        raise InputError(
            f"{source} is a JSON array, not JSON Lines; convert it with: "
            f"jq -c '.[]' {source} > pairs.jsonl"
        )
    if lower.endswith((".jsonl", ".json", ".ndjson")) or not stripped or stripped.startswith(b"{"):
        return "jsonl"
    raise InputError(
        f"cannot tell the format of {source}: use a .jsonl, .parquet or .csv file, "
        "or file.duckdb:table"
    )


def read_jsonl(stream: BinaryIO) -> Iterator[RawRow]:
    for n, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield RawRow(n, None, f"line {n} is not valid UTF-8 (byte {line[exc.start]:#04x} "
                         f"at column {exc.start + 1}); re-encode the file as UTF-8", _clip(line))
            continue
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            yield RawRow(n, None, f"line {n} is not valid JSON ({exc}); fix or remove the line",
                         _clip(text))
            continue
        if not isinstance(obj, dict):
            kind = {list: "an array", str: "a string", int: "a number", float: "a number",
                    bool: "a boolean", type(None): "null"}.get(type(obj), type(obj).__name__)
            yield RawRow(n, None, f"line {n} is {kind}, expected a JSON object with the pair's "
                         "fields", _clip(text))
            continue
        yield RawRow(n, obj)


def _read_duckdb_query(sql: str, params: list, database: str = ":memory:") -> Iterator[RawRow]:
    import duckdb

    con = duckdb.connect(database, read_only=database != ":memory:")
    try:
        cur = con.execute(sql, params)
        names = [d[0] for d in cur.description]
        n = 0
        while True:
            chunk = cur.fetchmany(1024)
            if not chunk:
                break
            for values in chunk:
                n += 1
                yield RawRow(n, dict(zip(names, values)))
    finally:
        con.close()


def read_duckdb_table(path: str, table: str) -> Iterator[RawRow]:
    import duckdb

    if not os.path.exists(path):
        raise InputError(f"DuckDB file not found: {path}")
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.Error as exc:
        raise InputError(f"cannot open {path} as DuckDB: {str(exc).splitlines()[0]}") from None
    try:
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() UNION SELECT view_name FROM duckdb_views() "
            "WHERE NOT internal").fetchall()]
    finally:
        con.close()
    if table not in tables:
        raise InputError(f"no table {table!r} in {path}; tables: {', '.join(sorted(tables)) or 'none'}")
    yield from _read_duckdb_query(f"SELECT * FROM {quote_ident(table)}", [], path)


def read_parquet(path: str) -> Iterator[RawRow]:
    import duckdb

    try:
        rows = _read_duckdb_query("SELECT * FROM read_parquet(?)", [path])
        first = next(rows, None)
    except duckdb.Error as exc:
        raise InputError(f"cannot read {path} as Parquet: {str(exc).splitlines()[0]}") from None
    if first is not None:
        yield first
        yield from rows


def read_csv(path: str) -> Iterator[RawRow]:
    csv.field_size_limit(sys.maxsize)
    with open(path, "r", encoding="utf-8", errors="surrogateescape", newline="") as f:
        dialect = "excel-tab" if path.lower().endswith(".tsv") else "excel"
        reader = csv.reader(f, dialect=dialect)
        header = next(reader, None)
        if header is None:
            return
        header = [h.lstrip("\ufeff") for h in header]
        for fields in reader:
            n = reader.line_num  # physical line of the row's end (1 = header)
            if not any(fields):
                continue
            raw = ",".join(fields)
            if any("\udc80" <= ch <= "\udcff" for fld in fields for ch in fld):
                yield RawRow(n, None, f"line {n} is not valid UTF-8; re-encode the file as UTF-8",
                             _clip(raw.encode("utf-8", "surrogateescape")))
                continue
            if len(fields) != len(header):
                yield RawRow(n, None, f"line {n} has {len(fields)} fields, the header has "
                             f"{len(header)}; check the quoting of that row", _clip(raw))
                continue
            yield RawRow(n, dict(zip(header, fields)))


def read_rows(source: str, stdin: BinaryIO | None = None) -> Iterator[RawRow]:
    """Rows of any supported source. Raises InputError for whole-file problems."""
    fmt = detect_format(source)
    if fmt == "jsonl":
        if source == "-":
            yield from read_jsonl(stdin or sys.stdin.buffer)
            return
        with open(source, "rb") as f:
            yield from read_jsonl(io.BufferedReader(f))  # type: ignore[arg-type]
    elif fmt == "parquet":
        yield from read_parquet(source)
    elif fmt == "csv":
        yield from read_csv(source)
    else:
        path, table = split_duckdb_source(source)  # type: ignore[misc]
        yield from read_duckdb_table(path, table)


def count_rows(source: str) -> int | None:
    """Rows in the input, when cheap to know (for the progress total); None otherwise."""
    try:
        fmt = detect_format(source)
    except InputError:
        return None
    if source == "-":
        return None
    if fmt in ("jsonl", "csv"):
        n = 0
        last = b"\n"
        with open(source, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                n += block.count(b"\n")
                last = block[-1:]
        n += last != b"\n"
        return n - (1 if fmt == "csv" else 0)
    import duckdb

    try:
        if fmt == "parquet":
            con = duckdb.connect()
            try:
                return int(con.execute("SELECT count(*) FROM read_parquet(?)", [source]).fetchone()[0])
            finally:
                con.close()
    except duckdb.Error:
        return None
    return None
