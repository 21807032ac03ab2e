"""Readers of one file: JSONL, CSV and Parquet, compressed or not (`read_file`, `count_file`,
`file_format`), and a DuckDB table (`read_duckdb_table`).

Each yields `RawRow`s (`rmjudge.io.rows`): the 1-based row number, the decoded object (or None)
and, for a row that could not be decoded, a reason a person can act on plus the offending raw
text. A problem with the file as a whole raises `InputError`. `rmjudge.io.readers` dispatches
every input form to these, to `rmjudge.io.shards` (folders and globs of files) and to
`rmjudge.io.huggingface`.

Encodings: a UTF-8 byte-order mark at the start of a JSONL file (or of each shard) is dropped.
A NUL or any other stray byte is judged line by line like anything else: the line it is on
becomes one error row. A file is refused as binary only when its first 4 KB do not look like
text at all (over 30% control bytes or invalid UTF-8, e.g. an image or random bytes), or when it
is UTF-16/UTF-32 or a ZIP archive, each with the command that fixes it. Compressed files are
recognised by their magic bytes whatever their name, so a gzip file named `x.jsonl` is read
like `x.jsonl.gz`; a file named `x.jsonl.gz` without gzip's magic bytes is read when it is plain
JSON Lines and otherwise refused as "not gzip data" (`_not_compressed`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from typing import Generator, Iterable, Iterator

import orjson

from rmjudge.io.rows import InputError, RawRow
from rmjudge.core.sql import quote_ident

RAW_LIMIT = 500  # characters of an offending row kept in `errors.raw`
HEAD_BYTES = 4096  # what format and binary detection look at
BINARY_SHARE = 0.3  # share of control bytes / invalid UTF-8 in the head that means "binary"
UTF8_BOM = b"\xef\xbb\xbf"


def _clip(raw: bytes | str) -> str:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    return raw if len(raw) <= RAW_LIMIT else raw[:RAW_LIMIT] + "..."


JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
KNOWN_FORMS = ".jsonl, .jsonl.gz, .jsonl.zst, .parquet, .csv, a folder or glob of shards, " \
    "file.duckdb:table, or hf://datasets/org/name"


def file_format(path: str) -> str:
    """The format of one file: by its name, then by its first bytes (decompressed if need be)."""
    from rmjudge.io import compressed

    lower = path.lower()
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if lower.endswith((".duckdb", ".ddb", ".db")):
        raise InputError(f"name the table to read: {path}:TABLE")
    if head.startswith(b"PAR1") or lower.endswith(".parquet"):
        if not head.startswith(b"PAR1") and head:
            raise InputError(f"{path} is not a Parquet file (no PAR1 header)")
        return "parquet"
    codec = compressed.sniff(head)
    if codec is None:
        named = compressed.named_codec(lower)
        if named is not None:
            return _not_compressed(path, head, *named)
        return _text_format(path, lower, head)
    inner = compressed.strip_suffix(lower)
    if inner.endswith(".parquet"):
        raise InputError(f"{path} is a compressed Parquet file; Parquet compresses its own "
                         f"pages, so decompress it ({compressed.TOOLS[codec]} -d {path}) and "
                         "give the .parquet")
    return _text_format(path, inner, compressed.read_head(path, codec, HEAD_BYTES)) + "." + codec


def _not_compressed(path: str, head: bytes, suffix: str, codec: str) -> str:
    """A file named for `codec` (x.jsonl.gz) whose first bytes are not that codec's: plain JSON
    Lines is read as it is (the name does no harm); anything else is refused as not being
    `codec` data, since what it is (a saved error page, another compressor, plain CSV) cannot
    be told safely."""
    from rmjudge.io import compressed

    stripped = head.removeprefix(UTF8_BOM).lstrip()
    if not stripped or stripped.startswith(b"{"):
        return "jsonl"
    tool = compressed.TOOLS[codec]
    magic = compressed.MAGIC[codec].hex(" ")
    plain = path[: -len(suffix)]
    raise InputError(f"{path} is not {tool} data: it starts with {head[:12]!r}, not {tool}'s "
                     f"magic bytes {magic} (a failed download or another compressor?); "
                     f"download or compress it again ({tool} -k {plain}), or if it is plain "
                     f"text, rename it to {plain}")


def _text_format(path: str, lower: str, head: bytes) -> str:
    if lower.endswith((".csv", ".tsv")):
        return "csv"
    reason = binary_reason(head, path)
    if reason:
        raise InputError(reason)
    stripped = head.removeprefix(UTF8_BOM).lstrip()
    if lower.endswith(".json") and stripped.startswith(b"["):
        raise InputError(
            f"{path} is a JSON array, not JSON Lines; convert it with: "
            f"jq -c '.[]' {path} > pairs.jsonl"
        )
    if lower.endswith(JSONL_SUFFIXES) or not stripped or stripped.startswith(b"{"):
        return "jsonl"
    raise InputError(f"cannot tell the format of {path}: use {KNOWN_FORMS}")


def binary_reason(head: bytes, path: str) -> str | None:
    """Why the first bytes of a file are not JSONL text at all, or None when they may be.

    One stray byte (a NUL, invalid UTF-8) does not make a file binary: the line it is on becomes
    an error row. Only a head that is mostly not text is refused, and text in another encoding
    is named with the command that converts it.
    """
    odd, even = head[1::2].count(0), head[0::2].count(0)
    half = len(head) // 2
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or (
            len(head) >= 8 and max(odd, even) > 0.9 * half and min(odd, even) < 0.5 * half):
        return (f"{path} is UTF-16 (or UTF-32) text; rmjudge reads UTF-8: convert it with "
                f"{_to_utf8_command(path)}")
    if head.startswith(b"PK\x03\x04"):
        return f"{path} is a ZIP archive; unzip it and give the file inside"
    if not head:
        return None
    text = head.decode("utf-8", "replace")
    bad = sum(1 for ch in text if ch == "\ufffd" or ch == "\x7f"
              or (ch < " " and ch not in "\t\n\r\f\b"))
    if bad > BINARY_SHARE * len(text):
        return (f"{path} looks like a binary file, not JSONL ({bad} of its first {len(text)} "
                f"characters are control bytes or invalid UTF-8); rmjudge reads {KNOWN_FORMS}")
    return None


def _to_utf8_command(path: str) -> str:
    """The command that writes a UTF-8 copy of the UTF-16 file `path` beside it, named after it
    (`x.jsonl` -> `x.utf8.jsonl`), never over it or another file's name."""
    from rmjudge.io import compressed

    named = compressed.named_codec(path)
    plain = path[: -len(named[0])] if named else path
    folder, name = os.path.split(plain)
    stem, ext = os.path.splitext(name)
    out = os.path.join(folder, f"{stem}.utf8{ext if ext.lower() in JSONL_SUFFIXES else '.jsonl'}")
    if named:
        return f"{compressed.TOOLS[named[1]]} -dc {path} | iconv -f UTF-16 -t UTF-8 > {out}"
    return f"iconv -f UTF-16 -t UTF-8 {path} > {out}"


