"""Every write, replace and delete of a run file, and what guards it.

- The lock (`Lock`, `X.lock` beside the file): taken before anything else and held until the
  writer is done; a second writer is refused with `StoreBusyError` (exit code 3).
- Only files rmjudge created are ever written, replaced or deleted: a DuckDB database without
  rmjudge's tables, or any other file, given as the output is refused and left untouched
  (`refuse_foreign`).
- Disk full or unwritable outputs become one `DiskError` naming the file (`disk_error`).
- Whole files are written beside their target under a temporary name and moved into place, so
  a reader never sees one half-written (`write_file`, `write_produced`, `write_query_file`,
  `write_rows_file`, `write_json`); a killed writer's temporaries are removed by the next one
  (`clean_stale_temps`).
"""

from __future__ import annotations

import errno
import filecmp
import os
import re
import shutil
import uuid
from typing import Any, Iterable

import orjson

from rmjudge.core.errors import BusyError, DiskError, UserError
from rmjudge.core.sql import quote_ident, sql_literal
from rmjudge.store.bulk import insert_rows
from rmjudge.store.paths import export_files, store_path
from rmjudge.store.schema import ddl, missing_core_tables, not_a_store_message

try:  # POSIX only: on Windows the package imports, and `check_platform` says what is missing
    import fcntl
except ImportError:
    fcntl = None


class StoreError(UserError):
    """The output cannot be used as asked; the message names the fix."""


class StoreBusyError(StoreError, BusyError):
    """Another rmjudge process holds the store's lock."""


class PlatformError(UserError):
    """This system lacks what rmjudge's run store needs (POSIX file locks)."""


PLATFORM_MESSAGE = ("rmjudge needs POSIX file locks (fcntl.flock) to keep two runs from writing "
                    "one output, and this system has none (Windows): run rmjudge under WSL2 "
                    "(Windows Subsystem for Linux), or on Linux or macOS")


def check_platform() -> None:
    """Raise PlatformError where the store's locks cannot work (no `fcntl`: Windows). Every
    command and `rmjudge.score` call it before any work; `Lock` refuses the same way."""
    if fcntl is None:
        raise PlatformError(PLATFORM_MESSAGE)


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


_DISK_HINTS = ("no space left", "disk is full", "could not write", "file too large",
               "read-only file system", "permission denied", "could not set lock")


def disk_error(path: str, exc: BaseException) -> DiskError | None:
    """A DiskError for an I/O failure writing `path` (None when `exc` is something else)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
                                                   errno.EROFS, errno.EACCES, errno.EPERM):
        why = os.strerror(exc.errno)
    else:
        text = str(exc).lower()
        hint = next((h for h in _DISK_HINTS if h in text), None)
        if hint is None:
            return None
        why = {"no space left": "No space left on device", "disk is full": "No space left on device",
               "file too large": "File too large", "read-only file system": "Read-only file system",
               "permission denied": "Permission denied"}.get(hint, first_line(exc))
    return DiskError(f"cannot write {path}: {why}; free space or choose a writable -o, then "
                     "rerun the same command to resume (the results committed so far are kept)",
                     path=path, reason=why)


def file_head(path: str, size: int) -> bytes | None:
    """The first `size` bytes of `path` (what tells whose file it is); None when it cannot be
    read."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return None


def is_duckdb_file(path: str) -> bool:
    """True when `path` is a DuckDB database file (its header carries `DUCK` at byte 8)."""
    head = file_head(path, 12)
    return head is not None and head[8:12] == b"DUCK"


def is_rmjudge_store(path: str) -> bool:
    """True when `path` is a DuckDB file holding rmjudge's tables (or no tables at all)."""
    import duckdb

    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return os.path.isfile(path)
    if not is_duckdb_file(path):
        return False
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.Error as exc:
        msg = str(exc).lower()
        if "lock" in msg or "different configuration" in msg:
            raise StoreBusyError(f"{path} is open for writing in another process; wait for it "
                                 "to finish or use -o to write elsewhere") from None
        return False
    try:
        tables = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT internal").fetchall()}
        if tables:
            return not missing_core_tables(tables)
        # no table: an empty database is rmjudge's to use, anything else in it is someone
        # else's (asked only here: listing the functions costs more than the rest together)
        others = con.execute("""
            SELECT (SELECT count(*) FROM duckdb_views() WHERE NOT internal)
                 + (SELECT count(*) FROM duckdb_sequences())
                 + (SELECT count(*) FROM duckdb_functions() WHERE NOT internal)
                 + (SELECT count(*) FROM duckdb_types() WHERE NOT internal)
                 + (SELECT count(*) FROM duckdb_schemas() WHERE NOT internal
                      AND schema_name NOT IN ('main', 'pg_catalog', 'information_schema'))
        """).fetchone()[0]
        return others == 0
    finally:
        con.close()


