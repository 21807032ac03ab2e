"""The engine's thread count follows the load during a run (rmjudge.engine.cpu_load
LoadFollower), on a simulated clock and /proc/stat."""

from __future__ import annotations

from rmjudge.engine import cpu_load


def test_the_load_follower_gives_a_thread_up_to_a_job_and_takes_it_back(monkeypatch):
    """LoadFollower on 2 CPUs: another process busy on about one core since the last look
    costs the run a thread; when it ends the thread comes back; a look under `interval` old
    reads nothing; this process's own CPU time is never counted as another's."""
    clock = {"t": 100.0}
    ticks = {"busy": 0, "total": 0}
    own = {"s": 0.0}
    looks = []

    def fake_ticks(cpus):
        looks.append(clock["t"])
        return ticks["busy"], ticks["total"]

    monkeypatch.setattr(cpu_load, "_usable_cpus", lambda: [0, 1])
    monkeypatch.setattr(cpu_load, "_cpu_ticks", fake_ticks)
    monkeypatch.setattr(cpu_load, "_own_seconds", lambda: own["s"])
    monkeypatch.setattr(cpu_load.time, "monotonic", lambda: clock["t"])

    def spend(seconds, busy_cores, own_cores):  # 100 ticks per CPU second, 2 CPUs
        clock["t"] += seconds
        ticks["total"] += int(200 * seconds)
        ticks["busy"] += int(100 * seconds * (busy_cores + own_cores))
        own["s"] += own_cores * seconds

    f = cpu_load.LoadFollower(2, interval=2.0)
    spend(2.5, busy_cores=0.0, own_cores=2.0)  # quiet: the run alone keeps both cores busy
    assert f.check() is None and f.threads == 2
    spend(2.5, busy_cores=0.7, own_cores=1.3)  # a job takes about a core from the run
    assert f.check() == 1 and f.threads == 1
    n = len(looks)
    spend(1.0, busy_cores=1.0, own_cores=1.0)
    assert f.check() is None and len(looks) == n  # under `interval` since the last look
    spend(1.5, busy_cores=1.0, own_cores=1.0)
    assert f.check() is None and f.threads == 1  # the job still runs
    spend(2.5, busy_cores=0.1, own_cores=1.0)  # the job ended
    assert f.check() == 2 and f.threads == 2 and f.changes == 2
    monkeypatch.setattr(cpu_load, "_cpu_ticks", lambda cpus: None)  # no /proc/stat
    spend(2.5, busy_cores=1.0, own_cores=1.0)
    assert f.check() is None and f.threads == 2