# orjson reads integers beyond 64 bits as floats (two such ids would collide); a line with a
# run of 19+ digits is parsed again with the standard library, integers kept exact (as Decimal
# beyond 64 bits, which every writer downstream turns into its digits).
_DIGIT_MAP = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_DIGITS = b"0" * 19


def _exact_int(s: str):
    from decimal import Decimal

    n = int(s)
    return n if -2**63 <= n < 2**64 else Decimal(s)


def read_jsonl(stream: Iterable[bytes], *, start: int = 1,
               name: str | None = None) -> Generator[RawRow, None, int]:
    """Rows of JSON Lines; a bad line is an error row with its reason, never the end of the file.

    Row numbers are physical line numbers, offset by `start - 1` (a shard after others);
    `name` (a shard's path) goes into the reasons. Returns the number of lines read.
    """
    at = f"{name} line" if name else "line"
    n = 0
    for n, line in enumerate(stream, start=1):
        if n == 1 and line.startswith(UTF8_BOM):
            line = line[len(UTF8_BOM):]
        if not line.strip():
            continue
        row = start + n - 1
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield RawRow(row, None, f"{at} {n} is not valid UTF-8 (byte {line[exc.start]:#04x} "
                         f"at column {exc.start + 1}); re-encode the file as UTF-8", _clip(line))
            continue
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            yield RawRow(row, None, f"{at} {n} is not valid JSON ({exc}); fix or remove the line",
                         _clip(text))
            continue
        if _LONG_DIGITS in line.translate(_DIGIT_MAP):  # integers orjson may have rounded
            obj = json.loads(text, parse_int=_exact_int)
        if not isinstance(obj, dict):
            kind = {list: "an array", str: "a string", int: "a number", float: "a number",
                    bool: "a boolean", type(None): "null"}.get(type(obj), type(obj).__name__)
            yield RawRow(row, None, f"{at} {n} is {kind}, expected a JSON object with the pair's "
                         "fields", _clip(text))
            continue
        yield RawRow(row, obj)
    return n


def _read_duckdb_query(sql: str, params: list, database: str = ":memory:",
                       start: int = 1) -> Generator[RawRow, None, int]:
    import duckdb

    from rmjudge.core.interrupts import held_calls

    # a Ctrl-C while DuckDB reads is delivered after the read, not turned into a DuckDB error
    con = held_calls(duckdb.connect(database, read_only=database != ":memory:"))
    n = 0
    try:
        cur = con.execute(sql, params)
        names = [d[0] for d in cur.description]
        while True:
            chunk = cur.fetchmany(1024)
            if not chunk:
                break
            for values in chunk:
                yield RawRow(start + n, dict(zip(names, values)))
                n += 1
    finally:
        con.close()
    return n


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


