"""Output folders built beside their target (`temp_folder_beside`) and their files moved in
(`install_folder`), so a reader never sees a half-written file in them: `rmjudge-export
unpack`/`merge` and the Hugging Face folders of `rmjudge-train` (`write_folder`)."""

from __future__ import annotations

import os
from collections.abc import Callable

from rmjudge.files.errors import disk_error
from rmjudge.files.folders import place_dir, remove_tree, replace_file
from rmjudge.files.overwrite import OverwriteError, check_folder_target, create_folder
from rmjudge.files.temps import temp_beside


def temp_folder_beside(folder: str) -> str:
    """A new, empty, hidden folder beside `folder` to build it in."""
    folder = os.path.abspath(folder)
    tmp = temp_beside(folder.rstrip(os.sep))
    create_folder(tmp, folder)
    return tmp


def install_folder(tmp: str, folder: str, *, overwrite: bool) -> None:
    """Move the files built in `tmp` into `folder` (a new folder is renamed into place whole);
    without `overwrite`, a file that appeared in `folder` since the check is never replaced.
    `tmp` is removed in every case."""
    try:
        if not os.path.exists(folder):
            if place_dir(tmp, folder):
                return
            create_folder(folder, folder)
        for root, _dirs, files in os.walk(tmp):
            rel = os.path.relpath(root, tmp)
            dest_dir = os.path.normpath(os.path.join(folder, rel))
            create_folder(dest_dir, folder)
            for name in files:
                src, dest = os.path.join(root, name), os.path.join(dest_dir, name)
                if os.path.lexists(dest) and not overwrite:
                    raise OverwriteError(f"{dest} appeared while {folder} was being written; "
                                         "it is left untouched: choose another folder")
                try:
                    replace_file(src, dest)
                except OSError as exc:
                    raise disk_error(dest, exc) or OverwriteError(
                        f"cannot move {src} to {dest}: {exc.strerror}") from None
    finally:
        remove_tree(tmp)


def write_folder(folder: str, command: str, *savers: Callable[[str], object],
                 overwrite: bool) -> None:
    """Build `folder` by calling each of `savers` (a library's writer such as
    `model.save_pretrained`, see `tempdirs.save_folder`) with a new hidden folder beside it,
    check the target again (`check_folder_target`) and move the files in (`install_folder`);
    the temporary folder is removed whatever fails."""
    tmp = temp_folder_beside(folder)
    try:
        for save in savers:
            save(tmp)
        check_folder_target(folder, command, overwrite=overwrite)
    except BaseException:
        remove_tree(tmp)
        raise
    install_folder(tmp, folder, overwrite=overwrite)
