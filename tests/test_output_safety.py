"""`rmjudge report -o` and `rmjudge filter -o` write only new files or their own earlier
outputs: never the input dataset, the judged table, a run store (above all one a run is still
writing) or any file they did not create; and `eval`/`report`/`filter` on a store a run is
writing stop with exit 3 and one line. Judged tables come from `analysis_fixture` (scripted
judge, no model)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from analysis_fixture import FIXTURE, build
from click.testing import CliRunner

import rmjudge.files.atomic as atomic_files
from rmjudge.analysis.report import GENERATOR
from rmjudge.cli import main
from rmjudge.core.errors import EXIT_BUSY, EXIT_USER
from rmjudge.analysis.filter_record import record_path
from rmjudge.files import store_path
from rmjudge.store import Store


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """A judged store, and its input beside it (`pairs.jsonl` -> `pairs.judged.duckdb`)."""
    d = tmp_path_factory.mktemp("judged")
    shutil.copy(FIXTURE, d / "pairs.jsonl")
    return build(d, "pairs.judged.duckdb")


def _digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _pairs(path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM pairs").fetchone()[0]
    finally:
        con.close()


def _run(*args):
    return CliRunner().invoke(main, list(args))


def _one_error_line(r, *needles):
    assert r.output.count("\n") == 1 and r.output.startswith("Error: "), r.output
    assert "Traceback" not in r.output
    for n in needles:
        assert n in r.output, r.output


def _no_temporaries(folder) -> None:
    left = [p.name for p in Path(folder).iterdir() if ".new-" in p.name or ".tmp" in p.name]
    assert not left, left


@pytest.fixture()
def live(tmp_path):
    """A run store in `tmp_path` whose lock is held, as while `rmjudge score` writes it."""
    path = tmp_path / "live.duckdb"
    build(tmp_path, "live.duckdb")
    store = Store(str(path))
    yield path, store
    store.close()


# -- filter -o ---------------------------------------------------------------------------------

def test_filter_refuses_to_write_over_the_input_dataset(judged):
    src = Path(judged).parent / "pairs.jsonl"
    before = _digest(src)
    r = _run("filter", judged, "-o", str(src), "--allow-inconsistent")
    assert r.exit_code == EXIT_USER
    _one_error_line(r, str(src), "not written by `rmjudge filter`", "choose another -o")
    assert _digest(src) == before
    _no_temporaries(src.parent)


def test_filter_refuses_the_judged_table_itself_through_a_symlink(tmp_path):
    table = build(tmp_path, "judged.jsonl")  # a JSONL export: a name filter can write
    link = tmp_path / "link.jsonl"
    link.symlink_to(table)
    before = _digest(table)
    for target in (table, str(link)):
        r = _run("filter", table, "-o", target, "--allow-inconsistent")
        assert r.exit_code == EXIT_USER, r.output
        _one_error_line(r, "is the judged table", "choose another -o")
    assert link.is_symlink() and _digest(table) == before


def test_filter_refuses_a_duckdb_file_whatever_its_name(judged, tmp_path):
    disguised = tmp_path / "store.parquet"
    shutil.copy(judged, disguised)
    r = _run("filter", judged, "-o", str(disguised))
    assert r.exit_code == EXIT_USER
    _one_error_line(r, str(disguised), "DuckDB file")
    assert _pairs(disguised) == 8


def test_filter_output_of_a_live_run_exits_3(judged, tmp_path):
    """A score run writing `live.jsonl` holds the lock of its working store: the export it
    will write at the end is the run's, not filter's."""
    out = tmp_path / "live.jsonl"
    out.write_text("")
    store = Store(store_path(str(out)))
    try:
        r = _run("filter", judged, "-o", str(out))
    finally:
        store.close()
    assert r.exit_code == EXIT_BUSY
    _one_error_line(r, "another rmjudge process is writing")
    assert out.read_text() == ""


def test_filter_replaces_only_its_own_unchanged_output(judged, tmp_path):
    out = tmp_path / "clean.jsonl"
    r = _run("filter", judged, "-o", str(out), "--allow-inconsistent")
    assert r.exit_code == 0, r.output
    first = out.read_text()
    assert first and os.path.exists(record_path(str(out)))
    # rerunning (other settings) replaces it: the record beside it proves it is filter's
    r = _run("filter", judged, "-o", str(out), "--evidence")
    assert r.exit_code == 0, r.output
    assert out.read_text() != first and "judge_vote_share" in out.read_text()
    _no_temporaries(tmp_path)
    # edited since: no longer what filter wrote
    out.write_text(out.read_text() + '{"mine": 1}\n')
    edited = out.read_text()
    r = _run("filter", judged, "-o", str(out))
    assert r.exit_code == EXIT_USER
    _one_error_line(r, str(out), os.path.basename(record_path(str(out))))
    assert out.read_text() == edited
    # without its record nothing says filter wrote it
    os.remove(record_path(str(out)))
    r = _run("filter", judged, "-o", str(out))
    assert r.exit_code == EXIT_USER and out.read_text() == edited


def test_filter_moves_a_temporary_file_from_the_target_folder(judged, tmp_path, monkeypatch):
    moves = []
    real_replace, real_link = os.replace, os.link

    def spy(real):
        def move(src, dst):
            moves.append((os.fspath(src), os.fspath(dst)))
            return real(src, dst)
        return move

    # a new file is linked into place (never replacing one), an existing one replaced
    monkeypatch.setattr(atomic_files.os, "replace", spy(real_replace))
    monkeypatch.setattr(atomic_files.os, "link", spy(real_link))
    out = tmp_path / "sub" / "clean.parquet"
    r = _run("filter", judged, "-o", str(out))
    assert r.exit_code == 0, r.output
    final = [m for m in moves if os.path.abspath(m[1]) == os.path.abspath(out)]
    assert len(final) == 1
    assert os.path.dirname(os.path.abspath(final[0][0])) == str(out.parent)
    _no_temporaries(out.parent)


def test_filter_removes_its_stale_temporaries_but_not_a_live_writers(judged, tmp_path):
    out = tmp_path / "f.parquet"
    stale = tmp_path / ".f.parquet.new-0123abcd"  # a filter killed while moving its output
    stale.write_bytes(b"PAR1 half-written")
    r = _run("filter", judged, "-o", str(out))
    assert r.exit_code == 0, r.output
    assert not stale.exists() and out.exists()
    # another process writing g.parquet (a run exporting it holds its lock): filter is refused
    # and the temporary being written is left alone
    target = tmp_path / "g.parquet"
    live = tmp_path / ".g.parquet.new-89abcdef"
    live.write_bytes(b"PAR1 being written")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from rmjudge.store import Store; s = Store(sys.argv[1]); "
        "print('locked', flush=True); time.sleep(30)"), store_path(str(target))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = _run("filter", judged, "-o", str(target))
    finally:
        holder.kill()
        holder.wait()
    assert r.exit_code == EXIT_BUSY
    _one_error_line(r, "another rmjudge process is writing")
    assert live.read_bytes() == b"PAR1 being written" and not target.exists()


# -- report -o ---------------------------------------------------------------------------------

def test_report_refuses_to_write_over_the_judged_store(judged):
    before = _digest(judged)
    r = _run("report", judged, "-o", judged)
    assert r.exit_code == EXIT_USER
    _one_error_line(r, "is the judged table", "choose another -o")
    assert _digest(judged) == before and _pairs(judged) == 8
    link = Path(judged).parent / "alias.html"
    link.symlink_to(judged)
    try:
        r = _run("report", judged, "-o", str(link))
        assert r.exit_code == EXIT_USER
        _one_error_line(r, "is the judged table")
    finally:
        link.unlink()
    assert _digest(judged) == before


def test_report_over_a_live_run_store_exits_3_and_keeps_its_pairs(judged, live):
    path, store = live
    r = _run("report", judged, "-o", str(path))
    assert r.exit_code == EXIT_BUSY
    _one_error_line(r, "another rmjudge process is writing", str(path))
    assert store.con.execute("SELECT count(*) FROM pairs").fetchone()[0] == 8


def test_report_refuses_another_run_store(judged, tmp_path):
    other = Path(build(tmp_path, "other.duckdb"))
    r = _run("report", judged, "-o", str(other))
    assert r.exit_code == EXIT_USER
    _one_error_line(r, str(other), "DuckDB file")
    assert _pairs(other) == 8


def test_report_replaces_only_pages_it_wrote(judged, tmp_path):
    mine = tmp_path / "index.html"
    mine.write_text("<!DOCTYPE html><html><head><title>mine</title></head></html>")
    r = _run("report", judged, "-o", str(mine))
    assert r.exit_code == EXIT_USER
    _one_error_line(r, str(mine), "not written by `rmjudge report`")
    assert "mine" in mine.read_text()
    out = tmp_path / "r.html"
    assert _run("report", judged, "-o", str(out)).exit_code == 0
    assert GENERATOR in out.read_text()[:1000]
    out.write_text(out.read_text().replace("<h1>rmjudge report</h1>", "<h1>old</h1>"))
    r = _run("report", judged, "-o", str(out))  # its own earlier page: replaced
    assert r.exit_code == 0, r.output
    assert "<h1>old</h1>" not in out.read_text()
    _no_temporaries(tmp_path)


# -- reading a store a run is writing -----------------------------------------------------------

HOLD_LOCK = ("import sys, time; from rmjudge.store import Store; s = Store(sys.argv[1]); "
             "print('held', flush=True); time.sleep(60)")
HOLD_DUCKDB = ("import sys, time, duckdb; c = duckdb.connect(sys.argv[1]); "
               "print('held', flush=True); time.sleep(60)")


@pytest.mark.parametrize("holder", [HOLD_LOCK, HOLD_DUCKDB], ids=["rmjudge-lock", "duckdb-lock"])
def test_reading_a_store_being_written_exits_3_in_one_line(judged, tmp_path, holder):
    store = tmp_path / "busy.duckdb"
    shutil.copy(judged, store)
    proc = subprocess.Popen([sys.executable, "-c", holder, str(store)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        results = [subprocess.run([sys.executable, "-m", "rmjudge", *cmd], capture_output=True,
                                  text=True, cwd=tmp_path)
                   for cmd in (["eval", str(store)],
                               ["report", str(store), "-o", str(tmp_path / "r.html")],
                               ["filter", str(store), "-o", str(tmp_path / "f.jsonl")])]
    finally:
        proc.kill()
        proc.wait()
    for r in results:
        assert r.returncode == EXIT_BUSY, r.stderr
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
        assert "is writing" in r.stderr and str(store) in r.stderr
        assert "PID" not in r.stderr and "http" not in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "f.jsonl").exists()


def test_a_file_created_after_the_check_is_never_replaced(tmp_path):
    """The window between the refusal check and the move: a file another process creates
    there is left alone (the move is a no-replace link) and the check runs again."""
    from rmjudge.files import write_file

    path = tmp_path / "report.html"
    calls = []

    def check():
        calls.append(1)
        if len(calls) == 1:  # passes, then another process writes the file
            path.write_text("theirs")
        else:
            raise RuntimeError(f"{path} was not written by rmjudge")

    with pytest.raises(RuntimeError, match="not written by rmjudge"):
        write_file(str(path), b"ours", check)
    assert path.read_text() == "theirs" and len(calls) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no temporary left
    write_file(str(tmp_path / "new.html"), b"ours", lambda: None)  # the ordinary case
    assert (tmp_path / "new.html").read_bytes() == b"ours"


def test_no_output_takes_the_name_of_a_stores_wal_lock_or_temporary(judged, tmp_path):
    """`rmjudge view STORE -o STORE.wal` put the explorer folder on the store's WAL path, and
    `score` then called the store "not an rmjudge run store". Every -o refuses the names of
    the files kept beside another one, whatever is there now, before anything is written."""
    import rmjudge.training.cli as tcli

    store = str(tmp_path / "s.duckdb")
    shutil.copy(judged, store)
    before = _digest(store)
    src = str(Path(judged).parent / "pairs.jsonl")
    for name in ("s.duckdb.wal", "s.duckdb.lock", ".s.duckdb.new-0123abcd",
                 ".x.parquet.rmjudge.duckdb"):
        bad = str(tmp_path / name)
        for cli, args in ((main, ["view", store, "-o", bad]),
                          (main, ["report", store, "-o", bad]),
                          (main, ["filter", store, "-o", bad]),
                          (main, ["compare", store, judged, "--jury", "-o", bad]),
                          (main, ["score", src, "-o", bad]),
                          (main, ["eval", src, "-o", bad]),
                          (main, ["merge", store, judged, "-o", bad]),
                          (main, ["review", "export", store, "-o", bad, "--select",
                                  "random:1"]),
                          (main, ["bench", "-o", bad]),
                          (tcli.main, ["sft", src, "-o", bad]),
                          (tcli.main, ["build-data", src, "-o", str(tmp_path / "t.jsonl"),
                                       "--cache", bad])):
            r = CliRunner().invoke(cli, args)
            # filter writes only .parquet/.jsonl: refused by its format check first
            _one_error_line(r, *(() if args[0] == "filter" else (f"{bad}: that name is ",
                                                                 "choose another")))
            assert r.exit_code == EXIT_USER, (args, r.output)
            assert not os.path.lexists(bad), args
    assert _digest(store) == before
    assert sorted(os.listdir(tmp_path)) == ["s.duckdb"]
    from rmjudge.store import is_rmjudge_store

    assert is_rmjudge_store(store)


@pytest.fixture
def read_only(tmp_path):
    """A read-only folder: a read-only tmpfs as root (root writes through file modes)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        ro.chmod(0o555)
        yield ro
        ro.chmod(0o755)
        return
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=False)
    if not os.path.ismount(ro):
        pytest.skip("cannot mount a read-only file system here")
    yield ro
    subprocess.run(["umount", str(ro)], check=False)


def test_filter_and_report_into_a_read_only_folder_say_nothing_was_written(judged, read_only):
    """They said "f.jsonl was written but ... delete f.jsonl" when nothing was written."""
    for command, name in (("filter", "f.jsonl"), ("report", "r.report.html")):
        out = read_only / name
        r = _run(command, judged, "-o", str(out))
        assert r.exit_code == 4, r.output
        _one_error_line(r, f"Error: cannot write {out}: ", f"nothing was written ({out} is as "
                        "it was)", f"run `rmjudge {command}` again")
        assert "was written but" not in r.output and "delete" not in r.output
        assert not out.exists()