_HELD: set[str] = set()  # the lock files this process holds (so it does not lock them twice)
_WRITING: set[str] = set()  # of which those `write_query_file` holds while it writes


class Lock:
    """An exclusive, non-blocking `flock` on `path + '.lock'`, held until `release`. `busy`:
    the message when another process holds it."""

    def __init__(self, path: str, what: str = "writing", busy: str | None = None):
        check_platform()
        self.path = path + ".lock"
        self._key: str | None = None
        for _ in range(5):
            try:
                self._f = open(self.path, "a+")
            except OSError as exc:
                raise disk_error(path, exc) or StoreError(
                    f"cannot create the lock file {self.path}: {exc.strerror}") from None
            try:
                fcntl.flock(self._f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._f.close()
                raise StoreBusyError(busy or f"another rmjudge process is {what} {path}; wait "
                                     "for it to finish or use -o to write elsewhere") from None
            if self._still_linked():
                self._key = os.path.realpath(self.path)
                _HELD.add(self._key)
                return
            self.release()  # removed (a stale temporary's lock) between open and flock: again
        raise StoreBusyError(busy or f"another rmjudge process is {what} {path}; wait for it to "
                             "finish or use -o to write elsewhere")

    def _still_linked(self) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(self._f.fileno()).st_ino
        except OSError:
            return False

    def release(self) -> None:
        if self._key is not None:
            _HELD.discard(self._key)
            self._key = None
        try:
            fcntl.flock(self._f, fcntl.LOCK_UN)
        finally:
            self._f.close()


def check_not_busy(path: str) -> None:
    """Raise BusyError when another rmjudge process holds `path`'s lock (for read-only users)."""
    if os.path.exists(path + ".lock") and os.path.realpath(path + ".lock") not in _WRITING:
        Lock(path, "writing").release()


def busy_export(f: str, out: str) -> str:
    if os.path.abspath(f) == os.path.abspath(out):
        return (f"another rmjudge process is writing {f} (as its output, or as a file beside "
                "its output); wait for it to finish or use -o to write elsewhere")
    return (f"another rmjudge process is writing {f}, which this run writes beside {out} (as its "
            "output, or as a file beside its output); wait for it to finish or use -o to write "
            "elsewhere")


def check_exports_not_busy(out: str) -> None:
    """Raise BusyError when a live rmjudge run writes one of the files a run with output `out`
    writes (its export or a sidecar, as its own output or as a sidecar of its own)."""
    for f in export_files(out):
        if os.path.exists(store_path(f) + ".lock"):
            Lock(store_path(f), busy=busy_export(f, out)).release()


# The temporary names rmjudge writes beside a file `x` (`temp_beside`, `NewStore`):
# `.x.new-` + 8 hex digits, and for a store being built its `.wal` and `.lock`.
_TEMP_SUFFIX = re.compile(r"\.new-[0-9a-f]{8}(\.wal|\.lock)?")


def clean_stale_temps(path: str) -> list[str]:
    """Remove the temporaries of `path` that a killed rmjudge process left behind (only names of
    rmjudge's exact temporary pattern for this `path`: files and folders). A live writer holds
    its temporary's own lock (every writer here takes it before the temporary exists, and
    removes it only once the temporary is gone), so those are left alone, as is a store still
    being built (`NewStore`). Returns the files and folders removed."""
    head, tail = os.path.split(os.path.abspath(path))
    prefix = f".{tail}"
    try:
        names = os.listdir(head)
    except OSError:
        return []
    groups: dict[str, list[str]] = {}
    for name in names:
        m = _TEMP_SUFFIX.fullmatch(name[len(prefix):]) if name.startswith(prefix) else None
        if m is not None:
            base = name[: len(name) - len(m.group(1) or "")]
            groups.setdefault(base, []).append(name)
    removed = []
    for base, members in sorted(groups.items()):
        full = os.path.join(head, base)
        lock = None
        if base + ".lock" in members:
            try:
                lock = Lock(full)
            except UserError:  # a live process is building it (or its lock cannot be opened)
                continue
        try:
            for name in sorted(members, key=lambda n: n.endswith(".lock")):
                full_name = os.path.join(head, name)
                try:
                    if os.path.isdir(full_name) and not os.path.islink(full_name):
                        shutil.rmtree(full_name)  # a folder built aside (`TempDir`)
                    else:
                        os.remove(full_name)
                    removed.append(full_name)
                except OSError:  # gone already, or not ours to remove here: left as it is
                    pass
        finally:
            if lock is not None:
                lock.release()
    return removed


_ANY_TEMP = re.compile(r"\.(.+?)\.new-[0-9a-f]{8}(\.wal|\.lock)?")


def clean_folder_temps(folder: str) -> list[str]:
    """`clean_stale_temps` for every file of `folder` that has temporaries there (an output
    folder of `rmjudge-train`: its data files, checkpoints and model folders)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    bases = sorted({m.group(1) for n in names if (m := _ANY_TEMP.fullmatch(n))})
    return [f for b in bases for f in clean_stale_temps(os.path.join(folder, b))]


def prepare_dir(path: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as exc:
        raise disk_error(path, exc) or StoreError(
            f"cannot create the directory {d}: {exc.strerror}") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise DiskError(f"cannot write {path}: the directory {d} is not writable; choose -o in "
                        "a writable directory")


def refuse_foreign(path: str) -> None:
    if not os.path.exists(path) and os.path.exists(path + ".wal"):
        raise StoreError(
            f"{path}.wal exists without {path} (a write-ahead log of a database that is gone, "
            "perhaps not rmjudge's); it is left untouched: move it away or choose another -o")
    if os.path.exists(path) and not is_rmjudge_store(path):
        raise StoreError(not_a_store_message(path, LEAVE_FIX, " (rmjudge did not create it)",
                                             exists=True))


LEAVE_FIX = "it is left untouched: choose another -o"


def check_writable_target(path: str) -> None:
    """Refuse early a path that is not an rmjudge store (the store refuses it again on open)."""
    refuse_foreign(path)



def remove_files(path: str) -> None:
    """Delete a store's database and write-ahead log (the caller holds its lock)."""
    for p in (path, path + ".wal"):
        if os.path.exists(p):
            os.remove(p)


def temp_beside(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.new-{uuid.uuid4().hex[:8]}")


def _write_beside(path: str, produce, check=None) -> None:
    """`produce(tmp)` writes a temporary file beside `path`; `check()`, when given, runs just
    before it is moved onto `path` (and may refuse by raising). A failure leaves no temporary
    behind, and an I/O failure is a DiskError naming `path`."""
    import duckdb

    tmp = temp_beside(path)
    lock = _temp_lock(tmp, path)  # so the next writer's clean-up leaves a live temporary alone
    try:
        produce(tmp)
        if check is not None:
            check()
        if not _link_new(tmp, path):
            if check is not None and os.path.lexists(path):
                check()  # something appeared since the check: it must pass again
            os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        err = disk_error(path, exc) if isinstance(exc, (duckdb.Error, OSError)) else None
        if err is None:
            raise
        raise err from None
    finally:
        _drop_temp_lock(lock)


def _temp_lock(tmp: str, path: str) -> "Lock":
    try:
        return Lock(tmp)
    except StoreError as exc:
        raise disk_error(path, OSError(errno.EACCES, str(exc))) or exc from None


def _drop_temp_lock(lock: "Lock") -> None:
    try:
        os.remove(lock.path)  # while held: a clean-up never takes a lock about to vanish
    except OSError:
        pass
    lock.release()


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
    (see `_write_beside` for `check`). Holds `path`'s export lock meanwhile (unless this process
    already does, as a run exporting does), so no other rmjudge process writes `path` or
    removes its temporary; temporaries of `path` left by a killed writer are removed first."""
    copy_fmt = "(FORMAT parquet)" if fmt == "parquet" else "(FORMAT json)"
    lock = _hold_export_lock(path)
    try:
        if lock is not None:
            _WRITING.add(lock._key)  # our own: `check` (check_not_busy) must not refuse it
        if lock is not None or _holds_export_lock(path):
            clean_stale_temps(path)
        _write_beside(path, lambda tmp: con.execute(
            f"COPY ({query}) TO {sql_literal(tmp)} {copy_fmt}"), check)
    finally:
        if lock is not None:
            _WRITING.discard(lock._key)
            lock.release()


def _holds_export_lock(path: str) -> bool:
    return os.path.realpath(store_path(path) + ".lock") in _HELD


def _hold_export_lock(path: str) -> "Lock | None":
    """`path`'s export lock, taken now; None when this process holds it already, or when it
    cannot be created (then writing `path` fails with its own message)."""
    if _holds_export_lock(path) or not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        return None
    try:
        return Lock(store_path(path), busy=f"another rmjudge process is writing {path}; wait "
                     "for it to finish or use -o to write elsewhere")
    except StoreBusyError:
        raise
    except UserError:
        return None


def write_produced(path: str, produce, check=None) -> None:
    """Write a whole file with `produce(tmp)` (a temporary file beside `path`, e.g. a GGUF or
    Parquet writer), moved into place so a reader never sees it half-written (see
    `_write_beside` for `check`)."""
    _write_beside(path, produce, check)


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


def write_rows_file(columns: list[tuple[str, str]], rows: list[list], path: str, fmt: str,
                    key: tuple[str, ...] = ()) -> None:
    """Write `rows` (later rows win on the same `key`) as a Parquet/JSONL file of `columns`."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        pk = f", PRIMARY KEY ({', '.join(quote_ident(k) for k in key)})" if key else ""
        con.execute(ddl("t", columns, pk))
        insert_rows(con, "t", rows, replace=bool(key))
        order = f" ORDER BY {', '.join(quote_ident(k) for k in key)}" if key else ""
        write_query_file(con, f"SELECT * FROM t{order}", path, fmt)
    finally:
        con.close()


def remove_export(path: str) -> None:
    os.remove(path)



def remove_file(path: str) -> None:
    """Delete `path`, a file rmjudge wrote (nothing when it is gone already)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def replace_file(src: str, dest: str) -> None:
    """Move `src` (a finished temporary rmjudge wrote) onto `dest` in one step."""
    os.replace(src, dest)


def make_dir(path: str) -> None:
    """Create the folder `path` and its parents (nothing when it exists)."""
    os.makedirs(path, exist_ok=True)


def place_dir(tmp: str, dest: str) -> bool:
    """Move the finished folder `tmp` to `dest` in one step; False (and `tmp` left as it is)
    when `dest` exists already, e.g. placed by a concurrent attempt at the same work."""
    try:
        os.rename(tmp, dest)
    except OSError:
        return False
    return True


def replace_dir(tmp: str, dest: str, check=None) -> None:
    """Put the finished folder `tmp` at `dest`. An earlier `dest`, which `check()` (run just
    before, and free to refuse by raising) accepts as the caller's own, is moved aside, the new
    folder moved in, and the old one removed; a failure puts the old one back. `tmp` is removed
    whatever fails."""
    aside = None
    try:
        if check is not None:
            check()
        if os.path.lexists(dest):
            aside = temp_beside(dest)
            os.rename(dest, aside)
        try:
            os.rename(tmp, dest)
        except BaseException:
            if aside is not None:
                os.rename(aside, dest)
                aside = None
            raise
    except OSError as exc:
        raise disk_error(dest, exc) or StoreError(
            f"cannot place {dest}: {exc.strerror or exc}; choose another -o") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)


def swap_dir(tmp: str, dest: str) -> None:
    """Put the finished folder `tmp` in the place of the folder `dest` (which rmjudge made):
    `dest` is set aside as `.old-NAME-XXXXXXXX`, `tmp` moved in, the old one deleted. A process
    killed between the two moves leaves the old folder aside, which
    `rmjudge.store.assemble.recover_batches` puts back."""
    head, name = os.path.split(os.path.abspath(dest))
    aside = os.path.join(head, f".old-{name}-{uuid.uuid4().hex[:8]}")
    os.rename(dest, aside)
    try:
        os.rename(tmp, dest)
    except OSError:
        os.rename(aside, dest)
        raise
    remove_tree(aside)


class TempDir:
    """A folder of this process's own beside `dest`, `.NAME.new-XXXXXXXX`, with its lock held
    (so `clean_stale_temps(dest)` removes it only once its process is gone), to fill and then
    move into place (`install`) or drop (`close`). Used for folders written by other libraries
    (transformers' checkpoints and `save_pretrained`), so `dest` is never seen half-written."""

    def __init__(self, dest: str):
        self.dest = os.path.abspath(dest)
        self.path = temp_beside(self.dest)
        make_dir(os.path.dirname(self.path))
        self._lock = _temp_lock(self.path, dest)
        try:
            os.mkdir(self.path)
        except OSError as exc:
            _drop_temp_lock(self._lock)
            raise disk_error(dest, exc) or exc from None

    def install(self) -> None:
        """Put the finished folder in the place of `dest` (replacing a folder rmjudge wrote
        there before: `replace_dir`), then drop the lock."""
        replace_dir(self.path, self.dest)
        self.close()

    def close(self) -> None:
        remove_tree(self.path)
        _drop_temp_lock(self._lock)

    def __enter__(self) -> "TempDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def remove_tree(path: str) -> None:
    """Delete the folder `path`, which rmjudge made (a work or temporary folder), with all it
    holds; nothing when it is gone already."""
    shutil.rmtree(path, ignore_errors=True)


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
