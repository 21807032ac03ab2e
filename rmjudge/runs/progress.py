"""Progress displays on stderr: rich's bar on a terminal, timestamped lines in a log; and the
time left (`Eta`), estimated from the work done against the work planned.

The time left shows once the first generations of a run finish (not its first pair: the
engine judges many pairs at once, so on a small input they all end together), and it moves with
the work: a run's work is counted in generated tokens. The work planned is the generations the
rows still to judge take (per pair: the average of the pairs judged so far, or before the
first one the plan: rollouts and reflections, both orders), each as long as the average
finished generation; the work done is every token generated so far, those of generations
still running included where the engine counts them (the llama.cpp engine). The time left is
the time judging took so far scaled by the work left over the work done; between two changes
of the work done it counts down with the clock.
"""

from __future__ import annotations

import sys
import time


def work_fraction(p, total: int | None, live_tokens: int = 0) -> float | None:
    """The share of the run's work done (0..1), from `p` (rmjudge.runs.pipeline.Progress)
    and the tokens generated so far in this run (`live_tokens`, those of running generations
    included); None until a generation has finished or without a row count."""
    fin = getattr(p, "finished", None)
    if not total or fin is None or not fin.generations:
        return None
    todo = total - p.skipped - p.errors  # the rows this run judges
    if todo <= 0:
        return 1.0
    per_pair = p.generations / p.done if p.done else p.planned_per_pair
    if per_pair <= 0:
        return None
    done = fin.generations
    if fin.tokens:  # in generations of the average length so far
        done = max(live_tokens, fin.tokens) / (fin.tokens / fin.generations)
    return min(done / (todo * per_pair), 1.0)


