"""Every input form rmjudge accepts, behind `read_rows` and `count_rows`.

Forms (docs/inputs.md has an example of each): JSONL (a file, or `-` for stdin), compressed
JSONL (gzip, zstd, bzip2, xz: see `rmjudge.io.compressed`), Parquet, CSV, a DuckDB table
(`file.duckdb:table`), a folder or glob of shards (`rmjudge.io.shards`), and Hugging Face
datasets: a Hub id `hf://datasets/org/name[@revision][?config=..&split=..]` or a `save_to_disk` folder
(`rmjudge.io.huggingface`). `detect_format` decides which, from the name and the first bytes;
one file is read by `rmjudge.io.files`, whose names this module re-exports.

Every reader yields `RawRow`s (`rmjudge.io.rows`): the 1-based row number, the decoded object
(or None) and, for a row that could not be decoded, a reason a person can act on plus the
offending raw text. A problem with the input as a whole (missing, wrong type, unknown table)
raises `InputError`. Nothing reads the whole file into memory.
"""

from __future__ import annotations

import os
import sys
from typing import BinaryIO, Iterator

from rmjudge.io.files import (JSONL_SUFFIXES, KNOWN_FORMS, RAW_LIMIT,  # noqa: F401  (re-exported)
                              count_file, damaged_row, file_format, read_csv_lines, read_file,
                              read_duckdb_table, read_jsonl, read_parquet)
from rmjudge.io.memory import MemoryInput
from rmjudge.io.rows import InputError, RawRow  # noqa: F401  (re-exported)


def split_duckdb_source(source: str) -> tuple[str, str] | None:
    """'file.duckdb:table' -> (file, table); None for other sources."""
    for ext in (".duckdb:", ".db:", ".ddb:"):
        i = source.find(ext)
        if i > 0:
            return source[: i + len(ext) - 1], source[i + len(ext):]
    return None


def detect_format(source: "str | MemoryInput") -> str:
    """What `source` is, checked enough to fail before any work starts.

    'jsonl' | 'parquet' | 'csv' | 'duckdb' | 'shards' | 'hf-hub' | 'hf-disk', for a
    compressed file the inner format with the codec: 'jsonl.gz', 'jsonl.zst', 'csv.bz2', ...,
    and 'memory' for rows held in Python (`rmjudge.io.memory`).
    """
    if isinstance(source, MemoryInput):
        return "memory"
    if source == "-":
        return "jsonl"
    from rmjudge.io import huggingface, shards

    if huggingface.is_hub_source(source):
        huggingface.check_hub_source(source)
        return "hf-hub"
    if split_duckdb_source(source):
        return "duckdb"
    if not os.path.exists(source):
        if huggingface.split_disk_source(source):
            return "hf-disk"
        if shards.is_glob(source):
            shards.shard_formats(source)
            return "shards"
        raise InputError(f"input file not found: {source}; check the path")
    if os.path.isdir(source):
        if huggingface.is_saved_dataset(source):
            huggingface.check_disk_source(source)
            return "hf-disk"
        shards.shard_formats(source)
        return "shards"
    return file_format(source)


def read_rows(source: "str | MemoryInput", stdin: BinaryIO | None = None,
              fmt: str | None = None) -> Iterator[RawRow]:
    """Rows of any supported source. Raises InputError for whole-input problems. `fmt`: its
    `detect_format`, when the run found it already (found here otherwise)."""
    fmt = fmt or detect_format(source)
    if isinstance(source, MemoryInput):
        yield from source.rows()
    elif source == "-":
        yield from _read_stdin(stdin or sys.stdin.buffer)
    elif fmt == "hf-hub":
        from rmjudge.io import huggingface

        yield from huggingface.read_hub(source)
    elif fmt == "hf-disk":
        from rmjudge.io import huggingface

        yield from huggingface.read_disk(source)
    elif fmt == "shards":
        from rmjudge.io import shards

        yield from shards.read_shards(source)
    elif fmt == "duckdb":
        path, table = split_duckdb_source(source)  # type: ignore[misc]
        yield from read_duckdb_table(path, table)
    else:
        yield from read_file(source, fmt)


