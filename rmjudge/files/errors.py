"""The errors of file writes: an output that cannot be used as asked (`StoreError`), one another
rmjudge process holds (`StoreBusyError`), and an I/O failure as one `DiskError` naming the file
(`disk_error`)."""

from __future__ import annotations

import errno
import os

from rmjudge.core.errors import BusyError, DiskError, UserError


class StoreError(UserError):
    """The output cannot be used as asked; the message names the fix."""


class StoreBusyError(StoreError, BusyError):
    """Another rmjudge process holds the output's lock."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
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
