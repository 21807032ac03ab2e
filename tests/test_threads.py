"""The thread default: the usable CPUs less the cores other processes keep busy *now*."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from rmjudge.engine import cpu_load

pytestmark = [pytest.mark.skipif(not os.path.exists("/proc/stat") or not hasattr(
    os, "sched_setaffinity"), reason="Linux only"), pytest.mark.alone]


def _until(measure, ok, tries: int = 40):
    """`measure()` again until `ok` holds, at most `tries` times (each takes busy_cores' 0.3 s
    window): these tests read what other processes do, and one outside this test run may keep a
    core busy for a few seconds (the other tests of the run wait: the `alone` mark; but a
    worker that has run its last test still exits beside them, and a CI run failed on a 3 s
    window). A wrong count fails every try: own work counted stays counted, and a lagging load
    average lags for a minute. A machine kept busy for the whole 12 s still fails them."""
    for _ in range(tries):
        value = measure()
        if ok(value):
            break
    return value


def _spinner(cpu: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    time.sleep(0.3)  # running, not starting
    return proc


def test_another_process_spinning_counts_as_a_busy_core():
    cpu = max(os.sched_getaffinity(0))
    proc = _spinner(cpu)
    try:
        assert cpu_load.busy_cores([cpu]) > 0.8
    finally:
        proc.kill()
        proc.wait()


def test_this_process_own_work_is_not_counted():
    cpu = max(os.sched_getaffinity(0))
    stop = threading.Event()

    def spin():
        os.sched_setaffinity(0, {cpu})  # this thread only
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.1)
        assert _until(lambda: cpu_load.busy_cores([cpu]), lambda busy: busy < 0.5) < 0.5
    finally:
        stop.set()
        t.join()


def test_default_threads_leaves_the_busy_cores_to_their_processes():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    procs = [_spinner(c) for c in cpus[:-1]]  # all but one CPU busy
    try:
        assert cpu_load.default_threads() == 1
    finally:
        for p in procs:
            p.kill()
            p.wait()
    # jobs that ended a moment ago no longer count (the 1-minute load average still would)
    assert _until(cpu_load.default_threads, lambda n: n == len(cpus)) == len(cpus)

