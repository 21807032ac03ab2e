"""One base class for every failure a user can fix, and the exit codes the CLIs use.

Library code raises a subclass of `UserError` whose message names the file and the fix; each CLI
group converts it once into one `Error: ...` line on stderr and the class's exit code. Anything
else escaping a command is a bug (and keeps its traceback).

Exit codes (the README's table is generated from the same values):

- 0: success.
- 1: a user error (bad option, unreadable input, output that cannot be written, ...).
- 2: `--strict` and some rows landed in `errors`.
- 3: the output is in use by another rmjudge process (its lock is held).
- 4: the disk is full or the output is not writable (the store is left resumable).
- 130: interrupted (Ctrl-C); the pairs judged so far are saved and a rerun resumes.
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
    EXIT_USER: "user error: the message names the file and the fix",
    EXIT_STRICT: "--strict and some rows landed in the errors table",
    EXIT_BUSY: "the output is being written by another rmjudge process",
    EXIT_DISK: "disk full or output not writable; free space and rerun to resume",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); rerun the same command to resume",
}


class UserError(Exception):
    """A failure the user can fix; `str(exc)` is the whole message (file and fix)."""

    exit_code = EXIT_USER


class BusyError(UserError):
    """Another process holds the lock of a file this command would write."""

    exit_code = EXIT_BUSY


class DiskError(UserError):
    """Writing failed for lack of space or permission."""

    exit_code = EXIT_DISK
