"""Where the test suite's time goes, from the per-test log that tests/conftest.py writes with
RMJUDGE_TEST_TIMELOG=FILE (docs/development.md, "The suite's time"):

    RMJUDGE_TEST_TIMELOG=/tmp/suite.jsonl python -m pytest -q -rs
    python benchmarks/suite_time.py /tmp/suite.jsonl

Prints per worker its tests, the wall time it was busy, the CPU its tests used and when it
ran its last test (a worker that ends early beside a busy one is idle time of the run); per
xdist group the CPU it used; and the tests that used the most CPU. CPU is the worker's own
(every thread) plus the subprocesses it waited for; a server started by a module fixture is
counted in the test whose teardown stops it."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str, top: int = 20) -> None:
    tests, other = [], 0
    for line in open(path):
        try:
            tests.append(json.loads(line))
        except ValueError:  # a line a subprocess of some test wrote to an inherited descriptor
            other += 1
    if other:
        print(f"({other} lines of {path} are not test records; skipped)")
    if not tests:
        sys.exit(f"{path}: no test logged")
    t0 = min(t["start"] for t in tests)
    end = max(t["end"] for t in tests)
    print(f"{len(tests)} tests, first start to last end: {end - t0:.0f} s")
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for t in tests:
        by_worker[t["worker"]].append(t)
    for w, ts in sorted(by_worker.items()):
        busy = sum(t["end"] - t["start"] for t in ts)
        cpu = sum(t["cpu"] + t["child_cpu"] for t in ts)
        last = max(t["end"] for t in ts) - t0
        print(f"  {w}: {len(ts)} tests, busy {busy:.0f} s, CPU {cpu:.0f} s, last test ended at "
              f"{last:.0f} s (idle {end - t0 - last:.0f} s at the end)")
    groups: dict[str, float] = defaultdict(float)
    for t in tests:
        groups[t["group"] or "(no group)"] += t["cpu"] + t["child_cpu"]
    print("CPU per group:")
    for g, cpu in sorted(groups.items(), key=lambda x: -x[1]):
        print(f"  {cpu:7.1f} s  {g}")
    print(f"the {top} tests that used the most CPU:")
    for t in sorted(tests, key=lambda t: -(t["cpu"] + t["child_cpu"]))[:top]:
        print(f"  {t['cpu'] + t['child_cpu']:7.1f} s CPU {t['end'] - t['start']:7.1f} s wall  "
              f"{t['worker']}  {t['id'].split('@')[0]}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
