"""What may be given as an output, checked before any work and again before a file is placed.

No output of any command may take the name of a file kept beside another one (a store's `.wal`
or `.lock`, a temporary `.X.new-XXXXXXXX`, an export's hidden working store:
`check_not_sidecar`, which every guard here, in `rmjudge.files.overwrite` and of the commands'
own outputs calls first).

A run's output (`rmjudge.store.outputs.check_output`, `rmjudge score`/`eval`, before a model
loads) is never the input itself nor a file a folder or glob input would read back
(`check_output_is_not_input`).

`rmjudge report`, `filter` and `jury` outputs (`guard_output`): a new file, or one the same
command wrote before, and nothing else. It refuses:
- a target whose rmjudge lock is held (a run writing it, or writing the Parquet/JSONL export
  of that name): `StoreBusyError`, exit 3;
- the judged table itself (real paths compared, so a symlink to it counts as it);
- a directory, and any DuckDB file (every rmjudge run store is one);
- any other existing file that `recognize` does not accept as written by the same command
  (report: the generator marker in its HTML; filter: a filter record beside it whose sha256
  matches the file).
Refusals are `OutputError` (exit 1), naming the file and the fix. The writers
(`write_file`, `write_query_file`) write a temporary file beside the target and run the check
again just before moving it into place.
"""

from __future__ import annotations

import os
from typing import Callable

from rmjudge.core.errors import UserError
from rmjudge.io.readers import split_duckdb_source
from rmjudge.files.errors import StoreError
from rmjudge.files.heads import is_duckdb_file
from rmjudge.files.locks import check_not_busy
from rmjudge.files.paths import output_format, sidecar, sidecar_role, store_path


def check_output_is_not_input(source: str, out: str) -> None:
    """Refuse an output (or a file it writes) that is the input itself, or that a folder or
    glob input would read back on a rerun."""
    check_not_sidecar(out)
    if not out or out.endswith(os.sep) or os.path.isdir(out):
        raise StoreError(f"-o {out!r} is not a file name; give one such as "
                         f"{os.path.join(out or '.', 'judged.duckdb')}")
    if not isinstance(source, str) or source == "-":  # stdin, or rows held in Python
        return
    if "://" not in source and (os.path.isdir(source) or any(c in source for c in "*?[")):
        import fnmatch

        written = [out, store_path(out)] + ([sidecar(out, "samples"), sidecar(out, "errors")]
                                            if output_format(out) != "duckdb" else [])
        for w in written:
            real = os.path.realpath(w)
            inside = (os.path.isdir(source)
                      and real.startswith(os.path.realpath(source).rstrip(os.sep) + os.sep))
            if inside or fnmatch.fnmatch(os.path.abspath(w), os.path.abspath(source)):
                raise StoreError(f"the output {w} would be read back as input by {source} on the "
                                 "next run; write it outside the input folder or glob")
        return
    duck = split_duckdb_source(source)
    src = os.path.realpath(duck[0] if duck else source)
    written = [out, store_path(out)]
    if output_format(out) != "duckdb":
        written += [sidecar(out, "samples"), sidecar(out, "errors")]
    for w in written:
        if os.path.realpath(w) == src:
            raise StoreError(f"the output {out} would overwrite the input {source}; choose "
                             "another -o")


class OutputError(UserError):
    """The output path holds something the command did not write; the message names the fix."""


def check_not_sidecar(out: str, flag: str = "-o") -> None:
    """Refuse an output named like a file kept beside another one (`paths.sidecar_role`: a
    store's `.wal` or `.lock`, a temporary, an export's working store), whatever is there now:
    every output guard of rmjudge calls this first."""
    role = sidecar_role(out)
    if role is not None:
        raise OutputError(f"{flag} {out}: that name is {role}, which an output there would "
                          f"break or lose; choose another {flag}")


def guard_output(output: str, table: str, command: str,
                 recognize: Callable[[str], bool], mark: str) -> None:
    """Refuse `output` unless it is new or an earlier output of `rmjudge COMMAND` (see the
    module docstring); `mark` says how such an output is recognized, for the message."""
    check_not_sidecar(output)
    check_not_busy(output)
    if store_path(output) != output:
        check_not_busy(store_path(output))
    leave = "it is left untouched: choose another -o"
    if os.path.realpath(output) == os.path.realpath(table):
        raise OutputError(f"{output} is the judged table {table} itself; `rmjudge {command}` "
                          f"never writes over it: choose another -o")
    if os.path.isdir(output):
        raise OutputError(f"{output} is a directory; give -o a file name")
    if not os.path.exists(output):
        return
    if is_duckdb_file(output):
        raise OutputError(f"{output} is a DuckDB file (an rmjudge run store or another "
                          f"database) that `rmjudge {command}` never writes over; {leave}")
    if not recognize(output):
        raise OutputError(f"{output} exists and was not written by `rmjudge {command}` "
                          f"({mark}); {leave}, or delete the file yourself if it is no longer "
                          "needed")
