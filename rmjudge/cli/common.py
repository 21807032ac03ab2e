"""Helpers shared by CLI commands: error exit, terminal progress."""

from __future__ import annotations

import sys
from typing import NoReturn

import click


def fail(message: str, code: int = 1) -> NoReturn:
    """One clear error line on stderr and a non-zero exit; never a traceback."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


class ProgressLine:
    """A single self-overwriting status line on stderr, shown only on a terminal."""

    def __init__(self, enabled: bool, total: int | None = None):
        self.enabled = enabled and sys.stderr.isatty()
        self.total = total
        self._last = 0.0

    def __call__(self, p) -> None:
        if not self.enabled:
            return
        import time

        now = time.monotonic()
        if now - self._last < 0.5:
            return
        self._last = now
        el = max(p.elapsed, 1e-9)
        finished = p.done + p.errors + p.skipped
        done = f"{finished}/{self.total} rows" if self.total else f"{finished} rows"
        pf = p.parse_failures / p.generations if p.generations else 0.0
        line = (f"\r{done} | {p.done / el:.2f} pairs/s | {p.generated_tokens / el:.0f} tok/s"
                f" | parse fail {pf:.0%} | flips {p.flips} | errors {p.errors}")
        sys.stderr.write(line[:160] + "\x1b[K")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()
