"""Helpers shared by CLI commands: error exit, progress."""

from __future__ import annotations

import os
import sys
import time
from typing import NoReturn

import click

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


class ProgressLine:
    """Progress on stderr: one self-overwriting line on a terminal; in a log file (a batch job,
    `nohup`, a pipe) a plain timestamped line every `log_interval` seconds instead, so a long
    run can be followed with `tail -f`."""

    def __init__(self, enabled: bool, total: int | None = None, *,
                 tty: bool | None = None, log_interval: float = 60.0):
        self.enabled = enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.total = total
        self.interval = 0.5 if self.tty else log_interval
        self._last = time.monotonic() if not self.tty else 0.0

    def __call__(self, p) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        el = max(p.elapsed, 1e-9)
        finished = p.done + p.errors + p.skipped
        done = f"{finished}/{self.total} rows" if self.total else f"{finished} rows"
        pf = p.parse_failures / p.generations if p.generations else 0.0
        line = (f"{done} | {p.done / el:.2f} pairs/s | {p.generated_tokens / el:.0f} tok/s"
                f" | parse fail {pf:.0%} | flips {p.flips} | errors {p.errors}")
        if self.tty:
            sys.stderr.write("\r" + line[:160] + "\x1b[K")
        else:
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        sys.stderr.flush()

    def note(self, line: str) -> None:
        """A line of its own, never glued to a progress line."""
        if self.enabled and self.tty:
            sys.stderr.write("\r\x1b[K")
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


class TerminalProgress:
    """Progress on a terminal with rich, on two lines: a bar with rows done of total, elapsed
    time and ETA; under it the run's health (pairs/s, tok/s, parse failures, flips, errors),
    cut to the terminal's width so the bar line keeps its place at any width. Until the first
    pair is done, the second line shows the engine's live work (prompt tokens evaluated,
    tokens generated, tok/s) from `activity`, so a slow first pair still shows signs of life.
    Redrawn by rich's own thread several times a second, so the clock moves even while a batch
    is in flight. `note` prints a line above the display."""

    def __init__(self, total: int | None, activity=None, console=None):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                   TextColumn, TimeElapsedColumn, TimeRemainingColumn)
        from rich.text import Text

        status_line = self.status_line

        class TwoLines(Progress):
            def get_renderables(self):
                yield self.make_tasks_table(self.tasks)
                yield Text("  " + status_line(), no_wrap=True, overflow="ellipsis")

        self.activity = activity
        self.last = None  # the pipeline's Progress, from the latest callback
        self.started = time.monotonic()
        self.progress = TwoLines(
            SpinnerColumn(), TextColumn("judging"), BarColumn(bar_width=None),
            MofNCompleteColumn(), TextColumn("rows"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console or Console(stderr=True), refresh_per_second=4, transient=False)
        self.task = self.progress.add_task("judging", total=total)
        self.progress.start()

    def status_line(self) -> str:
        p = self.last
        if p is None or not (p.done or p.errors or p.skipped):
            return self._live_work()
        el = max(p.elapsed, 1e-9)
        pf = p.parse_failures / p.generations if p.generations else 0.0
        return (f"{p.done / el:.2f} pairs/s | {p.generated_tokens / el:.0f} tok/s | parse fail "
                f"{pf:.0%} | flips {p.flips} | errors {p.errors}")

    def _live_work(self) -> str:
        if self.activity is None:
            return "judging the first pairs ..."
        prompt, generated = self.activity()
        el = max(time.monotonic() - self.started, 1e-9)
        return (f"first pairs in progress: {prompt:,} prompt tokens evaluated, {generated:,} "
                f"generated ({generated / el:.0f} tok/s)")

    def __call__(self, p) -> None:
        self.last = p
        self.progress.update(self.task, completed=p.done + p.errors + p.skipped)

    def note(self, line: str) -> None:
        """A line above the progress display, on its own line."""
        from rich.text import Text

        self.progress.console.print(Text(line), soft_wrap=True)

    def close(self) -> None:
        self.progress.stop()


def engine_activity(engine):
    """(prompt tokens evaluated, tokens generated) by `engine` so far, including the tokens of
    generations still running where the engine counts them (the llama.cpp engine's decode
    rows), for the progress display's live line."""
    def activity() -> tuple[int, int]:
        generated = max(getattr(engine, "decode_rows", 0) or 0, engine.generated_tokens)
        return getattr(engine, "prompt_tokens_evaluated", 0) or 0, generated

    return activity


def make_progress(enabled: bool, total: int | None = None, activity=None):
    """The progress display for this stderr: rich on a terminal, timestamped lines in a log."""
    if enabled and sys.stderr.isatty():
        return TerminalProgress(total, activity)
    return ProgressLine(enabled, total, tty=False)


def status(message: str, quiet: bool = False) -> None:
    """A one-line note on stderr (the stream every command's summary goes to)."""
    if not quiet:
        click.echo(message, err=True)
