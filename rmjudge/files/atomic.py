"""Whole files written beside their target under a temporary name and moved into place, so a
reader never sees one half-written (`write_file`, `write_produced`, `write_query_file`,
`write_lines`, `write_json`, `place_copy`, `write_once`, `write_new`). Each temporary holds its own lock
while it exists, so a killed writer's temporaries are removed by the next one
(`clean_stale_temps`) and a live one's never; an I/O failure is one `DiskError` naming the
file."""

from __future__ import annotations

import filecmp
import os
import shutil
from typing import Any, Iterable

import orjson

from rmjudge.core.sql import sql_literal
from rmjudge.files.errors import disk_error
from rmjudge.files.folders import remove_file
from rmjudge.files.locks import export_lock
from rmjudge.files.temps import clean_stale_temps, drop_temp_lock, lock_temp, temp_beside


def _write_beside(path: str, produce, check=None, replace: bool = True) -> bool:
    """`produce(tmp)` writes a temporary file beside `path`; `check()`, when given, runs just
    before it is moved onto `path` (and may refuse by raising). With `replace` False an
    existing `path` is left as it is and the temporary dropped. True when the temporary was
    placed. A failure leaves no temporary behind, and an I/O failure is a DiskError naming
    `path`."""
    import duckdb

    tmp = temp_beside(path)
    lock = lock_temp(tmp, path)  # so the next writer's clean-up leaves a live temporary alone
    try:
        produce(tmp)
        if check is not None:
            check()
        if not _link_new(tmp, path):
            if os.path.lexists(path):
                if not replace:
                    return False
                if check is not None:
                    check()  # something appeared since the check: it must pass again
            os.replace(tmp, path)
        return True
    except BaseException as exc:
        err = disk_error(path, exc) if isinstance(exc, (duckdb.Error, OSError)) else None
        if err is None:
            raise
        raise err from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
        drop_temp_lock(lock)


def _link_new(tmp: str, path: str) -> bool:
    """Move `tmp` to `path` only if `path` does not exist (a hard link never replaces a file,
    so one created by another process since the check is left alone). False when `path`
    exists or the file system has no hard links; `tmp` is then still there."""
    if os.path.lexists(path):
        return False
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError:  # no hard links here (some network and FUSE file systems)
        return False
    os.remove(tmp)
    return True


def write_query_file(con, query: str, path: str, fmt: str, check=None) -> None:
    """`COPY (query)` to `path` as Parquet or JSONL, so a reader never sees a half-written file
    (see `_write_beside` for `check`). Holds `path`'s export lock meanwhile (`export_lock`), so
    no other rmjudge process writes `path` or removes its temporary; temporaries of `path` left
    by a killed writer are removed first."""
    copy_fmt = "(FORMAT parquet)" if fmt == "parquet" else "(FORMAT json)"
    with export_lock(path) as held:
        if held:
            clean_stale_temps(path)
        _write_beside(path, lambda tmp: con.execute(
            f"COPY ({query}) TO {sql_literal(tmp)} {copy_fmt}"), check)


def write_produced(path: str, produce, check=None) -> None:
    """Write a whole file with `produce(tmp)` (a temporary file beside `path`, e.g. a GGUF or
    Parquet writer), moved into place so a reader never sees it half-written (see
    `_write_beside` for `check`)."""
    _write_beside(path, produce, check)


def write_new(path: str, produce) -> bool:
    """Create `path` with `produce(tmp)` (a temporary file beside it) unless it exists; never
    replaces a file: when another process created `path` meanwhile (a cache both filled at
    once), this one's temporary is dropped, and temporaries a killed maker left are removed
    first. True when this call created `path`. An I/O failure is a DiskError naming `path`,
    with no temporary left behind."""
    clean_stale_temps(path)  # a killed maker's temporary (live makers hold their locks)
    return _write_beside(path, produce, replace=False)


def write_new_data(path: str, data) -> bool:
    """`write_new` of the bytes `data` (a cache file several processes may make at once)."""
    def produce(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    return write_new(path, produce)


def write_lines(path: str, lines: Iterable[bytes]) -> None:
    """Write `lines` (each with its newline) as a whole file, streamed, so a reader never sees
    it half-written."""
    def produce(tmp: str) -> None:
        with open(tmp, "wb") as f:
            for line in lines:
                f.write(line)

    _write_beside(path, produce)


def write_file(path: str, data: bytes, check=None) -> None:
    """Write a whole file so a reader never sees it half-written (see `_write_beside`)."""
    def produce(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    _write_beside(path, produce, check)


def write_json(path: str, value: Any) -> None:
    """Write `value` as indented JSON, so a reader never sees the file half-written."""
    write_file(path, orjson.dumps(value, option=orjson.OPT_INDENT_2))


def place_copy(src: str, dest: str) -> None:
    """`dest` holds the bytes of `src`: a hard link where possible, else a copy moved into
    place whole (an earlier `dest`, which the caller wrote, is replaced)."""
    remove_file(dest)
    try:
        os.link(src, dest)
    except OSError:
        write_produced(dest, lambda tmp: shutil.copyfile(src, tmp))


def write_once(path: str, chunks: Iterable[bytes]) -> bool:
    """Write `chunks` to a file of this process's own beside `path`, then link it into place,
    so an existing `path` is never replaced. True when `path` holds these bytes (written now,
    or there already with the same bytes); False when it holds other bytes (left untouched).
    I/O failures are raised as they are (OSError)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "xb") as f:
        try:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return filecmp.cmp(tmp, path, shallow=False)
        return True
    finally:
        os.unlink(tmp)
