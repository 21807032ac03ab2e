"""Ctrl-C at any moment of a run, including while llama.cpp loads the model and calls back into
Python (its log callback), ends the run the documented way: exit 130, one `Error:` line, no
"Exception ignored" from ctypes, and a store that a rerun resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from helpers import rows

from rmjudge.core.errors import EXIT_INTERRUPTED

ROOT = Path(__file__).parent.parent
PAIRS = str(Path(__file__).parent / "data" / "pandalm_5.jsonl")

# A C function (libc's qsort) calling back into Python many times, like llama.cpp's log
# callback while a model loads; SIGINT arrives while the callback runs.
QSORT = """
import ctypes, os, signal, sys, time
from rmjudge.core.interrupts import c_callback, graceful

libc = ctypes.CDLL(None)
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
calls = [0]

def compare(a, b):
    calls[0] += 1
    if calls[0] == 1000:
        os.kill(os.getpid(), signal.SIGINT)
    return a[0] - b[0]

if sys.argv[1] == "marked":
    c_callback(compare)
n = 20000
values = (ctypes.c_int * n)(*range(n, 0, -1))
with graceful():
    try:
        libc.qsort(values, n, ctypes.sizeof(ctypes.c_int), CMP(compare))
        time.sleep(0.3)  # a signal still pending is handled at once, inside this sleep
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print(f"interrupted after sorting: {list(values[:3])}", flush=True)
"""


def test_a_signal_inside_a_c_callback_is_delivered_after_it_returns():
    r = subprocess.run([sys.executable, "-c", QSORT, "marked"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.stdout == "interrupted after sorting: [1, 2, 3]\n", (r.stdout, r.stderr)
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr


def test_without_the_mark_ctypes_drops_the_interrupt():
    """What the mark prevents: the KeyboardInterrupt raised in the callback is printed and
    dropped by ctypes, and the run, thinking it is already stopping, goes on."""
    r = subprocess.run([sys.executable, "-c", QSORT, "unmarked"], capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert r.stdout == "not interrupted\n"
    assert "Exception ignored on calling ctypes callback function" in r.stderr


JOB_RUN_AT_IMPORT = """
import os, signal, time
from rmjudge.core.interrupts import graceful

