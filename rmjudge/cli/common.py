"""Helpers shared by CLI commands: error exit, progress."""

from __future__ import annotations

import sys
import time
from typing import NoReturn

import click


def fail(message: str, code: int = 1) -> NoReturn:
    """One clear error line on stderr and a non-zero exit; never a traceback."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


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