def _read_stdin(stream: BinaryIO) -> Iterator[RawRow]:
    """JSONL on stdin, decompressed when its first bytes are gzip/zstd/bzip2/xz."""
    from rmjudge.io import compressed

    peek = getattr(stream, "peek", None)
    codec = compressed.sniff(peek(8)[:8]) if peek else None
    if codec is None:
        yield from read_jsonl(stream)
        return
    import shutil
    import tempfile

    # kept in a temporary file, so that its checksums are checked before any row is read
    with tempfile.TemporaryFile(prefix="rmjudge-stdin-") as spool:
        try:
            shutil.copyfileobj(stream, spool, 1 << 20)
            spool.flush()
        except OSError as exc:
            raise InputError(f"cannot keep the compressed stdin in {tempfile.gettempdir()} to "
                             f"check it ({exc.strerror}); set TMPDIR to a folder with room, or "
                             "decompress the input first") from None
        spool.seek(0)
        damage = compressed.verify(spool, codec)
        spool.seek(0)
        cut = None if damage is None or damage.truncated else damage.intact
        with compressed.wrap_stream(spool, codec, limit=cut) as inner:
            lines = compressed.SafeLines(inner)
            n = yield from read_jsonl(compressed.intact_lines(lines, damage))
    error = damaged_row("stdin", 1, n, lines.error, damage)
    if error is not None:
        yield error


def count_rows(source: "str | MemoryInput", fmt: str | None = None) -> int | None:
    """Rows in the input, when cheap to know (for the progress total); None otherwise. `fmt`:
    its `detect_format`, when known.

    For line-based files this counts lines (blank ones included), decompressing if need be.
    """
    if isinstance(source, MemoryInput):
        return source.count
    if source == "-":
        return None
    try:
        fmt = fmt or detect_format(source)
    except InputError:
        return None
    from rmjudge.io import compressed

    try:
        if fmt in ("hf-hub", "hf-disk"):
            from rmjudge.io import huggingface

            return huggingface.count_rows(source, fmt)
        if fmt == "shards":
            from rmjudge.io import shards

            return shards.count_shards(source)
        if fmt == "duckdb":
            return None
        return count_file(source, fmt)
    except (InputError, OSError, EOFError, *compressed.ERRORS):
        return None


def default_output_stem(source: str) -> str:
    """The output name for `source` without `.judged.duckdb` (decided from the text alone).

    `pairs.jsonl`, `pairs.jsonl.gz`, `pairs.jsonl.zst` -> `pairs`; `x.duckdb:train` -> `x`;
    `-` -> `stdin`; `hf://datasets/org/prefs@v1?config=en&split=test` -> `org_prefs.en.test.v1`
    (in the current folder; the old `hf://datasets/org/prefs:en@test` -> `org_prefs.en.test`);
    a folder `data/` or a save_to_disk folder -> `data`; `ds@test` (a DatasetDict split) and
    its subfolder `ds/test` -> `ds.test`; a glob `data/*.parquet` -> `data`,
    `data/train-*.parquet` -> `data/train`, `*.jsonl` -> `shards`.
    """
    from rmjudge.io import compressed, huggingface, shards

    if source == "-":
        return "stdin"
    if huggingface.is_hub_source(source):
        try:
            return ".".join(huggingface.output_parts(source))
        except InputError:
            return "hub"
    duck = split_duckdb_source(source)
    if duck:
        return os.path.splitext(duck[0])[0]
    disk = None if os.path.exists(source) else huggingface.split_disk_source(source)
    if disk:
        return f"{disk[0].rstrip(os.sep)}.{disk[1]}"
    if os.path.isdir(source):
        folder = source.rstrip(os.sep) or source
        parent = os.path.dirname(folder)
        if parent and os.path.isfile(os.path.join(parent, "dataset_dict.json")):
            return f"{parent}.{os.path.basename(folder)}"
        return folder
    if not os.path.exists(source) and shards.is_glob(source):
        literal = source[: min(source.index(ch) for ch in "*?[" if ch in source)]
        folder, _, partial = literal.rpartition(os.sep)
        partial = partial.rstrip("-_.")
        if partial:
            return os.path.join(folder, partial) if folder else partial
        return folder or "shards"
    return os.path.splitext(compressed.strip_suffix(source))[0]
