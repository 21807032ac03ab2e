"""The lock file beside a store (`X.lock`) exists only while a process holds it: a clean run
leaves none behind; a lock another process holds is never removed (nor taken); a process that
opened the lock file just before its holder removed it ends up holding the new one, never a
removed file; and a killed process's empty lock file is removed by the next one that takes or
checks it (rmjudge/files/locks.py)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import judge_with, quality_engine

from rmjudge.cli import main
from rmjudge.core.errors import EXIT_BUSY
from rmjudge.files import StoreBusyError, check_not_busy
from rmjudge.files import locks
from rmjudge.files.locks import Lock


def pairs_file(tmp_path: Path) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f'{{"id": "p{i}", "prompt": "q{i}", "chosen": "answer q=9", '
                            f'"rejected": "answer q=1"}}\n' for i in range(3)))
    return str(path)


def lock_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.lock"))


@pytest.mark.parametrize("name", ["out.duckdb", "out.parquet"])
def test_a_clean_run_leaves_no_lock_file(tmp_path, monkeypatch, name):
    judge_with(monkeypatch, quality_engine)
    out = tmp_path / name
    r = CliRunner().invoke(main, ["score", pairs_file(tmp_path), "-o", str(out), "--samples", "2"])
    assert r.exit_code == 0, r.output
    assert out.exists() and lock_files(tmp_path) == []
    # the readers take and check the same locks, and leave none either
    for args in (["eval", str(out)], ["report", str(out), "-o", str(tmp_path / "r.html")],
                 ["filter", str(out), "-o", str(tmp_path / "f.jsonl")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        assert lock_files(tmp_path) == [], args


def test_a_run_that_fails_leaves_no_lock_file(tmp_path, monkeypatch):
    def broken():
        raise RuntimeError("the engine broke")

    judge_with(monkeypatch, lambda: quality_engine(pairs_in_flight=1))
    import rmjudge.engine.fake as fake

    monkeypatch.setattr(fake.ScriptedEngine, "generate", lambda self, requests: broken())
    out = tmp_path / "out.duckdb"
    r = CliRunner().invoke(main, ["score", pairs_file(tmp_path), "-o", str(out)])
    assert r.exit_code != 0
    assert lock_files(tmp_path) == []


HOLD = """
import fcntl, sys, time
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def hold_in_another_process(path: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, path], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_another_process_holds_is_neither_taken_nor_removed(tmp_path, monkeypatch):
    judge_with(monkeypatch, quality_engine)
    out = tmp_path / "out.duckdb"
    holder = hold_in_another_process(str(out) + ".lock")
    try:
        inode = os.stat(str(out) + ".lock").st_ino
        r = CliRunner().invoke(main, ["score", pairs_file(tmp_path), "-o", str(out)])
        assert r.exit_code == EXIT_BUSY, r.output
        with pytest.raises(StoreBusyError):
            check_not_busy(str(out))  # a reader's check: busy, and the file stays
        assert os.stat(str(out) + ".lock").st_ino == inode
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    # once the holder is gone (killed: its empty file stays), the next run takes the lock and
    # removes the stale file when it ends
    assert os.path.exists(str(out) + ".lock")
    r = CliRunner().invoke(main, ["score", pairs_file(tmp_path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert lock_files(tmp_path) == []


def test_a_taker_that_opened_the_file_before_its_holder_removed_it_takes_a_new_one(
        tmp_path, monkeypatch):
    """The race: B opens `X.lock` while A holds it; A releases (removing the file while still
    holding it) before B's `flock`. B's `flock` then succeeds on the removed file: B must see
    that and take the lock on a new file at the name, which a third process then finds held."""
    target = str(tmp_path / "x.duckdb")
    a = Lock(target)
    real_flock = fcntl.flock
    calls = []

    def flock(f, op):
        calls.append(op)
        if len(calls) == 1:  # B's first flock: A lets go just before it
            assert os.path.exists(target + ".lock")
            a.release()
            assert not os.path.exists(target + ".lock")
        return real_flock(f, op)

    monkeypatch.setattr(locks.fcntl, "flock", flock)
    b = Lock(target)
    monkeypatch.setattr(locks.fcntl, "flock", real_flock)
    try:
        assert os.path.exists(target + ".lock")
        assert os.stat(target + ".lock").st_ino == os.fstat(b._f.fileno()).st_ino
        with pytest.raises(StoreBusyError):
            Lock(target)  # B really holds the lock that the name links to
    finally:
        b.release()
    assert not os.path.exists(target + ".lock")


def test_release_leaves_a_name_that_no_longer_links_to_its_file(tmp_path):
    """A name that another process has since replaced (or a link to the lock file) is not this
    lock's file: releasing leaves it alone."""
    target = str(tmp_path / "x.duckdb")
    a = Lock(target)
    os.unlink(target + ".lock")  # as a clean-up of a temporary's lock does, while held
    Path(target + ".lock").write_text("")  # someone else's file at the name now
    inode = os.stat(target + ".lock").st_ino
    a.release()
    assert os.stat(target + ".lock").st_ino == inode

    real = tmp_path / "elsewhere.lock"
    real.write_text("")
    os.unlink(target + ".lock")
    os.symlink(real, target + ".lock")
    Lock(target).release()
    assert os.path.islink(target + ".lock") and real.exists()


def test_a_stale_lock_file_is_removed_by_the_next_check(tmp_path):
    target = str(tmp_path / "x.duckdb")
    Path(target + ".lock").write_text("")  # a killed process's, held by no one
    check_not_busy(target)
    assert not os.path.exists(target + ".lock")


def test_many_processes_taking_one_lock_never_hold_it_together(tmp_path):
    """Four processes take and release the lock of one file in a loop, each writing its pid
    to a shared file while it holds the lock and checking that nobody else's is there: the
    removal of the lock file on release never lets two processes hold it at once."""
    target = str(tmp_path / "x.duckdb")
    probe = tmp_path / "holder"
    script = f"""
import os, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from rmjudge.files.locks import Lock
from rmjudge.files import StoreBusyError
held = 0
deadline = time.monotonic() + 2
while time.monotonic() < deadline:
    try:
        lock = Lock({target!r})
    except StoreBusyError:
        time.sleep(0.0005)
        continue
    with open({str(probe)!r}, "a") as f:
        f.write(f"+{{os.getpid()}}\\n")
    time.sleep(0.001)
    with open({str(probe)!r}, "a") as f:
        f.write(f"-{{os.getpid()}}\\n")
    lock.release()
    held += 1
print(held)
"""
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    held = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert all(h > 0 for h in held), held
    events = probe.read_text().split()
    assert len(events) == 2 * sum(held)
    for i in range(0, len(events), 2):  # each hold is an enter and its own exit, never nested
        assert events[i][0] == "+" and events[i + 1] == "-" + events[i][1:], events[i:i + 2]
    assert not os.path.exists(target + ".lock")
