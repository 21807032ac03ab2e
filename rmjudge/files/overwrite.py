"""Where `rmjudge-train` and `rmjudge-export` may write: the rules `rmjudge score` keeps.

Every check here runs before a model loads or a rollout is generated, and refuses with an
`OverwriteError` (one `Error:` line, exit 1) that names the file and the fix; what it refuses
is left byte-for-byte unchanged.

- An output is never one of the command's inputs: paths are compared after resolving symlinks
  and relative paths, and by device and inode, so a hard link to the input counts as it. A file
  output inside a folder input, or matched by a glob input, would be read back on the next run
  and is refused too. `--overwrite` never lifts this.
- An existing output is replaced only when the same command wrote it, or with `--overwrite`.
  How "the same command wrote it" is recognised depends on the output (`recognize`):
  - `rmjudge-train build-data`: the training file when its stats file beside it
    (`x.stats.json`) records the file's sha256; the stats file when it holds build-data stats;
  - `rmjudge-train sft` / `grpo`: the output folder when it holds the marker `MARKER`
    (written first, naming the command), or an earlier version's `settings.json` with that
    command's settings; an empty folder is free;
  - `rmjudge-export convert` / `quantize` / `lora` (GGUF files): never, since no record is kept
    beside a GGUF: an existing file needs `--overwrite`;
  - `rmjudge-export unpack` / `merge` (Hugging Face folders): the folder must be new or empty,
    or `--overwrite` (files of the same name are replaced, others are kept).
- Files are written through `rmjudge.files.atomic` (`write_produced`/`write_file`): a temporary
  file beside the target, moved into place once complete, after the check ran again; a folder
  is built beside its target and its files moved in the same way (rmjudge/files/staging.py).
"""

from __future__ import annotations

import fnmatch
import os
from typing import Callable, Iterable

import orjson

from rmjudge.core.errors import UserError
from rmjudge.files.atomic import write_file
from rmjudge.files.errors import disk_error
from rmjudge.files.folders import make_dir
from rmjudge.files.outputs import check_not_sidecar

MARKER = ".rmjudge-output.json"


class OverwriteError(UserError):
    """The output would replace an input or a file the command did not write."""


def same_path(a: str, b: str) -> bool:
    """True when `a` and `b` name the same file or folder (symlinks, relative paths, hard
    links)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _is_local(source: str) -> bool:
    return bool(source) and source != "-" and "://" not in source


def check_not_input(outputs: Iterable[str], source: str | None,
                    others: Iterable[str | None] = (), flag: str = "-o") -> None:
    """Refuse an output that is the input `source` or one of the `others` (model, adapter...),
    or that lies inside a folder `source` or matches a glob `source` (it would be read back on
    the next run)."""
    from rmjudge.io.readers import split_duckdb_source

    outputs = [o for o in outputs if o]
    for i, given in enumerate((source, *others)):
        if given is None or not _is_local(given):
            continue
        duck = split_duckdb_source(given) if i == 0 else None
        src = duck[0] if duck else given
        for out in outputs:
            if same_path(out, src):
                raise OverwriteError(f"the output {out} would overwrite the input {given}; "
                                     f"choose another {flag}")
            if i > 0:
                continue
            if os.path.isdir(src):
                inside = os.path.realpath(out).startswith(os.path.realpath(src).rstrip(os.sep)
                                                          + os.sep)
            else:
                inside = (any(c in src for c in "*?[")
                          and fnmatch.fnmatch(os.path.abspath(out), os.path.abspath(src)))
            if inside:
                raise OverwriteError(f"the output {out} would be read back as input by "
                                     f"{given} on the next run; write it outside the input "
                                     "folder or glob")


def check_distinct(named: dict[str, str]) -> None:
    """Refuse two outputs of one command that are the same file ({option: path})."""
    items = [(k, v) for k, v in named.items() if v]
    for i, (ka, a) in enumerate(items):
        for kb, b in items[i + 1:]:
            if same_path(a, b):
                raise OverwriteError(f"{ka} and {kb} are the same file ({a}); give them "
                                     "different names")


def check_file_target(path: str, command: str, *, overwrite: bool,
                      recognize: Callable[[str], bool] | None = None, mark: str = "",
                      flag: str = "-o") -> None:
    """Refuse an existing `path` that `recognize` does not accept as written by `command`,
    unless `overwrite`; a folder, a dangling symlink or a sidecar's name is always refused."""
    check_not_sidecar(path, flag)
    if os.path.isdir(path):
        raise OverwriteError(f"{flag} {path} is a folder; give a file name")
    if not os.path.lexists(path):
        return
    if not os.path.exists(path):
        raise OverwriteError(f"{path} is a symlink to a missing file; it is left untouched: "
                             f"choose another {flag}")
    if overwrite or (recognize is not None and recognize(path)):
        return
    if recognize is None:
        raise OverwriteError(f"{path} exists and `{command}` replaces a file only with "
                             f"--overwrite; it is left untouched: choose another {flag}, or "
                             "pass --overwrite to replace it")
    why = f" ({mark})" if mark else ""
    raise OverwriteError(f"{path} exists and was not written by `{command}`{why}; it is left "
                         f"untouched: choose another {flag}, or pass --overwrite to replace it")


def write_marker(folder: str, command: str) -> None:
    """Mark `folder` as an output of `command` (see `check_folder_target`)."""
    from rmjudge import __version__

    create_folder(folder, folder)
    write_file(os.path.join(folder, MARKER),
               orjson.dumps({"command": command, "version": __version__}) + b"\n")


def marked_by(folder: str, command: str) -> bool:
    """True when `folder` holds the marker of `command`."""
    try:
        with open(os.path.join(folder, MARKER), "rb") as f:
            rec = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(rec, dict) and rec.get("command") == command


def check_folder_target(folder: str, command: str, *, overwrite: bool,
                        recognize: Callable[[str], bool] | None = None,
                        flag: str = "-o") -> None:
    """Refuse an existing `folder` that holds anything, unless `recognize` accepts it as an
    earlier output of `command` or `overwrite`; a file where the folder should be is always
    refused, and so is a sidecar's name."""
    check_not_sidecar(folder, flag)
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise OverwriteError(f"{flag} {folder} is a file, not a folder; it is left untouched: "
                             "give a folder name")
    if not os.path.isdir(folder) or overwrite:
        return
    if recognize is not None and recognize(folder):
        return
    try:
        empty = not os.listdir(folder)
    except OSError as exc:
        raise OverwriteError(f"cannot read the folder {folder}: {exc.strerror}") from None
    if not empty:
        whose = (f"files that `{command}` did not write" if recognize is not None else
                 f"files, and `{command}` writes only into a new or empty folder")
        raise OverwriteError(f"{folder} already holds {whose}; they are left untouched: choose "
                             "a new or empty folder, or pass --overwrite to write into it "
                             "(files of the same name are replaced, the others kept)")


def create_folder(path: str, target: str) -> None:
    """Create the folder `path` and its parents; a failure (full disk, no permission) is one
    error naming `target`."""
    try:
        make_dir(path)
    except OSError as exc:
        raise disk_error(target, exc) or OverwriteError(
            f"cannot create the folder {path}: {exc.strerror}") from None
