"""Where `rmjudge report` and `rmjudge filter` may write: a new file, or one the same command
wrote before, and nothing else.

`guard_output` refuses, before any work and again just before the finished file is moved into
place:
- a target whose rmjudge lock is held (a run writing it, or writing the Parquet/JSONL export
  of that name): `StoreBusyError`, exit 3;
- the judged table itself (real paths compared, so a symlink to it counts as it);
- a directory, and any DuckDB file (every rmjudge run store is one);
- any other existing file that `recognize` does not accept as written by the same command
  (report: the generator marker in its HTML; filter: a filter record beside it whose sha256
  matches the file).
Refusals are `OutputError` (exit 1), naming the file and the fix. The store's writers
(`write_file`, `write_query_file`) write a temporary file beside the target and run the check
again just before moving it into place.
"""

from __future__ import annotations

import os
from typing import Callable

from rmjudge.errors import UserError
from rmjudge.store import is_duckdb_file


class OutputError(UserError):
    """The output path holds something the command did not write; the message names the fix."""


def guard_output(output: str, table: str, command: str,
                 recognize: Callable[[str], bool], mark: str) -> None:
    """Refuse `output` unless it is new or an earlier output of `rmjudge COMMAND` (see the
    module docstring); `mark` says how such an output is recognized, for the message."""
    from rmjudge.store import check_not_busy, store_path

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