class Eta:
    """Seconds left of a run (see the module's docstring); `clock` is the time source of the
    pipeline's `Progress.started` (time.monotonic)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._last: tuple[float, float, float] | None = None  # (work done, seconds left, when)

    def __call__(self, p, total: int | None, live_tokens: int = 0) -> float | None:
        f = work_fraction(p, total, live_tokens) if p is not None else None
        if f is None:
            return None
        now = self.clock()
        if self._last is None or f != self._last[0]:
            elapsed = max(now - p.started, 0.0)
            self._last = (f, elapsed * (1.0 - f) / f if f > 0 else float("inf"), now)
        _, left, at = self._last
        return max(left - (now - at), 0.0)


def clock_text(seconds: float | None) -> str:
    """`h:mm:ss`, or `-:--:--` when unknown (as rich's columns write it)."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "-:--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


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
        self.eta = Eta()

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
        left = self.eta(p, self.total)
        if left is not None:
            line += f" | ETA {clock_text(left)}"
        if self.tty:
            sys.stderr.write("\r" + line[:160] + "\x1b[K")
        else:
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        sys.stderr.flush()

    def note(self, line: str) -> None:
        """A line of its own (wrapped to stderr's width), never glued to a progress line."""
        from rmjudge.core.layout import output_width, wrap

        if self.enabled and self.tty:
            sys.stderr.write("\r\x1b[K")
        sys.stderr.write(wrap(line, output_width(sys.stderr)) + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


class TerminalProgress:
    """Progress on a terminal with rich, on two lines: a bar with rows done of total, elapsed
    time and the time left (`Eta`: it shows once the first generations finish); under it the
    run's health (pairs/s, tok/s, parse failures, flips, errors), cut to the terminal's width
    so the bar line keeps its place at any width. Until the first pair is done, the second
    line shows the engine's live work (prompt tokens evaluated, tokens generated, tok/s) from
    `activity`, so a slow first pair still shows signs of life. Redrawn by rich's own thread
    several times a second, so the clock and the time left move even while a batch is in
    flight. `note` prints a line above the display."""

    def __init__(self, total: int | None, activity=None, console=None, clock=time.monotonic):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn,
                                   SpinnerColumn, TextColumn, TimeElapsedColumn)
        from rich.text import Text

        status_line, left = self.status_line, self.seconds_left

        class StatusLine:  # fitted to the width it is drawn at
            def __rich_console__(self, console, options):
                yield Text("  " + status_line(options.max_width - 2), no_wrap=True,
                           overflow="ellipsis")

        class TwoLines(Progress):
            def get_renderables(self):
                yield self.make_tasks_table(self.tasks)
                yield StatusLine()

        class TimeLeft(ProgressColumn):
            def render(self, task):
                return Text(clock_text(left()), style="progress.remaining")

        self.activity = activity
        self.total = total
        self.last = None  # the pipeline's Progress, from the latest callback
        self.started = clock()
        self.eta = Eta(clock)
        self._base = activity()[1] if activity is not None else 0  # tokens before this run
        self.progress = TwoLines(
            SpinnerColumn(), TextColumn("judging"), BarColumn(bar_width=None),
            MofNCompleteColumn(), TextColumn("rows"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeLeft(),
            console=console or Console(stderr=True), refresh_per_second=4, transient=False)
        self.task = self.progress.add_task("judging", total=total)
        self.progress.start()

    def seconds_left(self) -> float | None:
        """The run's time left now (`Eta`), None until the first generations finish."""
        live = self.activity()[1] - self._base if self.activity is not None else 0
        return self.eta(self.last, self.total, live)

    def status_line(self, width: int = 10**9) -> str:
        """The second line, at most `width` wide: whole figures only, the last ones left out
        where they do not fit (rich cuts it only below the width of its first figure)."""
        p = self.last
        if p is None or not (p.done or p.errors or p.skipped):
            return self._live_work(width)
        el = max(p.elapsed, 1e-9)
        pf = p.parse_failures / p.generations if p.generations else 0.0
        parts = [f"{p.done / el:.2f} pairs/s", f"{p.generated_tokens / el:.0f} tok/s",
                 f"parse fail {pf:.0%}", f"flips {p.flips}", f"errors {p.errors}"]
        return fitting([" | ".join(parts[:k]) for k in range(len(parts), 0, -1)], width)

    def _live_work(self, width: int = 10**9) -> str:
        if self.activity is None:
            return "judging the first pairs ..."
        prompt, generated = self.activity()
        el = max(time.monotonic() - self.started, 1e-9)
        head = f"first pairs in progress: {prompt:,} prompt tokens evaluated"
        return fitting([f"{head}, {generated:,} generated ({generated / el:.0f} tok/s)",
                        f"{head}, {generated:,} generated",
                        f"first pairs: {prompt:,} prompt tokens, {generated:,} generated"],
                       width)

    def __call__(self, p) -> None:
        self.last = p
        self.progress.update(self.task, completed=p.done + p.errors + p.skipped)

    def note(self, line: str) -> None:
        """A line above the progress display, on its own lines: wrapped at spaces to the
        terminal's width (a word is never cut)."""
        from rich.text import Text

        from rmjudge.core.layout import wrap

        console = self.progress.console
        console.print(Text(wrap(line, console.width)), soft_wrap=True)

    def close(self) -> None:
        self.progress.stop()


def fitting(candidates: list[str], width: int) -> str:
    """The first of `candidates` (longest first) at most `width` wide, else the last."""
    return next((c for c in candidates if len(c) <= width), candidates[-1])


def engine_activity(engine):
    """(prompt tokens evaluated, tokens generated) by `engine` so far, including the tokens of
    generations still running where the engine counts them (the llama.cpp engine's decode
    rows), for the progress display's live line."""
    def activity() -> tuple[int, int]:
        return engine.prompt_tokens_evaluated, max(engine.decode_rows, engine.generated_tokens)

    return activity


def make_progress(enabled: bool, total: int | None = None, activity=None):
    """The progress display for this stderr: rich on a terminal, timestamped lines in a log."""
    if enabled and sys.stderr.isatty():
        return TerminalProgress(total, activity)
    return ProgressLine(enabled, total, tty=False)


def run_display(total: int | None, engine):
    """The progress display of a run judged by `engine` (the `progress` hook of
    `runs.setup.judge_input` and `rank_input`): `rmjudge score`, `rank` and the Python API's
    `progress=True` show the same one."""
    return make_progress(True, total, activity=engine_activity(engine))
