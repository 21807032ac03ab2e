"""Folders of this process's own: `TempDir`, a folder beside its destination, filled (by rmjudge
or by another library's writer) and then moved into place whole; `save_folder`, which hands it
to other libraries' savers (`save_pretrained`, `save_model`); `scratch`, a private work folder
removed afterwards.

Other libraries never write into an output folder themselves: their savers are handed to
`save_folder` (or `staging.write_folder`) as functions of the folder to write, and are called
here with a temporary one (tests/test_architecture.py checks that no other module calls them).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator

from rmjudge.files.errors import disk_error
from rmjudge.files.folders import make_dir, remove_tree, replace_dir
from rmjudge.files.temps import drop_temp_lock, lock_temp, temp_beside


class TempDir:
    """A folder of this process's own beside `dest`, `.NAME.new-XXXXXXXX`, with its lock held
    (so `clean_stale_temps(dest)` removes it only once its process is gone), to fill and then
    move into place (`install`) or drop (`close`). Used for folders written by other libraries
    (transformers' checkpoints and `save_pretrained`), so `dest` is never seen half-written."""

    def __init__(self, dest: str):
        self.dest = os.path.abspath(dest)
        self.path = temp_beside(self.dest)
        make_dir(os.path.dirname(self.path))
        self._lock = lock_temp(self.path, dest)
        try:
            os.mkdir(self.path)
        except OSError as exc:
            drop_temp_lock(self._lock)
            raise disk_error(dest, exc) or exc from None

    def install(self) -> None:
        """Put the finished folder in the place of `dest` (replacing a folder rmjudge wrote
        there before: `replace_dir`), then drop the lock."""
        replace_dir(self.path, self.dest)
        self.close()

    def close(self) -> None:
        remove_tree(self.path)
        drop_temp_lock(self._lock)

    def __enter__(self) -> "TempDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def save_folder(dest: str, *savers: Callable[[str], object]) -> None:
    """Call each of `savers` with a `TempDir` beside `dest` (in order), then move the folder
    into `dest`'s place whole (replacing a folder rmjudge wrote there before). A saver is a
    library's writer, such as `model.save_pretrained` or `trainer.save_model`
    (`functools.partial` binds its options), or a function that writes through
    `rmjudge.files`. A failure leaves `dest` as it was and no temporary behind."""
    tmp = TempDir(dest)
    try:
        for save in savers:
            save(tmp.path)
        tmp.install()
    except BaseException:
        tmp.close()
        raise


@contextlib.contextmanager
def scratch(prefix: str = "rmjudge-", beside: str | None = None) -> Iterator[str]:
    """A new private folder for work files, removed with what it holds when the block ends: in
    the system's temporary folder, or beside the file `beside` (on its file system, so what
    is built there can be moved next to it in one step)."""
    where = None if beside is None else os.path.dirname(os.path.abspath(beside))
    folder = tempfile.mkdtemp(prefix=prefix, dir=where)
    try:
        yield folder
    finally:
        remove_tree(folder)
