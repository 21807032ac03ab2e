"""The CPU thread default of the local engines: the usable CPUs less the cores other processes
keep busy *now* (sampled from /proc/stat, not the lagging load average)."""

from __future__ import annotations

import os
import time


def default_threads() -> int:
    """CPU threads when --threads is not given: the CPUs this process may use, less the cores
    other processes keep busy right now (`busy_cores`, rounded), at least one.

    llama.cpp's threads meet at a spinning barrier after every operation, so one thread that
    loses its core to another process stalls all the others: on 2 cores with one competing
    CPU-bound process, 2 threads kept 28% of their quiet throughput and 1 thread 95%, while on a
    quiet machine 2 threads are 1.8x as fast as 1 (docs/engine.md). So every core when the
    machine is quiet, and one thread fewer per busy core."""
    cpus = _usable_cpus()
    return max(1, len(cpus) - int(busy_cores(cpus) + 0.5))


def _usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _cpu_ticks(cpus: list[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks of the given CPUs since boot, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{c}" for c in cpus}
    busy = total = 0
    for line in lines:
        fields = line.split()
        if fields and fields[0] in wanted:
            # user nice system idle iowait irq softirq steal (guest time is inside user)
            ticks = [int(x) for x in fields[1:9]]
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - ticks[4]
    return (busy, total) if total else None


def busy_cores(cpus: list[int] | None = None, window: float = 0.3) -> float:
    """How many of `cpus` other processes keep busy: their CPU time over the next `window`
    seconds (this process's own time taken out), in cores.

    A sample of now, not the 1-minute load average, which lags by about a minute: right after
    another job ended it still reports a busy core (and the run would start with half the
    threads), and right after one started it reports none. Where /proc/stat is missing (not
    Linux) the load average is the fallback."""
    cpus = _usable_cpus() if cpus is None else cpus
    before, own_before, t0 = _cpu_ticks(cpus), _own_seconds(), time.monotonic()
    if before is None:
        try:
            return float(os.getloadavg()[0])
        except (AttributeError, OSError):
            return 0.0
    time.sleep(window)
    after, own_after, t1 = _cpu_ticks(cpus), _own_seconds(), time.monotonic()
    if after is None or after[1] <= before[1]:
        return 0.0
    share = (after[0] - before[0]) / (after[1] - before[1])  # busy fraction of these CPUs
    own = (own_after - own_before) / max(t1 - t0, 1e-6)  # cores this process used
    return max(0.0, share * len(cpus) - own)


class LoadFollower:
    """The thread count of a run whose `--threads` was not given, kept in step with the load
    while it runs: at most every `interval` seconds, the cores other processes kept busy since
    the last look (their CPU time on these CPUs from /proc/stat, this process's own taken out)
    decide it again, as `default_threads` decides it at the start. A job that starts beside a
    run then costs the run one thread instead of most of its speed (llama.cpp's threads spin at
    a barrier while one of them waits for its core), and the thread comes back when the job
    ends. Looking costs one read of /proc/stat and never sleeps. The thread count does not
    change a sample (docs/engine.md), so following the load changes only the time a run takes."""

    def __init__(self, threads: int, interval: float = 2.0):
        self.threads = threads
        self.interval = interval
        self.changes = 0
        self._cpus = _usable_cpus()
        self._mark = self._look()

    def _look(self) -> tuple[tuple[int, int] | None, float, float]:
        return _cpu_ticks(self._cpus), _own_seconds(), time.monotonic()

    def check(self) -> int | None:
        """The new thread count when the load since the last look asks for another one; None
        when it does not, when the last look is under `interval` old, or without /proc/stat."""
        if time.monotonic() - self._mark[2] < self.interval:
            return None
        (before, own_before, t0), (after, own_after, t1) = self._mark, self._look()
        self._mark = (after, own_after, t1)
        if before is None or after is None or after[1] <= before[1]:
            return None
        share = (after[0] - before[0]) / (after[1] - before[1])
        others = max(0.0, share * len(self._cpus) - (own_after - own_before) / max(t1 - t0, 1e-6))
        want = max(1, len(self._cpus) - int(others + 0.5))
        if want == self.threads:
            return None
        self.threads = want
        self.changes += 1
        return want


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system
