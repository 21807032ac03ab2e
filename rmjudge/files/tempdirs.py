"""Folders built aside: `TempDir`, a folder of this process's own beside its destination, filled
(by rmjudge or by another library's writer) and then moved into place whole."""

from __future__ import annotations

import os

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
