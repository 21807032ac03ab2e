"""Folders and whole-file moves: creating folders (a failure is one error naming the file),
placing or swapping a finished folder in one step, and removing what rmjudge made."""

from __future__ import annotations

import os
import shutil
import uuid

from rmjudge.core.errors import DiskError
from rmjudge.files.errors import StoreError, disk_error
from rmjudge.files.temps import temp_beside


def prepare_dir(path: str) -> None:
    """Create the folder that will hold the file `path`; a failure, or a folder that cannot be
    written, is one error naming `path`."""
    d = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as exc:
        blocking = _file_in_the_way(d)
        why = f"{blocking} is a file, not a folder" if blocking else exc.strerror
        raise disk_error(path, exc) or StoreError(
            f"cannot create the directory {d}: {why}; choose another -o") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise DiskError(f"cannot write {path}: the directory {d} is not writable; choose -o in "
                        "a writable directory")


def _file_in_the_way(d: str) -> str | None:
    """The first existing part of the folder path `d` that is not a folder, if any."""
    part = d
    while part and not os.path.exists(part):
        parent = os.path.dirname(part)
        if parent == part:
            return None
        part = parent
    return part if part and not os.path.isdir(part) else None


def make_dir(path: str) -> None:
    """Create the folder `path` and its parents (nothing when it exists)."""
    os.makedirs(path, exist_ok=True)


def remove_export(path: str) -> None:
    """Delete `path`, an export rmjudge wrote (an error when it is gone)."""
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


def remove_tree(path: str) -> None:
    """Delete the folder `path`, which rmjudge made (a work or temporary folder), with all it
    holds; nothing when it is gone already."""
    shutil.rmtree(path, ignore_errors=True)
