"""Helpers shared by CLI commands: error exit, busy checks, status lines; the progress
displays (rmjudge/runs/progress.py) are importable from here too."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click

from rmjudge.runs.progress import (ProgressLine, TerminalProgress,  # noqa: F401 - importable
                                  engine_activity, make_progress)  # here, as before
from rmjudge.core.errors import EXIT_INTERRUPTED, EXIT_USER, DiskError, UserError


def fail(message: str, code: int = EXIT_USER) -> NoReturn:
    """Stop the command with one clear error line (printed by `UserErrorGroup`)."""
    err = UserError(message)
    err.exit_code = code
    raise err


def report_user_error(exc: UserError) -> NoReturn:
    """One `Error: ...` line on stderr and the error's exit code; never a traceback."""
    click.echo(f"Error: {exc}", err=True)
    sys.exit(exc.exit_code)


def _usage_exit(exc: click.UsageError) -> None:
    """A usage error (unknown option, bad value, missing argument) exits 1 like every other
    user error; exit 2 is kept for `--strict` (rmjudge.core.errors.EXIT_CODES)."""
    exc.exit_code = EXIT_USER


class UserErrorGroup(click.Group):
    """A click group that turns every `UserError` of its commands into one `Error:` line and
    the documented exit code (rmjudge.core.errors), once for all commands; Click's usage errors
    keep Click's message and exit 1."""

    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:  # the group's own options
            _usage_exit(exc)
            raise

    def invoke(self, ctx: click.Context):
        try:
            if ctx.invoked_subcommand is not None and not {"--help", "-h"} & set(ctx.args):
                from rmjudge.files import check_platform

                check_platform()  # Windows: one line naming what is missing, before any work
            return super().invoke(ctx)
        except click.UsageError as exc:  # a subcommand's options and arguments
            _usage_exit(exc)
            raise
        except UserError as exc:
            report_user_error(exc)
        except (KeyboardInterrupt, RuntimeError) as exc:
            # a Ctrl-C outside a run (a run turns it into `Interrupted`), or DuckDB's form of
            # one during a query (RuntimeError)
            from rmjudge.core.interrupts import is_interrupt

            if not is_interrupt(exc):
                raise
            err = UserError("interrupted")
            err.exit_code = EXIT_INTERRUPTED
            report_user_error(err)


class ExtrasGroup(UserErrorGroup):
    """`UserErrorGroup` that also reports a missing optional extra (rmjudge.core.extras) as one
    `Error:` line (exit 1): the groups of `rmjudge-train` and `rmjudge-export`."""

    def invoke(self, ctx: click.Context):
        from rmjudge.core.extras import missing_extra

        try:
            return super().invoke(ctx)
        except ImportError as exc:
            sub = ctx.invoked_subcommand
            err = missing_extra(exc, f"{ctx.info_name} {sub}" if sub else str(ctx.info_name))
            if err is None:
                raise
            report_user_error(err)


def rewrite_failed(exc: DiskError, command: str, output: str) -> DiskError:
    """A disk error of a command that writes its whole output anew (`filter`, `report`): the
    store's advice to "rerun to resume" is wrong for it, so say what is true."""
    from rmjudge.files import sidecar_role

    if exc.path is None:
        return exc
    head = f"cannot write {exc.path}: {exc.reason}"
    if os.path.abspath(exc.path) == os.path.abspath(output) or sidecar_role(exc.path):
        # the output itself, or its lock or temporary, taken before the output is written
        head = f"cannot write {output}: {exc.reason}"
        fix = (f"nothing was written ({output} is as it was); free space or choose another -o, "
               f"then run `rmjudge {command}` again (it writes the whole file anew)")
    else:  # a file written after the output, e.g. filter's record of it
        fix = (f"{output} was written but {exc.path} was not: free space, delete {output}, "
               f"then run `rmjudge {command}` again")
    return DiskError(f"{head}; {fix}", path=exc.path, reason=exc.reason)


def check_not_being_written(table: str, command: str) -> None:
    """A TABLE that does not exist yet because a running `score` is still judging into it (the
    lock of its run store is held) is "busy" (exit 3), not "not found": a Parquet/JSONL export
    appears only when that run ends."""
    from rmjudge.files import StoreBusyError, check_not_busy, store_path

    if os.path.exists(table):
        return
    for p in dict.fromkeys((table, store_path(table))):
        try:
            check_not_busy(p)
        except StoreBusyError:
            raise StoreBusyError(
                f"{table} is not there yet: a running rmjudge job is writing it (it holds the "
                f"lock {p}.lock); wait for it to finish, then run `rmjudge {command}` again"
            ) from None
        except UserError:  # a lock file that cannot be opened proves nothing
            pass


def status(message: str, quiet: bool = False) -> None:
    """A note on stderr (the stream every command's summary goes to), wrapped to its width."""
    if not quiet:
        from rmjudge.cli.layout import echo

        echo(message, err=True)


def judge_input(source: str, output: str | None, opts, quiet: bool = False, engine=None):
    """Judge `source` into `output` (rmjudge.runs.setup.judge_input) with the progress display
    and the summary on stderr: `rmjudge score` and `eval` on unjudged input. Returns the
    Summary."""
    from rmjudge.runs import setup as run
    from rmjudge.runs.progress import run_display
    from rmjudge.runs.summaries import render_summary

    summary = run.judge_input(source, output, opts, engine=engine,
                              status=lambda line: status(line, quiet),
                              progress=None if quiet else run_display)
    if not quiet:
        click.echo(render_summary(summary), err=True)
    return summary
