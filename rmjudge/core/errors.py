"""One base class for every failure a user can fix, and the exit codes the CLIs use.

Library code raises a subclass of `UserError` whose message names the file and the fix; each CLI
group converts it once into one `Error: ...` line on stderr and the class's exit code. Anything
else escaping a command is a bug (and keeps its traceback).

Exit codes (`EXIT_CODES` is the single source: the README's table is `exit_code_table()`, which
tests/test_cli_output.py checks):

- 0: success.
- 1: a user error: a bad option or argument (Click's usage errors included), unreadable input,
  an output that cannot be written, ...
- 2: `--strict` and some rows landed in `errors` (no other failure exits 2).
- 3: the output is in use by another rmjudge process (its lock is held).
- 4: the disk is full or the output is not writable (the store is left resumable).
- 130: interrupted (Ctrl-C or SIGTERM); the pairs judged so far are saved and a rerun resumes.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_USER = 1
EXIT_STRICT = 2
EXIT_BUSY = 3
EXIT_DISK = 4
EXIT_INTERRUPTED = 130

EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_USER: "user error: a bad option or argument, unreadable input, an output that cannot "
               "be written (the one `Error:` line names the file and the fix)",
    EXIT_STRICT: "`--strict` and some rows landed in the errors table",
    EXIT_BUSY: "a file the command reads or writes is being written by another rmjudge process "
               "(its lock is held); wait for it to finish",
    EXIT_DISK: "disk full or output not writable (free space and rerun the same command to "
               "resume)",
    EXIT_INTERRUPTED: "interrupted with Ctrl-C or SIGTERM (the judged pairs are saved; rerun the "
                      "same command to resume)",
}


def exit_code_table() -> str:
    """The README's exit-code table (Markdown), from `EXIT_CODES`."""
    rows = [f"| {code} | {meaning} |" for code, meaning in EXIT_CODES.items()]
    return "\n".join(["| code | meaning |", "|---|---|", *rows])


class UserError(Exception):
    """A failure the user can fix; `str(exc)` is the whole message (file and fix)."""

    exit_code = EXIT_USER


class BusyError(UserError):
    """Another process holds the lock of a file this command would write."""

    exit_code = EXIT_BUSY


class DiskError(UserError):
    """Writing failed for lack of space or permission. `path` and `reason` (e.g. "No space
    left on device"), when known, let a command restate the fix in its own terms."""

    exit_code = EXIT_DISK

    def __init__(self, message: str, *, path: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.path = path
        self.reason = reason


class ModelError(UserError):
    """The model cannot be used; the message says how to fix it."""
