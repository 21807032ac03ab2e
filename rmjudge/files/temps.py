"""Temporaries beside a file: `.NAME.new-XXXXXXXX`, each with its own lock held by the process
that writes it, and the clean-up of those a killed process left behind."""

from __future__ import annotations

import errno
import os
import re
import shutil
import uuid

from rmjudge.core.errors import UserError
from rmjudge.files.errors import StoreError, disk_error
from rmjudge.files.locks import Lock


def temp_beside(path: str) -> str:
    """A new temporary name beside `path`: `.NAME.new-XXXXXXXX`."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.new-{uuid.uuid4().hex[:8]}")


def lock_temp(tmp: str, path: str) -> Lock:
    """The lock of the temporary `tmp` of `path`, taken before `tmp` exists (so the next
    writer's clean-up leaves a live temporary alone); a failure is a DiskError naming `path`."""
    try:
        return Lock(tmp)
    except StoreError as exc:
        raise disk_error(path, OSError(errno.EACCES, str(exc))) or exc from None


def drop_temp_lock(lock: Lock) -> None:
    """Remove a temporary's lock file, then release it (once the temporary is gone)."""
    try:
        os.remove(lock.path)  # while held: a clean-up never takes a lock about to vanish
    except OSError:
        pass
    lock.release()


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
