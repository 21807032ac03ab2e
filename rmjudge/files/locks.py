"""Locks: `X.lock` beside a file, taken before anything else and held until the writer is done;
a second writer is refused with `StoreBusyError` (exit code 3).

A writer of the file `f` (a run store, an export, a sidecar, a report) locks `store_path(f)`
(rmjudge/files/paths.py), so two names of one run's files take one same lock.

The lock file exists only while a process holds it: `Lock.release` removes it, and it does so
while still holding the `flock`, and only when the name still links to the file it locked. A
taker opens `X.lock`, takes the `flock` on what it opened, then checks that the name still
links to that same file (`_still_linked`), and starts again when it does not. So a process that
opened the file just before its holder removed it finds the file gone once it gets the `flock`,
and opens a new one; and no process removes a lock file someone else holds: the file a name
links to can only be removed by the holder of its `flock`, which is one process at a time. A
killed process leaves its empty lock file behind (the kernel drops its `flock`); the next
rmjudge process that takes or checks that lock removes it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from rmjudge.core.errors import UserError
from rmjudge.files.errors import StoreBusyError, StoreError, disk_error
from rmjudge.files.paths import export_files, store_path

try:  # POSIX only: on Windows the package imports, and `check_platform` says what is missing
    import fcntl
except ImportError:
    fcntl = None


class PlatformError(UserError):
    """This system lacks what rmjudge's run store needs (POSIX file locks)."""


PLATFORM_MESSAGE = ("rmjudge needs POSIX file locks (fcntl.flock) to keep two runs from writing "
                    "one output, and this system has none (Windows): run rmjudge under WSL2 "
                    "(Windows Subsystem for Linux), or on Linux or macOS")


def check_platform() -> None:
    """Raise PlatformError where the locks cannot work (no `fcntl`: Windows). Every command and
    `rmjudge.score` call it before any work; `Lock` refuses the same way."""
    if fcntl is None:
        raise PlatformError(PLATFORM_MESSAGE)


_HELD: set[str] = set()  # the lock files this process holds (so it does not lock them twice)
_WRITING: set[str] = set()  # of which those `export_lock` holds while its file is written


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

    def _name_is_this_file(self) -> bool:
        """True when the name `self.path` itself (not a link to it) is the file locked."""
        try:
            named, held = os.lstat(self.path), os.fstat(self._f.fileno())
        except OSError:
            return False
        return (named.st_ino, named.st_dev) == (held.st_ino, held.st_dev)

    def release(self) -> None:
        """Let the lock go, removing its file first (while still held, and only when the name
        still links to the file this lock holds: see the module's docstring)."""
        held = self._key is not None
        if held:
            _HELD.discard(self._key)
            _WRITING.discard(self._key)
            self._key = None
        try:
            if held and self._name_is_this_file():
                try:
                    os.unlink(self.path)
                except OSError:  # a read-only folder: the empty file stays, unheld
                    pass
            fcntl.flock(self._f, fcntl.LOCK_UN)
        finally:
            self._f.close()


def check_not_busy(path: str) -> None:
    """Raise BusyError when another rmjudge process holds `path`'s lock (for read-only users)."""
    if os.path.exists(path + ".lock") and os.path.realpath(path + ".lock") not in _WRITING:
        Lock(path, "writing").release()


def busy_export(f: str, out: str) -> str:
    """The message refusing a run with output `out` because another process writes `f`."""
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


def holds_export_lock(path: str) -> bool:
    """True when this process holds the lock a writer of the file `path` takes."""
    return os.path.realpath(store_path(path) + ".lock") in _HELD


@contextlib.contextmanager
def export_lock(path: str) -> Iterator[bool]:
    """Hold the lock a writer of the file `path` takes while the body writes it (unless this
    process holds it already, as a run exporting does), so no other rmjudge process writes
    `path` or removes its temporary. Yields whether this process holds it: False when the lock
    cannot be created (then writing `path` fails with its own message). Meanwhile
    `check_not_busy(path)` does not refuse this process's own lock."""
    if holds_export_lock(path) or not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        yield holds_export_lock(path)
        return
    try:
        lock = Lock(store_path(path), busy=f"another rmjudge process is writing {path}; wait "
                    "for it to finish or use -o to write elsewhere")
    except StoreBusyError:
        raise
    except UserError:
        yield False
        return
    _WRITING.add(lock._key)
    try:
        yield True
    finally:
        lock.release()