with graceful():
    t0 = time.monotonic()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        while time.monotonic() - t0 < 20:
            pass
        print("not interrupted")
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - t0:.1f} s")
"""


def test_a_program_that_runs_inside_an_import_is_still_interrupted(tmp_path):
    """Signals inside an import wait for it to finish, but not forever."""
    from rmjudge.core.interrupts import IMPORT_WAIT_SECONDS

    (tmp_path / "job.py").write_text(JOB_RUN_AT_IMPORT)
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = [{str(ROOT)!r}, "
                        f"{str(tmp_path)!r}]; import job"], capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.startswith("interrupted after "), (r.stdout, r.stderr)
    waited = float(r.stdout.split()[2])
    assert IMPORT_WAIT_SECONDS <= waited < IMPORT_WAIT_SECONDS + 3


def test_graceful_nests_and_restores_the_handlers():
    from rmjudge.core.interrupts import graceful

    before = signal.getsignal(signal.SIGINT)
    with graceful():
        outer = signal.getsignal(signal.SIGINT)
        with graceful():
            assert signal.getsignal(signal.SIGINT) is outer
        assert signal.getsignal(signal.SIGINT) is outer  # the inner one left it installed
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("after,delay", [("loading the judge", 0.0),
                                         ("input read as", 0.0), ("input read as", 0.1),
                                         ("input read as", 0.3), ("input read as", 0.5),
                                         ("input read as", 0.8)])
def test_ctrl_c_in_the_first_second_of_a_run_ends_it_with_130(tmp_path, model_path, after,
                                                              delay):
    """SIGINT `delay` seconds after a line of the run: while the model loads, while the store
    opens, while llama.cpp sets up its context (its log callback runs: before the fix, the
    Ctrl-C was dropped there and the run finished with exit 0), or as judging starts."""
    out = str(tmp_path / "o.duckdb")
    args = [sys.executable, "-m", "rmjudge", "score", PAIRS, "-o", out, "--samples", "1",
            "--max-tokens", "8", "--threads", "1", "--model", model_path]
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    seen = ""
    while True:
        line = p.stderr.readline()
        seen += line
        assert line, seen
        if line.startswith(f"rmjudge: {after}"):
            break
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    err = seen + p.communicate(timeout=120)[1]
    assert p.returncode == EXIT_INTERRUPTED, err
    assert "Exception ignored" not in err and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: interrupted") and "rerun the same command" in last, err
    if os.path.exists(out):  # a run that had started is recorded as interrupted
        con = duckdb.connect(out, read_only=True)
        try:
            tables = {r[0] for r in
                      con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
            statuses = ({r[0] for r in con.execute("SELECT status FROM runs").fetchall()}
                        if "runs" in tables else set())
        finally:
            con.close()
        assert statuses <= {"interrupted"}, statuses


def test_a_signal_held_while_the_run_is_recorded_stops_it_before_any_generation(tmp_path,
                                                                                monkeypatch):
    """Ctrl-C while the store records the run (a critical section) is delivered as judging
    starts, not after the first pair is judged (which can take minutes)."""
    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.core.interrupts import critical
    from rmjudge.runs.pipeline import Interrupted, score
    from rmjudge.core.settings import JudgeSettings
    from rmjudge.store import Store
    from test_score import length_judge

    start_run = Store.start_run

    def start_run_then_ctrl_c(self, info):
        run_id = start_run(self, info)
        with critical():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here, inside the section: the signal is held
        return run_id

    monkeypatch.setattr(Store, "start_run", start_run_then_ctrl_c)
    engine = ScriptedEngine(length_judge)
    out = str(tmp_path / "o.duckdb")
    with pytest.raises(Interrupted, match="0 judged pairs are saved"):
        score(PAIRS, engine, JudgeSettings(samples=2), output=out)
    assert engine.calls == []
    assert rows(out, "SELECT status FROM runs") == [("interrupted",)]


def test_a_signal_while_duckdb_creates_the_store_is_held_not_a_duckdb_error(tmp_path,
                                                                            monkeypatch):
    """Ctrl-C while DuckDB executes the store's first statements (right after "input read
    as"): DuckDB would turn a KeyboardInterrupt raised inside its query into `RuntimeError:
    Query interrupted`, a traceback; the signal is held and the run stops the documented way."""
    import threading

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.core.interrupts import graceful
    from rmjudge.runs.pipeline import Interrupted, score
    from rmjudge.core.settings import JudgeSettings
    from rmjudge.store import Store
    from test_score import length_judge

    create = Store._create_tables

    def create_during_ctrl_c(self):
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        self.con.execute("SELECT sum(hash(range)) FROM range(400000000)").fetchone()  # lands here
        create(self)

    monkeypatch.setattr(Store, "_create_tables", create_during_ctrl_c)
    engine = ScriptedEngine(length_judge)
    out = str(tmp_path / "o.duckdb")
    with graceful(), pytest.raises(Interrupted):
        score(PAIRS, engine, JudgeSettings(samples=2), output=out)
    assert engine.calls == []
    assert rows(out, "SELECT status FROM runs") == [("interrupted",)]


def test_a_ctrl_c_delivered_as_the_judge_finishes_loading_ends_the_run_with_the_resume_hint(
        tmp_path, monkeypatch):
    """A Ctrl-C held while llama.cpp loaded the judge (inside a C callback) is delivered when
    the load returns, outside the loader's own handling: the run still ends with exit 130 and
    the resume hint, not a bare "interrupted"."""
    from click.testing import CliRunner

    import rmjudge.runs.setup
    from rmjudge.cli import main

    def loaded_then_interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # as a held signal arrives once the load has returned

    monkeypatch.setattr(rmjudge.runs.setup, "load_judge_engine", loaded_then_interrupted)
    r = CliRunner().invoke(main, ["score", PAIRS, "-o", str(tmp_path / "o.duckdb")])
    assert r.exit_code == EXIT_INTERRUPTED, r.output
    lines = r.output.strip().splitlines()
    assert lines == ["Error: interrupted; no judged pair is lost: rerun the same command to "
                     "resume"], r.output


def _long_query_during_ctrl_c(con) -> None:
    """A DuckDB query (about 0.3 s) with SIGINT arriving 50 ms into it."""
    import threading

    threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
    con.execute("SELECT sum(hash(range)) FROM range(100000000)").fetchone()


def test_a_signal_while_the_store_lists_its_judged_pairs_ends_the_run_as_interrupted(
        tmp_path, monkeypatch):
    """Ctrl-C while the store reads what earlier runs judged (the query after "input read as";
    DuckDB 2 turned the KeyboardInterrupt into `RuntimeError: Query interrupted`, a traceback
    and exit 1): held, then delivered as judging starts; the run is recorded as interrupted."""
    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.core.interrupts import graceful
    from rmjudge.runs.pipeline import Interrupted, score
    from rmjudge.core.settings import JudgeSettings
    from rmjudge.store import Store
    from test_score import length_judge

    judged = Store.judged

    def judged_during_ctrl_c(self):
        _long_query_during_ctrl_c(self.con)
        return judged(self)

    monkeypatch.setattr(Store, "judged", judged_during_ctrl_c)
    engine = ScriptedEngine(length_judge)
    out = str(tmp_path / "o.duckdb")
    with graceful(), pytest.raises(Interrupted, match="0 judged pairs are saved"):
        score(PAIRS, engine, JudgeSettings(samples=2), output=out)
    assert engine.calls == []
    assert rows(out, "SELECT status FROM runs") == [("interrupted",)]


def test_a_signal_during_a_held_duckdb_call_arrives_as_the_call_returns():
    """Through `held_calls`, the query finishes and the KeyboardInterrupt follows it; without
    it, DuckDB stops the query with its own error, which `is_query_interrupt` recognises."""
    from rmjudge.core.interrupts import graceful, held_calls, is_query_interrupt

    con = duckdb.connect()
    try:
        with graceful():
            with pytest.raises(KeyboardInterrupt):
                _long_query_during_ctrl_c(held_calls(con))
        with graceful():
            with pytest.raises(RuntimeError) as caught:
                _long_query_during_ctrl_c(con)
        assert is_query_interrupt(caught.value)
        with graceful():  # the handlers' state was reset: a call with no signal returns
            assert held_calls(con).execute("SELECT 42").fetchone() == (42,)
    finally:
        con.close()
    assert not is_query_interrupt(RuntimeError("some other failure"))


def test_a_query_interrupted_inside_a_run_ends_it_as_interrupted_with_its_pairs_kept(tmp_path):
    """DuckDB's form of a Ctrl-C raised inside a run (a streaming caller's query in
    `on_commit`) stops the run as an interrupt: the committed pairs kept, the run recorded as
    interrupted, not failed."""
    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import Interrupted, score
    from rmjudge.core.settings import JudgeSettings
    from test_score import length_judge

    def on_commit(store, ids, error_rows):
        raise RuntimeError("Query interrupted")

    out = str(tmp_path / "o.duckdb")
    with pytest.raises(Interrupted, match="1 judged pair is saved"):
        score(PAIRS, ScriptedEngine(length_judge), JudgeSettings(samples=2), output=out,
              commit_every=1, on_commit=on_commit)
    assert rows(out, "SELECT status FROM runs") == [("interrupted",)]
    assert rows(out, "SELECT count(*) FROM pairs") == [(1,)]


def test_a_query_interrupted_outside_a_run_is_one_error_line_and_exit_130(tmp_path,
                                                                          monkeypatch):
    """`rmjudge view`/`filter`/`eval` run DuckDB queries outside a run: a Ctrl-C there ends the
    command with exit 130 and one `Error: interrupted` line, not a RuntimeError traceback."""
    from click.testing import CliRunner

    import rmjudge.analysis.eval_run
    from rmjudge.cli import main
    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score
    from rmjudge.core.settings import JudgeSettings
    from test_score import length_judge

    out = str(tmp_path / "o.duckdb")
    score(PAIRS, ScriptedEngine(length_judge), JudgeSettings(samples=2), output=out)

    def interrupted(*args, **kwargs):
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(rmjudge.analysis.eval_run, "evaluate", interrupted)
    r = CliRunner().invoke(main, ["eval", out])
    assert r.exit_code == EXIT_INTERRUPTED, r.output
    assert r.output.strip().splitlines() == ["Error: interrupted"], r.output
