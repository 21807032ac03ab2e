"""Helpers shared by CLI commands: error exit, progress."""

from __future__ import annotations

import sys
import time
from typing import NoReturn

import click

from rmjudge.errors import EXIT_INTERRUPTED, EXIT_USER, UserError


def fail(message: str, code: int = EXIT_USER) -> NoReturn:
    """Stop the command with one clear error line (printed by `UserErrorGroup`)."""
    err = UserError(message)
    err.exit_code = code
    raise err


def report_user_error(exc: UserError) -> NoReturn:
    """One `Error: ...` line on stderr and the error's exit code; never a traceback."""
    click.echo(f"Error: {exc}", err=True)
    sys.exit(exc.exit_code)


class UserErrorGroup(click.Group):
    """A click group that turns every `UserError` of its commands into one `Error:` line and
    the documented exit code (rmjudge.errors), once for all commands."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            report_user_error(exc)
        except KeyboardInterrupt:  # outside a run (a run turns it into `Interrupted`)
            err = UserError("interrupted")
            err.exit_code = EXIT_INTERRUPTED
            report_user_error(err)


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

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


class TerminalProgress:
    """Progress on a terminal with rich: rows done of total, rate, elapsed, ETA and the run's
    health (tok/s, parse failures, flips, errors). Redrawn by rich's own thread several times a
    second, so the clock moves even while a batch is in flight."""

    def __init__(self, total: int | None):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                   TextColumn, TimeElapsedColumn, TimeRemainingColumn)

        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("rows"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("{task.fields[health]}"),
            console=Console(stderr=True), refresh_per_second=4, transient=False)
        self.task = self.progress.add_task("judging", total=total, health="starting")
        self.progress.start()

    def __call__(self, p) -> None:
        el = max(p.elapsed, 1e-9)
        pf = p.parse_failures / p.generations if p.generations else 0.0
        health = (f"{p.done / el:.2f} pairs/s {p.generated_tokens / el:.0f} tok/s | parse fail "
                  f"{pf:.0%} | flips {p.flips} | errors {p.errors}")
        self.progress.update(self.task, completed=p.done + p.errors + p.skipped, health=health)

    def close(self) -> None:
        self.progress.stop()


def make_progress(enabled: bool, total: int | None = None):
    """The progress display for this stderr: rich on a terminal, timestamped lines in a log."""
    if enabled and sys.stderr.isatty():
        return TerminalProgress(total)
    return ProgressLine(enabled, total, tty=False)


def status(message: str, quiet: bool = False) -> None:
    """A one-line note on stderr (the stream every command's summary goes to)."""
    if not quiet:
        click.echo(message, err=True)