def read_parquet(path: str, *, start: int = 1) -> Generator[RawRow, None, int]:
    """Rows of one Parquet file through DuckDB's reader; returns how many."""
    import duckdb

    try:
        rows = _read_duckdb_query("SELECT * FROM read_parquet(?)", [path], start=start)
        first = next(rows, None)
    except duckdb.Error as exc:
        raise InputError(f"cannot read {path} as Parquet: {str(exc).splitlines()[0]}") from None
    if first is None:
        return 0
    yield first
    return (yield from rows)  # the count includes `first`


def read_csv_lines(lines: Iterable[str], *, tsv: bool = False, start: int = 1,
                   name: str | None = None) -> Generator[RawRow, None, int]:
    """Rows of CSV text (lines decoded with surrogateescape, newlines kept); returns the
    number of physical lines read, the header included."""
    csv.field_size_limit(sys.maxsize)
    at = f"{name} line" if name else "line"
    reader = csv.reader(lines, dialect="excel-tab" if tsv else "excel")
    header = next(reader, None)
    if header is None:
        return reader.line_num
    header = [h.lstrip("\ufeff") for h in header]
    for fields in reader:
        n = reader.line_num  # physical line of the row's end (1 = header)
        if not any(fields):
            continue
        row = start + n - 1
        raw = ",".join(fields)
        if any("\udc80" <= ch <= "\udcff" for fld in fields for ch in fld):
            yield RawRow(row, None, f"{at} {n} is not valid UTF-8; re-encode the file as UTF-8",
                         _clip(raw.encode("utf-8", "surrogateescape")))
            continue
        if len(fields) != len(header):
            yield RawRow(row, None, f"{at} {n} has {len(fields)} fields, the header has "
                         f"{len(header)}; check the quoting of that row", _clip(raw))
            continue
        yield RawRow(row, dict(zip(header, fields)))
    return reader.line_num


def read_file(path: str, fmt: str | None = None, *, start: int = 1,
              name: str | None = None) -> Generator[RawRow, None, int]:
    """Rows of one JSONL/CSV/Parquet file, compressed or not, numbered from `start`.

    Returns how many row numbers it used, so that the next shard's rows continue after them.
    A compressed file that is damaged part-way keeps the rows before the damage and ends with
    one error row that says so: a truncated file every row before the cut, a file whose
    checksum fails only the rows of the members before the damaged one (`compressed.verify`
    checks the whole file first, so no row of a damaged member is ever read).
    """
    from rmjudge.io import compressed

    fmt = fmt or file_format(path)
    kind, _, codec = fmt.partition(".")
    if kind == "parquet":
        return (yield from read_parquet(path, start=start))
    tsv = compressed.strip_suffix(path.lower()).endswith(".tsv")
    if not codec:
        if kind == "csv":
            with open(path, "r", encoding="utf-8", errors="surrogateescape", newline="") as f:
                return (yield from read_csv_lines(f, tsv=tsv, start=start, name=name))
        with open(path, "rb") as f:
            return (yield from read_jsonl(f, start=start, name=name))
    damage = compressed.verify_file(path, codec)
    cut = None if damage is None or damage.truncated else damage.intact
    with compressed.open_stream(path, codec, limit=cut) as stream:
        if kind == "csv":
            lines = compressed.SafeLines(io.TextIOWrapper(
                stream, encoding="utf-8", errors="surrogateescape", newline=""))
            n = yield from read_csv_lines(compressed.intact_lines(lines, damage), tsv=tsv,
                                          start=start, name=name)
        else:
            lines = compressed.SafeLines(stream)
            n = yield from read_jsonl(compressed.intact_lines(lines, damage), start=start,
                                      name=name)
    error = damaged_row(name or path, start, n, lines.error, damage)
    if error is None:
        return n
    yield error
    return n + 1


def damaged_row(name: str, start: int, n: int, error: str | None, damage) -> RawRow | None:
    """The error row that ends the rows of a damaged compressed input (None when intact)."""
    if damage is not None and not damage.truncated:
        return RawRow(start + n, None, f"{name} is damaged after line {n} ({damage.reason}); "
                      "the rows after that point are not read (they lie in a part of the file "
                      "whose checksum fails, so even rows that decompress may be altered): "
                      "download or compress the file again")
    if error is None:
        return None
    return RawRow(start + n, None, f"{name} is damaged after line {n} ({error}); the rows "
                  "after that point cannot be read: download or compress the file again")


def count_file(path: str, fmt: str) -> int | None:
    """Rows in one JSONL/CSV/Parquet file (compressed or not), or None when DuckDB cannot tell."""
    from rmjudge.io import compressed

    kind, _, codec = fmt.partition(".")
    if kind == "parquet":
        import duckdb

        con = duckdb.connect()
        try:
            return int(con.execute("SELECT count(*) FROM read_parquet(?)", [path]).fetchone()[0])
        except duckdb.Error:
            return None
        finally:
            con.close()
    n = 0
    last = b"\n"
    with (compressed.open_stream(path, codec) if codec else open(path, "rb")) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    n += last != b"\n"
    return n - (1 if kind == "csv" else 0)
