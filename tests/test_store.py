"""The run store owns its files: locks before deleting, refuses files it did not create, keeps
every passthrough value, names disk problems, records the real run status."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import orjson
import pytest
from helpers import judge_with, rows
from test_score import length_judge, settings

from rmjudge.engine.fake import ScriptedEngine
from rmjudge.core.errors import EXIT_BUSY, EXIT_DISK, EXIT_INTERRUPTED, BusyError, DiskError
from rmjudge.runs.merge import merge
from rmjudge.runs.pipeline import Interrupted, score
from rmjudge.files import StoreError, store_path
from rmjudge.store import Store

DATA = Path(__file__).parent / "data"
PAIRS = str(DATA / "pandalm_5.jsonl")


def sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_jsonl(path: Path, objs: list[dict]) -> str:
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))
    return str(path)


@contextmanager
def lock_held_by_another_process(store: str):
    """Another process holding `store` open as a writer (its rmjudge lock and DuckDB's)."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from rmjudge.store import Store; s = Store(sys.argv[1]); "
        "print('locked', flush=True); time.sleep(30)"), store], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()


def row(i: int, **extra) -> dict:
    return {"id": f"p{i}", "prompt": f"Question {i}?", "response_a": f"long answer {i} " * 3,
            "response_b": f"short {i}", "label": "A", **extra}


# -- 1. nothing deletes or replaces a store whose lock is held --------------------------------

def test_overwrite_refuses_a_store_another_run_holds(tmp_path):
    out = str(tmp_path / "o.duckdb")
    score(PAIRS, ScriptedEngine(length_judge), settings(), output=out)
    before = rows(out, "SELECT count(*) FROM pairs")
    live = Store(out)  # another process's run, as far as the lock is concerned
    try:
        with pytest.raises(BusyError, match="another rmjudge process is writing"):
            score(PAIRS, ScriptedEngine(length_judge), settings(), output=out, overwrite=True)
        assert os.path.exists(out)
    finally:
        live.close()
    assert rows(out, "SELECT count(*) FROM pairs") == before
    # with the lock free, --overwrite starts again
    s = score(PAIRS, ScriptedEngine(length_judge), settings(), output=out, overwrite=True)
    assert s.judged == 5 and s.skipped == 0


def test_overwrite_over_a_live_cli_run_exits_3_and_keeps_the_run(tmp_path):
    out = str(tmp_path / "o.duckdb")
    score(PAIRS, ScriptedEngine(length_judge), settings(), output=out)
    with lock_held_by_another_process(out):
        r = subprocess.run([sys.executable, "-m", "rmjudge", "score", PAIRS, "-o", out,
                            "--overwrite", "--model", "/nonexistent-is-not-reached.gguf"],
                           capture_output=True, text=True)
    # refused before the model loads (the model path is never looked at)
    assert r.returncode == EXIT_BUSY, r.stderr
    assert r.stderr.startswith("Error: another rmjudge process is writing") and "Traceback" not in r.stderr
    assert rows(out, "SELECT count(*) FROM pairs") == [(5,)]


def test_merge_overwrite_refuses_an_output_being_written(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [row(i) for i in range(6)])
    shards = []
    for i in range(2):
        p = str(tmp_path / f"s{i}.duckdb")
        score(src, ScriptedEngine(length_judge), settings(), output=p, shard=(i, 2))
        shards.append(p)
    target = str(tmp_path / "merged.duckdb")
    score(src, ScriptedEngine(length_judge), settings(), output=target, limit=2)
    digest = sha(target)
    live = Store(target)
    try:
        with pytest.raises(BusyError):
            merge(shards, target, overwrite=True)
    finally:
        live.close()
    assert sha(target) == digest
    report = merge(shards, target, overwrite=True)
    assert report.output == target and report.pairs == 6


# -- 2. passthrough columns that differ from core columns only by case ------------------------

def test_passthrough_names_that_collide_by_case_keep_every_value(tmp_path):
    objs = [row(i, Label="gold-ish", ID=f"x{i}", Verdict="v", foo=1, FOO=2, verdict="old",
                input_verdict="older") for i in range(3)]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "o.duckdb")
    s = score(src, ScriptedEngine(length_judge), settings(), output=out, commit_every=1)
    assert s.judged == 3 and s.errors == 0
    cols = [r[0] for r in rows(out, "DESCRIBE pairs")]
    assert len({c.lower() for c in cols}) == len(cols)
    got = rows(out, "SELECT * FROM pairs ORDER BY row_number")[0]
    values = dict(zip(cols, got))
    for v in ("gold-ish", "x0", "v", 1, 2, "old", "older"):
        assert v in values.values(), v
    # a rerun resumes with the same column names
    s = score(src, ScriptedEngine(length_judge), settings(), output=out)
    assert s.skipped == 3 and [r[0] for r in rows(out, "DESCRIBE pairs")] == cols


# -- 3. -o equal to the input --------------------------------------------------------------------

@pytest.mark.parametrize("name", ["x.jsonl", "x.parquet"])
def test_output_equal_to_input_is_refused(tmp_path, name):
    src = tmp_path / name
    if name.endswith(".jsonl"):
        write_jsonl(src, [row(1)])
    else:
        con = duckdb.connect()
        con.execute(f"COPY (SELECT 'p1' AS id, 'Q?' AS prompt, 'a' AS response_a, 'b' AS "
                    f"response_b) TO '{src}' (FORMAT parquet)")
        con.close()
    digest = sha(str(src))
    link = tmp_path / "link" / name
    link.parent.mkdir()
    link.symlink_to(src)
    for out in (str(src), str(link)):
        with pytest.raises(StoreError, match="would overwrite the input"):
            score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    assert sha(str(src)) == digest


# -- 4. a DuckDB file rmjudge did not create -------------------------------------------------

def test_a_foreign_duckdb_file_is_left_byte_for_byte_unchanged(tmp_path):
    for tables in (["CREATE TABLE pairs (x INTEGER)"], ["CREATE TABLE mine (x INTEGER)",
                                                        "INSERT INTO mine VALUES (1)"]):
        out = str(tmp_path / f"theirs{len(tables)}.duckdb")
        con = duckdb.connect(out)
        for t in tables:
            con.execute(t)
        con.close()
        digest = sha(out)
        for overwrite in (False, True):
            with pytest.raises(StoreError, match="not an rmjudge run store"):
                score(PAIRS, ScriptedEngine(length_judge), settings(), output=out,
                      overwrite=overwrite)
            assert sha(out) == digest
    text = tmp_path / "notes.duckdb"
    text.write_text("my notes")
    with pytest.raises(StoreError, match="not an rmjudge run store"):
        score(PAIRS, ScriptedEngine(length_judge), settings(), output=str(text), overwrite=True)
    assert text.read_text() == "my notes"


# -- 5. clear errors instead of tracebacks ----------------------------------------------------

def test_output_into_a_missing_directory_is_created(tmp_path):
    out = str(tmp_path / "new" / "deeper" / "o.parquet")
    s = score(PAIRS, ScriptedEngine(length_judge), settings(), output=out)
    assert s.judged == 5 and os.path.exists(out)


def test_read_only_directory_is_one_error(tmp_path):
    if os.geteuid() == 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=False)
        if not os.path.ismount(ro):
            pytest.skip("cannot mount a read-only file system here")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
    try:
        with pytest.raises(DiskError, match="cannot write"):
            score(PAIRS, ScriptedEngine(length_judge), settings(), output=str(ro / "o.duckdb"))
    finally:
        if os.path.ismount(ro):
            subprocess.run(["umount", str(ro)], check=False)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 3 MB tmpfs: the store fills it (needs root, as the CI machine has)."""
    d = tmp_path / "disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(d)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small file system here (needs root)")
    yield d
    subprocess.run(["umount", str(d)], check=False)


def test_disk_full_is_named_and_the_store_stays_resumable(tmp_path, tiny_disk):
    big = "x" * 20000
    src = write_jsonl(tmp_path / "in.jsonl", [row(i, blob=big + str(i)) for i in range(400)])
    out = str(tiny_disk / "o.duckdb")
    with pytest.raises(DiskError, match="No space left|cannot write") as exc:
        score(src, ScriptedEngine(length_judge), settings(samples=1), output=out,
              commit_every=4)
    assert "rollback" not in str(exc.value)
    assert exc.value.exit_code == EXIT_DISK
    done = rows(out, "SELECT count(*) FROM pairs")[0][0]
    assert done > 0
    assert rows(out, "SELECT status FROM runs") == [("failed",)]
    # more room (the same store copied to a roomier place): the rerun resumes
    roomy = str(tmp_path / "o.duckdb")
    Path(roomy).write_bytes(Path(out).read_bytes())
    if os.path.exists(out + ".wal"):
        Path(roomy + ".wal").write_bytes(Path(out + ".wal").read_bytes())
    s = score(src, ScriptedEngine(length_judge), settings(samples=1), output=roomy)
    assert s.skipped == done and s.judged == 400 - done


def test_disk_full_during_export_is_named(tmp_path, tiny_disk, monkeypatch):
    import rmjudge.store as store_mod

    real_export = store_mod.Store.export

    def export_onto_a_full_disk(self, out, fmt):
        # the judging is done and stored; now the disk fills up before the export
        with open(tiny_disk / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        return real_export(self, out, fmt)

    monkeypatch.setattr(store_mod.Store, "export", export_onto_a_full_disk)
    src = write_jsonl(tmp_path / "in.jsonl", [row(i) for i in range(20)])
    out = str(tiny_disk / "o.jsonl")
    with pytest.raises(DiskError, match="cannot write .*o.jsonl"):
        score(src, ScriptedEngine(length_judge), settings(samples=1), output=out)
    assert not [p for p in os.listdir(tiny_disk) if ".tmp" in p]
    os.remove(tiny_disk / "filler")
    assert rows(store_path(out), "SELECT count(*) FROM pairs") == [(20,)]
    assert rows(store_path(out), "SELECT status FROM runs") == [("failed",)]
    # with room again, the rerun judges nothing and writes the export
    monkeypatch.undo()
    s = score(src, ScriptedEngine(length_judge), settings(samples=1), output=out)
    assert (s.skipped, s.judged) == (20, 0) and os.path.getsize(out) > 0


def test_merge_with_malformed_meta_is_one_error(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [row(i) for i in range(4)])
    shards = []
    for i in range(2):
        p = str(tmp_path / f"s{i}.duckdb")
        score(src, ScriptedEngine(length_judge), settings(), output=p, shard=(i, 2))
        shards.append(p)
    con = duckdb.connect(shards[1])
    con.execute("UPDATE meta SET value = '{not json' WHERE key = 'settings'")
    con.close()
    from rmjudge.runs.merge import MergeError

    with pytest.raises(MergeError, match="malformed recorded settings"):
        merge(shards, str(tmp_path / "m.duckdb"))


def test_commands_on_stores_missing_columns_give_one_error_line(tmp_path):
    out = str(tmp_path / "o.duckdb")
    score(PAIRS, ScriptedEngine(length_judge), settings(), output=out)
    broken = str(tmp_path / "b.duckdb")
    Path(broken).write_bytes(Path(out).read_bytes())
    con = duckdb.connect(broken)
    con.execute("ALTER TABLE samples DROP COLUMN is_anchor")
    con.execute("ALTER TABLE pairs DROP COLUMN p_a_ab")
    con.execute("ALTER TABLE runs DROP COLUMN status")
    con.close()
    for args in (["eval", broken], ["report", broken, "-o", str(tmp_path / "r.html")],
                 ["filter", broken, "-o", str(tmp_path / "f.jsonl")],
                 ["merge", broken, out, "-o", str(tmp_path / "m.duckdb")]):
        r = subprocess.run([sys.executable, "-m", "rmjudge", *args], capture_output=True,
                           text=True)
        assert "Traceback" not in r.stderr, (args, r.stderr)
        if r.returncode != 0:
            assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, (args, r.stderr)


# -- 6. the real status of a run -------------------------------------------------------------

def test_ctrl_c_saves_the_judged_pairs_and_says_how_to_resume(tmp_path):
    out = str(tmp_path / "o.duckdb")
    calls = {"n": 0}

    def judge_then_interrupt(req, i):
        calls["n"] += 1
        if calls["n"] > 40:
            raise KeyboardInterrupt
        return length_judge(req, i)

    with pytest.raises(Interrupted, match="judged pairs are saved in .*rerun the same command") as exc:
        score(PAIRS, ScriptedEngine(judge_then_interrupt, pairs_in_flight=1), settings(),
              output=out, commit_every=100)
    assert exc.value.exit_code == EXIT_INTERRUPTED
    saved = rows(out, "SELECT count(*) FROM pairs")[0][0]
    assert saved > 0 and f"{saved} judged pairs" in str(exc.value)
    assert rows(out, "SELECT status FROM runs") == [("interrupted",)]
    s = score(PAIRS, ScriptedEngine(length_judge), settings(), output=out)
    assert s.skipped == saved and s.judged == 5 - saved
    assert rows(out, "SELECT status FROM runs ORDER BY run_id") == [("interrupted",), ("finished",)]


@pytest.mark.slow  # the real model in a real process, signalled mid-run
@pytest.mark.model
def test_sigint_on_the_cli_exits_130_with_the_resume_hint(tmp_path, model_path):
    out = str(tmp_path / "o.duckdb")
    p = subprocess.Popen([sys.executable, "-m", "rmjudge", "score", PAIRS, "-o", out,
                          "--samples", "2", "--max-tokens", "32", "--commit-every", "1",
                          "--threads", "1", "--model", model_path],
                         stderr=subprocess.PIPE, text=True)
    first = p.stderr.readline()
    assert first.startswith("rmjudge: loading the judge")
    time.sleep(6)
    p.send_signal(signal.SIGINT)
    err = first + p.communicate(timeout=120)[1]
    assert p.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "Aborted!" not in err
    assert "rerun the same command to resume" in err
    assert rows(out, "SELECT status FROM runs") == [("interrupted",)]


def rows_safe(out: str) -> int:
    try:
        return rows(out, "SELECT count(*) FROM pairs")[0][0]
    except duckdb.Error:
        return 0


def test_export_status_is_recorded_after_the_export(tmp_path, monkeypatch):
    import rmjudge.store.reads as store_mod  # where `Store.export` looks it up

    def broken_copy(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(store_mod, "write_query_file", broken_copy)
    out = str(tmp_path / "o.parquet")
    with pytest.raises(Interrupted):
        score(PAIRS, ScriptedEngine(length_judge), settings(), output=out)
    assert rows(store_path(out), "SELECT status FROM runs") == [("interrupted",)]


# -- 11. another input into the same store ----------------------------------------------------

def test_a_different_input_into_an_existing_store_is_refused(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [row(i) for i in range(3)])
    b = write_jsonl(tmp_path / "b.jsonl", [row(i + 10) for i in range(3)])
    out = str(tmp_path / "o.duckdb")
    score(a, ScriptedEngine(length_judge), settings(), output=out)
    with pytest.raises(StoreError, match="holds results for another input"):
        score(b, ScriptedEngine(length_judge), settings(), output=out)
    assert rows(out, "SELECT count(*) FROM pairs") == [(3,)]
    # the same input, grown by appending rows, resumes
    Path(a).write_bytes(Path(a).read_bytes() + orjson.dumps(row(99)) + b"\n")
    s = score(a, ScriptedEngine(length_judge), settings(), output=out)
    assert (s.skipped, s.judged) == (3, 1)
    s = score(b, ScriptedEngine(length_judge), settings(), output=out, overwrite=True)
    assert s.judged == 3


def test_busy_exit_code_on_the_cli(tmp_path):
    out = str(tmp_path / "o.duckdb")
    score(PAIRS, ScriptedEngine(length_judge), settings(), output=out)
    with lock_held_by_another_process(out):
        r = subprocess.run([sys.executable, "-m", "rmjudge", "merge", out, PAIRS, "-o",
                            str(tmp_path / "m.duckdb")], capture_output=True, text=True)
    assert r.returncode == EXIT_BUSY and r.stderr.startswith("Error: ")
    assert "Traceback" not in r.stderr


def test_an_export_file_rmjudge_did_not_write_is_left_alone(tmp_path):
    out = tmp_path / "x.parquet"
    out.write_text("someone's data")
    with pytest.raises(StoreError, match="no rmjudge run wrote it"):
        score(PAIRS, ScriptedEngine(length_judge), settings(), output=str(out))
    assert out.read_text() == "someone's data"
    # an export of rmjudge's own run is rewritten on a rerun
    own = str(tmp_path / "own.parquet")
    score(PAIRS, ScriptedEngine(length_judge), settings(), output=own)
    s = score(PAIRS, ScriptedEngine(length_judge), settings(), output=own)
    assert s.skipped == 5


def test_passthrough_columns_keep_their_types_in_every_output(tmp_path):
    import pyarrow.parquet as pq

    objs = [row(i, score=i, ratio=i / 2, ok=i % 2 == 0, tags=["x", f"t{i}"],
                meta={"lang": "en", "n": i}, mixed=(i if i else "zero")) for i in range(3)]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    db = str(tmp_path / "o.duckdb")
    score(src, ScriptedEngine(length_judge), settings(), output=db, commit_every=1)
    types = dict(rows(db, "SELECT column_name, data_type FROM duckdb_columns() "
                          "WHERE table_name = 'pairs'"))
    assert (types["score"], types["ratio"], types["ok"]) == ("BIGINT", "DOUBLE", "BOOLEAN")
    assert types["tags"] == types["meta"] == types["messages"] == "JSON"
    assert types["mixed"] == "VARCHAR"  # "zero" then 1, 2: widened, nothing lost
    assert sorted(r[0] for r in rows(db, "SELECT mixed FROM pairs")) == ["1", "2", "zero"]
    pq_out = str(tmp_path / "o.parquet")
    score(src, ScriptedEngine(length_judge), settings(), output=pq_out)
    t = pq.read_table(pq_out).to_pylist()
    first = next(r for r in t if r["id"] == "p1")
    assert first["score"] == 1 and first["ratio"] == 0.5 and first["ok"] is False
    assert first["tags"] == ["x", "t1"] and first["meta"] == {"lang": "en", "n": 1}
    assert first["messages"] == [{"role": "user", "content": "Question 1?"}]
    js_out = str(tmp_path / "o.jsonl")
    score(src, ScriptedEngine(length_judge), settings(), output=js_out)
    got = {r["id"]: r for r in map(orjson.loads, Path(js_out).read_bytes().splitlines())}
    assert got["p2"]["tags"] == ["x", "t2"] and got["p2"]["score"] == 2
    assert got["p2"]["messages"] == [{"role": "user", "content": "Question 2?"}]


def test_a_rerun_with_another_map_or_label_reading_is_refused(tmp_path):
    from rmjudge.io.mapping import LabelOptions

    objs = [{"q": f"Q{i}?", "x": f"first {i}", "y": f"second {i}", "pref": 1} for i in range(3)]
    src = write_jsonl(tmp_path / "mp.jsonl", objs)
    out = str(tmp_path / "o.duckdb")

    def mapper(spec, a="x", b="y"):
        return LabelOptions.parse(spec).mapper({"prompt": "q", "a": a, "b": b, "label": "pref"}, 1)

    score(src, ScriptedEngine(length_judge), settings(), output=out, mapper=mapper("1=A,2=B"))
    with pytest.raises(StoreError, match="input_reading"):
        score(src, ScriptedEngine(length_judge), settings(), output=out,
              mapper=mapper("1=A,2=B", a="y", b="x"))
    with pytest.raises(StoreError, match="input_reading"):
        score(src, ScriptedEngine(length_judge), settings(), output=out, mapper=mapper("1=B,2=A"))
    s = score(src, ScriptedEngine(length_judge), settings(), output=out, mapper=mapper("1=A,2=B"))
    assert s.skipped == 3
    assert rows(out, "SELECT count(*), count(DISTINCT row_number) FROM pairs") == [(3, 3)]


def test_hostile_values_and_names_become_rows_not_crashes(tmp_path):
    deep: object = "bottom"
    for _ in range(400):
        deep = [deep]
    objs = [
        {"id": "p1", "prompt": "Q?", "chosen": "a good answer", "rejected": "bad", "": "empty key",
         " ": "blank key", "big": 2**70, "deep": deep},
        {"id": "p2", "prompt": "Q2?", "chosen": "another good one", "rejected": "no",
         "meta": {"Score": 1, "score": 2}, "odd": {"": 1}},
    ]
    src = tmp_path / "h.jsonl"
    src.write_text("\n".join(__import__("json").dumps(o) for o in objs) + "\n")
    for out in (str(tmp_path / "h.duckdb"), str(tmp_path / "h.parquet"), str(tmp_path / "o.jsonl")):
        s = score(str(src), ScriptedEngine(length_judge), settings(), output=out)
        assert s.judged == 2 and s.errors == 0
    cols = [r[0] for r in rows(str(tmp_path / "h.duckdb"), "DESCRIBE pairs")]
    assert "input_column" in cols and "" not in cols


def test_a_fixed_row_leaves_the_errors_table(tmp_path):
    good = [row(i) for i in range(4)]
    lines = [orjson.dumps(o).decode() for o in good]
    broken = list(lines)
    broken[2] = '{"id": "p2", "prompt": oops'
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(broken) + "\n")
    out = str(tmp_path / "o.duckdb")
    score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    assert rows(out, "SELECT row_number FROM errors") == [(3,)]
    src.write_text("\n".join(lines) + "\n")
    s = score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    assert s.judged == 1 and s.errors == 0
    assert rows(out, "SELECT count(*) FROM errors") == [(0,)]


def test_views_only_database_and_orphan_wal_are_not_taken(tmp_path):
    db = str(tmp_path / "views.duckdb")
    con = duckdb.connect(db)
    con.execute("CREATE VIEW my_catalog AS SELECT 1 AS x")
    con.execute("CREATE SEQUENCE myseq")
    con.close()
    digest = sha(db)
    for overwrite in (False, True):
        with pytest.raises(StoreError, match="not an rmjudge run store"):
            score(PAIRS, ScriptedEngine(length_judge), settings(), output=db, overwrite=overwrite)
    assert sha(db) == digest
    wal = tmp_path / "gone.duckdb.wal"
    wal.write_bytes(b"someone's log")
    with pytest.raises(StoreError, match="wal exists without"):
        score(PAIRS, ScriptedEngine(length_judge), settings(), output=str(tmp_path / "gone.duckdb"))
    assert wal.read_bytes() == b"someone's log"


SLOW_RUN = """
import sys, time
sys.path.insert(0, sys.argv[3])
from test_score import length_judge, settings
from rmjudge.engine.fake import ScriptedEngine
from rmjudge.runs.pipeline import Interrupted, score

seen = set()

def slow(req, i):
    seen.add(req.share_key[0])
    if len(seen) == 3 and i == 0:  # two pairs judged before this one (commit_every=1)
        print("judging", flush=True)
    time.sleep(0.02)
    return length_judge(req, i)

print("started", flush=True)
try:
    score(sys.argv[1], ScriptedEngine(slow, pairs_in_flight=1), settings(), output=sys.argv[2],
          commit_every=1)
except Interrupted as exc:
    print(exc, file=sys.stderr)
    sys.exit(exc.exit_code)
"""


@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGINT, signal.SIGINT]])
def test_sigterm_and_repeated_ctrl_c_save_and_record_the_run(tmp_path, signals):
    src = write_jsonl(tmp_path / "in.jsonl", [row(i) for i in range(40)])
    out = str(tmp_path / "o.duckdb")
    p = subprocess.Popen([sys.executable, "-c", SLOW_RUN, src, out, str(Path(__file__).parent)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    assert p.stdout.readline().strip() == "judging"
    for s in signals:
        p.send_signal(s)
        time.sleep(0.001)
    _, err = p.communicate(timeout=60)
    assert p.returncode == EXIT_INTERRUPTED, err
    assert "rerun the same command to resume" in err and "Traceback" not in err
    saved = rows(out, "SELECT count(*) FROM pairs")[0][0]
    assert saved >= 1, saved  # signalled mid-run
    assert rows(out, "SELECT status, pairs_judged FROM runs") == [("interrupted", saved)]
    s = score(src, ScriptedEngine(length_judge), settings(), output=out)
    assert s.skipped == saved and s.judged == 40 - saved


def test_outputs_read_back_by_a_folder_or_glob_input_are_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", [row(i) for i in range(2)])
    for out in (data / "out.jsonl", data / "out.duckdb"):
        with pytest.raises(StoreError, match="read back as input"):
            score(str(data), ScriptedEngine(length_judge), settings(), output=str(out))
    with pytest.raises(StoreError, match="read back as input"):
        score(str(data / "*.jsonl"), ScriptedEngine(length_judge), settings(),
              output=str(data / "judged.jsonl"))
    s = score(str(data), ScriptedEngine(length_judge), settings(), output=str(tmp_path / "o.jsonl"))
    assert s.judged == 2
    for bad in ("", str(tmp_path) + "/"):
        with pytest.raises(StoreError, match="not a file name"):
            score(str(data), ScriptedEngine(length_judge), settings(), output=bad) if bad else \
                __import__("rmjudge.runs.pipeline", fromlist=["check_output"]).check_output(str(data), bad)


def test_jsonl_export_is_valid_json_with_nan_and_infinity(tmp_path):
    src = tmp_path / "in.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 'p1' AS id, 'Q?' AS prompt, 'good answer' AS chosen, 'bad' AS "
                f"rejected, 'nan'::DOUBLE AS x, 'inf'::DOUBLE AS y) TO '{src}' (FORMAT parquet)")
    con.close()
    out = tmp_path / "o.jsonl"
    score(str(src), ScriptedEngine(length_judge), settings(), output=str(out))
    (line,) = out.read_bytes().splitlines()
    got = orjson.loads(line)
    assert got["x"] is None and got["y"] is None


def test_merge_maps_passthrough_columns_by_input_key_not_by_case(tmp_path):
    from rmjudge.io.intake import in_shard

    objs = []
    for i in range(12):
        r = row(i)
        # shard 0 sees Foo first, shard 1 sees foo first: their stores name the columns apart
        pair_keys = ("Foo", "foo") if in_shard(f"p{i}", (0, 2)) else ("foo", "Foo")
        for k in pair_keys:
            r[k] = ("UPPER" if k == "Foo" else "lower") + str(i)
        objs.append(r)
    src = write_jsonl(tmp_path / "case.jsonl", objs)
    shards = []
    for i in range(2):
        p = str(tmp_path / f"s{i}.duckdb")
        score(src, ScriptedEngine(length_judge), settings(), output=p, shard=(i, 2))
        shards.append(p)
    out = str(tmp_path / "m.duckdb")
    report = merge(shards, out, input=src)
    assert report.output == out and report.pairs == 12
    import json
    cmap = json.loads(rows(out, "SELECT value FROM meta WHERE key = 'passthrough'")[0][0])
    upper, lower = cmap["Foo"], cmap["foo"]
    got = rows(out, f'SELECT "{upper}", "{lower}" FROM pairs')
    assert all(u.startswith("UPPER") and lo.startswith("lower") for u, lo in got), got


# -- a row edited between runs (content hash) -------------------------------------------------

def idless(i: int, rejected: str | None = None) -> dict:
    return {"prompt": f"Question {i}?", "chosen": f"a long and careful answer {i}",
            "rejected": rejected or f"short {i}"}


def cli_with(engine, monkeypatch, *args):
    """`rmjudge ARGS` in-process (CliRunner), with `engine` in place of the model."""
    from click.testing import CliRunner

    import rmjudge.engine as engine_mod
    from rmjudge.cli import main

    monkeypatch.setattr(engine_mod, "load_engine", lambda *a, **k: engine)
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_an_edited_row_stops_the_resume_with_one_error_line(tmp_path, monkeypatch):
    src = tmp_path / "in.jsonl"
    write_jsonl(src, [idless(i) for i in range(1, 4)])
    out = str(tmp_path / "o.duckdb")
    score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    before = rows(out, "SELECT id, row_number, verdict FROM pairs ORDER BY row_number")
    write_jsonl(src, [idless(1), idless(2, rejected="an edited rejected answer"), idless(3)])
    r = cli_with(ScriptedEngine(length_judge), monkeypatch, "score", str(src), "-o", out,
                 "--samples", "3", "--seed", "1", "-q")
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert f"{src} has changed since {out} judged it: row 2 now holds other content" in lines[0]
    assert "--rejudge-changed" in lines[0] and "--overwrite" in lines[0] and "-o" in lines[0]
    # nothing was judged twice or dropped; `eval` still counts 3 pairs
    assert rows(out, "SELECT id, row_number, verdict FROM pairs ORDER BY row_number") == before
    r = cli_with(ScriptedEngine(length_judge), monkeypatch, "eval", out, "--json")
    assert r.exit_code == 0 and orjson.loads(r.output)["labelled"] == 3


def test_rejudge_changed_replaces_the_verdict_of_an_edited_row(tmp_path):
    src = tmp_path / "in.jsonl"
    write_jsonl(src, [idless(i) for i in range(1, 4)])
    out = str(tmp_path / "o.duckdb")
    score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    old = dict(rows(out, "SELECT row_number, id FROM pairs"))
    edited = "an edited rejected answer, much longer than the chosen one ever was"
    write_jsonl(src, [idless(1), idless(2, rejected=edited), idless(3)])
    s = score(str(src), ScriptedEngine(length_judge), settings(), output=out, rejudge_changed=True)
    assert (s.judged, s.skipped) == (1, 2)
    got = rows(out, "SELECT row_number, id, response_a || response_b FROM pairs ORDER BY 1")
    assert [r[0] for r in got] == [1, 2, 3]  # one pair per row, none duplicated
    assert got[1][1] != old[2] and edited in got[1][2]
    assert rows(out, f"SELECT count(*) FROM samples WHERE pair_id = '{old[2]}'") == [(0,)]
    assert rows(out, "SELECT count(DISTINCT pair_id) FROM samples") == [(3,)]
    # a third run finds nothing changed
    s = score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    assert (s.judged, s.skipped) == (0, 3)


def test_an_edited_row_with_an_id_is_not_silently_skipped(tmp_path):
    src = tmp_path / "in.jsonl"
    write_jsonl(src, [row(i) for i in range(4)])
    out = str(tmp_path / "o.parquet")
    score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    # the gold label and a response of p1 and p3 change; the ids stay
    write_jsonl(src, [row(0), row(1, label="B"), row(2),
                      {**row(3), "response_b": "an edited response"}])
    with pytest.raises(StoreError, match=r"rows 2, 4 now hold other content"):
        score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    s = score(str(src), ScriptedEngine(length_judge), settings(), output=out, rejudge_changed=True)
    assert (s.judged, s.skipped) == (2, 2)
    got = dict(rows(store_path(out), "SELECT id, label FROM pairs"))
    assert len(got) == 4 and got["p1"] == "B"
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == 4
    assert "an edited response" in [r[0] for r in rows(
        store_path(out), "SELECT response_a FROM pairs UNION ALL SELECT response_b FROM pairs")]


def test_appended_and_unchanged_rows_resume_without_complaint(tmp_path):
    src = tmp_path / "in.jsonl"
    write_jsonl(src, [idless(i) for i in range(1, 4)])
    out = str(tmp_path / "o.duckdb")
    score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    write_jsonl(src, [idless(i) for i in range(1, 6)])
    s = score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    assert (s.judged, s.skipped) == (2, 3)


def test_a_store_without_content_hashes_resumes_by_id(tmp_path):
    """Stores of schema 1 (no `content_hash`) gain the column and resume as before."""
    src = write_jsonl(tmp_path / "in.jsonl", [row(i) for i in range(3)])
    out = str(tmp_path / "o.duckdb")
    score(src, ScriptedEngine(length_judge), settings(), output=out)
    con = duckdb.connect(out)
    con.execute("ALTER TABLE pairs DROP COLUMN content_hash")
    con.close()
    s = score(src, ScriptedEngine(length_judge), settings(), output=out)
    assert (s.judged, s.skipped) == (0, 3)


# -- concurrent runs whose files overlap (an output that is another output's sidecar) --------

SLOW_CLI = """
import sys, time
sys.path.insert(0, {tests!r})
import rmjudge.engine as engine_mod
from rmjudge.engine.fake import ScriptedEngine
from test_score import length_judge

def slow(req, i):
    print("judging", flush=True)
    time.sleep(float({pause!r}))
    return length_judge(req, i)

engine_mod.load_engine = lambda *a, **k: ScriptedEngine(slow, pairs_in_flight=1)
from rmjudge.cli import main
main(sys.argv[1:], prog_name="rmjudge")
"""


def cli_process(*args, pause: float = 0.0) -> subprocess.Popen:
    """`rmjudge ARGS` in its own process, judging with a scripted judge that pauses."""
    code = SLOW_CLI.format(tests=str(Path(__file__).parent), pause=pause)
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("first", ["a.parquet", "a.samples.parquet"])
def test_an_output_that_is_another_live_outputs_sidecar_is_refused(tmp_path, first):
    src = write_jsonl(tmp_path / "in.jsonl", [row(i) for i in range(3)])
    col = tmp_path / "col"
    second = "a.samples.parquet" if first == "a.parquet" else "a.parquet"
    opts = ["--samples", "1", "--seed", "1", "-q"]
    a = cli_process("score", src, "-o", str(col / first), *opts, pause=0.3)
    try:
        assert a.stdout.readline().strip() == "judging"  # a holds its output and sidecars
        b = cli_process("score", src, "-o", str(col / second), *opts)
        _, err = b.communicate(timeout=120)
    finally:
        a_out, a_err = a.communicate(timeout=300)
    assert a.returncode == 0, a_err
    assert b.returncode == EXIT_BUSY, err
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: another rmjudge process is writing ") and "Traceback" not in err
    assert str(col / "a.samples.parquet") in line
    import pyarrow.parquet as pq

    # the file the second run would have clobbered is the first run's, intact
    table = pq.read_table(col / "a.samples.parquet")
    if first == "a.parquet":
        assert "pair_id" in table.column_names and "verdict" not in table.column_names
        assert not (col / ".a.samples.parquet.rmjudge.duckdb").exists()
    else:
        assert "verdict" in table.column_names and table.num_rows == 3
        assert not (col / "a.parquet").exists()


# -- temporaries left by a run killed while exporting -----------------------------------------

def test_stale_export_temporaries_are_removed_by_the_next_run(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [row(i) for i in range(3)])
    out = tmp_path / "x.parquet"
    score(src, ScriptedEngine(length_judge), settings(), output=str(out))
    stale = [tmp_path / ".x.parquet.new-0123abcd", tmp_path / ".x.samples.parquet.new-89abcdef",
             tmp_path / ".x.errors.parquet.new-00000000"]
    others = [tmp_path / ".x.parquet.new-0123abcd.bak", tmp_path / ".x.parquet.new-XYZ",
              tmp_path / ".y.parquet.new-0123abcd", tmp_path / "x.parquet.new-0123abcd"]
    for p in stale + others:
        p.write_bytes(b"PAR1 half-written")
    s = score(src, ScriptedEngine(length_judge), settings(), output=str(out))
    assert s.skipped == 3
    assert [p.name for p in stale if p.exists()] == []
    assert [p.name for p in others if p.exists()] == [p.name for p in others]  # not rmjudge's


def test_a_temporary_of_a_live_run_is_left_alone(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [row(i) for i in range(3)])
    # a merge still building its store `.o.duckdb.new-*` (the store holds its own lock)
    building = str(tmp_path / ".o.duckdb.new-0123abcd")
    out = str(tmp_path / "o.duckdb")
    with lock_held_by_another_process(building):
        score(src, ScriptedEngine(length_judge), settings(), output=out)
        assert os.path.exists(building) and os.path.exists(building + ".lock")
    score(src, ScriptedEngine(length_judge), settings(), output=out)  # now it is stale
    assert not os.path.exists(building) and not os.path.exists(building + ".lock")
    # an export temporary of a run that holds the output: the second run is refused, and the
    # temporary is left to its owner
    pq_out = str(tmp_path / "p.parquet")
    live_tmp = tmp_path / ".p.parquet.new-0123abcd"
    with lock_held_by_another_process(store_path(pq_out)):
        live_tmp.write_bytes(b"PAR1 being written")
        with pytest.raises(BusyError):
            score(src, ScriptedEngine(length_judge), settings(), output=pq_out)
        assert live_tmp.read_bytes() == b"PAR1 being written"


def test_the_store_locks_every_export_file_even_past_the_early_check(tmp_path, monkeypatch):
    """Two runs that both passed `check_output` before either locked: the store's own locks
    still keep the second out."""
    import rmjudge.runs.pipeline as pipeline

    monkeypatch.setattr(pipeline, "check_output", lambda source, out: None)
    src = write_jsonl(tmp_path / "in.jsonl", [row(i) for i in range(2)])
    with lock_held_by_another_process(store_path(str(tmp_path / "a.errors.parquet"))):
        with pytest.raises(BusyError, match=r"writing \S*a\.errors\.parquet, which this run "
                                            r"writes beside \S*a\.parquet"):
            score(src, ScriptedEngine(length_judge), settings(), output=str(tmp_path / "a.parquet"))
    assert not (tmp_path / "a.parquet").exists()
    assert not (tmp_path / ".a.parquet.rmjudge.duckdb").exists()


def test_a_changed_row_that_cannot_be_judged_drops_its_old_verdict(tmp_path):
    from rmjudge.core.types import Generation

    src = tmp_path / "in.jsonl"
    write_jsonl(src, [row(i) for i in range(3)])
    out = str(tmp_path / "o.duckdb")
    score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    write_jsonl(src, [row(0), {**row(1), "response_b": "FAILS"}, row(2)])

    def failing(req, i):
        if "FAILS" in req.messages[-1]["content"]:
            return Generation("", [], "error", error="the engine could not run this pair")
        return length_judge(req, i)

    s = score(str(src), ScriptedEngine(failing), settings(), output=out, rejudge_changed=True)
    assert (s.judged, s.skipped, s.errors) == (0, 2, 1)
    assert rows(out, "SELECT id FROM pairs ORDER BY id") == [("p0",), ("p2",)]
    assert rows(out, "SELECT count(*) FROM samples WHERE pair_id = 'p1'") == [(0,)]
    assert rows(out, "SELECT row_number, id FROM errors") == [(2, "p1")]


def test_an_idless_row_edited_into_another_shard_leaves_no_stale_pair(tmp_path):
    from rmjudge.io.intake import in_shard
    from rmjudge.io.mapping import Mapper

    src = tmp_path / "in.jsonl"
    base = [idless(i) for i in range(1, 7)]
    write_jsonl(src, base)
    outs = [str(tmp_path / f"s{i}.duckdb") for i in range(2)]
    for i, out in enumerate(outs):
        score(str(src), ScriptedEngine(length_judge), settings(), output=out, shard=(i, 2))
    # edit a row of shard 0 so that its new (content) id falls in shard 1
    m = Mapper(seed=1)
    old_shard = {n: (0 if in_shard(m.to_pair(n, o).id, (0, 2)) else 1)
                 for n, o in enumerate(base, 1)}
    n, edited = next((n, {**base[n - 1], "rejected": f"edited {k}"})
                     for n in old_shard if old_shard[n] == 0 for k in range(100)
                     if not in_shard(m.to_pair(n, {**base[n - 1], "rejected": f"edited {k}"}).id,
                                     (0, 2)))
    write_jsonl(src, [edited if i == n else o for i, o in enumerate(base, 1)])
    with pytest.raises(StoreError, match=rf"row {n} now holds other content"):
        score(str(src), ScriptedEngine(length_judge), settings(), output=outs[0], shard=(0, 2))
    score(str(src), ScriptedEngine(length_judge), settings(), output=outs[0], shard=(0, 2),
          rejudge_changed=True)
    score(str(src), ScriptedEngine(length_judge), settings(), output=outs[1], shard=(1, 2))
    got = [r for out in outs for r in rows(out, "SELECT row_number FROM pairs")]
    assert sorted(r[0] for r in got) == [1, 2, 3, 4, 5, 6]  # one pair per row across shards


@pytest.mark.parametrize("ids", [True, False])
def test_a_judged_row_that_became_unjudgeable_leaves_no_stale_verdict(tmp_path, ids):
    src = tmp_path / "in.jsonl"
    base = [row(i) for i in range(4)] if ids else [idless(i) for i in range(1, 5)]
    write_jsonl(src, base)
    out = str(tmp_path / "o.duckdb")
    score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    broken = {**base[1], "prompt": ""}  # row 2 now fails (an empty prompt)
    src.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in [base[0], broken, base[2]])
                    + b"{not json\n")  # and row 4 is unreadable
    with pytest.raises(StoreError, match=r"rows 2, 4 now hold other content"):
        score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    assert rows(out, "SELECT count(*) FROM pairs") == [(4,)]
    s = score(str(src), ScriptedEngine(length_judge), settings(), output=out, rejudge_changed=True)
    assert (s.judged, s.skipped, s.errors) == (0, 2, 2)
    assert rows(out, "SELECT row_number FROM pairs ORDER BY 1") == [(1,), (3,)]
    assert rows(out, "SELECT row_number FROM errors ORDER BY 1") == [(2,), (4,)]
    assert rows(out, "SELECT count(DISTINCT pair_id) FROM samples") == [(2,)]


def test_store_moves_never_replace_what_another_writer_placed(tmp_path):
    """The store's folder move and write-once file keep what is there already (a concurrent
    Ray attempt's batch, an intake file with other rows); a placed copy holds the source."""
    from rmjudge.files import place_copy, place_dir, write_json, write_once

    mine, theirs = tmp_path / ".tmp-b0", tmp_path / "b0"
    mine.mkdir()
    (mine / "pairs.parquet").write_bytes(b"mine")
    theirs.mkdir()
    (theirs / "pairs.parquet").write_bytes(b"theirs")
    assert place_dir(str(mine), str(theirs)) is False
    assert (theirs / "pairs.parquet").read_bytes() == b"theirs" and mine.exists()
    assert place_dir(str(mine), str(tmp_path / "b1")) is True
    assert (tmp_path / "b1" / "pairs.parquet").read_bytes() == b"mine" and not mine.exists()

    f = tmp_path / "intake.jsonl"
    assert write_once(str(f), [b"a\n", b"b\n"]) is True
    assert write_once(str(f), [b"a\nb\n"]) is True  # the same bytes: kept
    assert write_once(str(f), [b"other\n"]) is False
    assert f.read_bytes() == b"a\nb\n"

    place_copy(str(f), str(tmp_path / "copy.jsonl"))
    assert (tmp_path / "copy.jsonl").read_bytes() == b"a\nb\n"
    write_json(str(tmp_path / "runs.json"), [{"run_id": 1}])
    assert orjson.loads((tmp_path / "runs.json").read_bytes()) == [{"run_id": 1}]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "b0", "b1", "copy.jsonl", "intake.jsonl", "runs.json"]  # no temporaries left


# -- rows written one statement per chunk --------------------------------------------------------

HOSTILE_CELLS = ["plain", "", None, "a\x00b", "naïve ☃ 𝄞", "'); DROP TABLE t; --", "x" * 5000]


@pytest.mark.parametrize("replace", [False, True])
def test_bulk_writes_store_what_one_row_per_statement_stores(replace):
    """rmjudge.store.bulk writes a chunk's rows in one statement; the tables hold exactly what
    DuckDB's executemany (one statement per row, as rmjudge 0.6 wrote) leaves: values of every
    type, NULLs, hostile text, and with `replace` a later row over an earlier one of its key."""
    from datetime import datetime, timezone

    from rmjudge.store.bulk import delete_in, delete_in_each, insert_rows, insert_rows_each

    cols = ('"id" BIGINT PRIMARY KEY, "text" VARCHAR, "x" DOUBLE, "ok" BOOLEAN, "j" JSON, '
            '"n" INTEGER, "t" TIMESTAMPTZ, "Order" VARCHAR')
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    data = [[i, HOSTILE_CELLS[i % len(HOSTILE_CELLS)], [0.5, None, float("inf"), float("nan"),
             -1e308][i % 5], [True, False, None][i % 3], [None, '{"a": [1, 2]}', "[]"][i % 3],
             i % 7, when if i % 2 else None, str(i)] for i in range(60)]
    if replace:
        data += [[3, "again", 1.0, True, None, 1, when, "r"], [3, "last", 2.0, False, None, 2,
                                                               None, "r2"]]
    held = []
    for insert, delete in ((insert_rows, delete_in), (insert_rows_each, delete_in_each)):
        con = duckdb.connect(":memory:")
        con.execute(f"CREATE TABLE t ({cols})")
        insert(con, "t", data[:10], replace=replace)  # rows already held when the chunk comes
        insert(con, "t", data[10:], replace=replace)
        insert(con, "t", [[100, "some columns only"]], ["id", "text"])
        delete(con, "t", "id", [1, 2, 99], "BIGINT")
        held.append(con.execute("SELECT * EXCLUDE (x), x::VARCHAR FROM t ORDER BY id").fetchall())
        con.close()
    assert held[0] == held[1]
    assert len(held[0]) == 60 - 2 + 1
    if replace:
        assert [r[1] for r in held[0] if r[0] == 3] == ["last"]


@pytest.mark.parametrize("table, column", [("pairs", "p_a_ab"), ("samples", "is_anchor"),
                                           ("errors", "raw")])
def test_resuming_a_store_that_lacks_a_column_a_run_writes_is_one_error_line(
        tmp_path, monkeypatch, table, column):
    """A store whose pairs, samples or errors table lacks a column (edited, or made by another
    version) is refused before anything is judged: one `Error:` line naming the store, the
    column and the fix, not a traceback from the first commit; the pairs it holds stay."""
    from click.testing import CliRunner

    from rmjudge.cli import main
    from rmjudge.core.errors import EXIT_USER

    judge_with(monkeypatch, lambda: ScriptedEngine(length_judge))
    src = tmp_path / "in.jsonl"
    write_jsonl(src, [row(i) for i in range(2)])
    out = str(tmp_path / "o.duckdb")
    assert CliRunner().invoke(main, ["score", str(src), "-o", out]).exit_code == 0
    con = duckdb.connect(out)
    con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    con.close()
    with open(src, "ab") as f:
        f.write(orjson.dumps(row(2)) + b"\n{not json\n")
    r = CliRunner().invoke(main, ["score", str(src), "-o", out], catch_exceptions=False)
    assert r.exit_code == EXIT_USER, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in r.output, r.output
    assert out in errors[0] and f"{table}.{column}" in errors[0] and "--overwrite" in errors[0]
    assert rows(out, "SELECT count(*) FROM pairs") == [(2,)]
    assert rows(out, "SELECT count(*) FROM runs") == [(1,)]  # no run recorded for the refusal
    r = CliRunner().invoke(main, ["score", str(src), "-o", out, "--overwrite"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert rows(out, "SELECT count(*) FROM pairs") == [(3,)]


def _tables(db: str) -> dict:
    """Every column (name, type) and every row (as text, sorted) of pairs, samples and errors."""
    from rmjudge.core.sql import quote_ident

    con = duckdb.connect(db, read_only=True)
    try:
        got = {}
        for t in ("pairs", "samples", "errors"):
            cols = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE "
                               "table_name = ? ORDER BY column_index", [t]).fetchall()
            sel = ", ".join(f"{quote_ident(c)}::VARCHAR" for c, _ in cols)
            got[t] = (cols, sorted(map(repr, con.execute(f"SELECT {sel} FROM {t}").fetchall())))
        return got
    finally:
        con.close()


def test_a_run_resumed_from_a_store_written_row_by_row_stores_what_row_by_row_would(
        tmp_path, monkeypatch):
    """A store written by the row-at-a-time writers (as rmjudge 0.6 wrote), resumed with the
    one-statement writers, holds exactly what resuming it row by row holds: passthrough columns
    of every kind widening BIGINT -> DOUBLE -> VARCHAR across chunks and across the resume,
    keys that differ by case or are named like SQL keywords or core columns, error rows that a
    later run fixes or fails again, and an edited row judged again (--rejudge-changed)."""
    import json

    import rmjudge.store.writes as run_store  # where `Store.commit` looks them up
    from rmjudge.store import bulk

    first = [row(0, n=1, mix=1, ok=True, tags=[1], ORDER=1, Id="x", select="s", Label="L"),
             row(1, n=2**62, mix=2.5, ok=False, tags={"a": 1}, note="a\x00b \u2603"),
             {"id": "p2", "prompt": "no responses"}, row(3, mix=None)]
    second = [first[0], first[1], row(2, n=-3), row(3, mix="text", ok=1),
              row(4, n=2**64, tags="plain", note=["x", {"y": None}], N=7, n_2=0.5),
              row(5, n=1.5, mix=True, big="z" * 3000),
              row(1, n=3, note="a duplicate id"), {"id": "p6", "prompt": "still no responses"}]
    second[1] = row(1, n=2**62, mix=2.5, ok=False, tags={"a": 1}, note="edited \x00")
    held = []
    for resumed_with in ("bulk", "each"):
        src, out = tmp_path / f"{resumed_with}.jsonl", str(tmp_path / f"{resumed_with}.duckdb")
        with monkeypatch.context() as m:
            m.setattr(run_store, "insert_rows", bulk.insert_rows_each)
            m.setattr(run_store, "delete_in", bulk.delete_in_each)
            src.write_text("".join(json.dumps(o) + "\n" for o in first))  # ints past 64 bits
            score(str(src), ScriptedEngine(length_judge), settings(), output=out, commit_every=1)
        with monkeypatch.context() as m:
            if resumed_with == "each":
                m.setattr(run_store, "insert_rows", bulk.insert_rows_each)
                m.setattr(run_store, "delete_in", bulk.delete_in_each)
            src.write_text("".join(json.dumps(o) + "\n" for o in second))
            s = score(str(src), ScriptedEngine(length_judge), settings(), output=out,
                      commit_every=2, rejudge_changed=True)
        assert (s.judged, s.skipped) == (5, 1)
        held.append(_tables(out))
    assert held[0] == held[1]
    types = dict(held[0]["pairs"][0])
    assert (types["n"], types["mix"], types["ok"], types["tags"]) == (
        "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR")
    assert types["ORDER"] == "BIGINT" and types["N_2"] == "BIGINT" and types["n_2_2"] == "DOUBLE"
    assert {"input_Id", "select", "input_Label"} <= set(types)
    errors = held[0]["errors"][1]
    assert len(errors) == 2 and any("duplicate id" in e for e in errors)
    assert len(held[0]["pairs"][1]) == 6


def test_nan_stays_nan_in_rows_written_one_statement_per_chunk(tmp_path):
    """DuckDB before 2.0 reads a NaN inside a list parameter as NULL: the one-statement writes
    keep NaN as NaN, as one statement per row did, next to NULL and the infinities, in rows
    written directly and in a passthrough column of a Parquet input (the store and its
    Parquet export)."""
    import math

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rmjudge.store.bulk import insert_rows, insert_rows_each

    nan, inf = float("nan"), float("inf")
    data = [[1, nan, "a", nan], [2, 0.25, None, 1.5], [3, None, "c", None], [4, -inf, "d", inf],
            [5, 2**62 + 1, "e", nan]]
    held = []
    for insert in (insert_rows, insert_rows_each):
        con = duckdb.connect(":memory:")
        con.execute('CREATE TABLE t (k BIGINT PRIMARY KEY, x DOUBLE, s VARCHAR, "y" FLOAT)')
        insert(con, "t", data[:2])
        insert(con, "t", data[2:], replace=True)
        held.append([tuple(map(repr, r)) for r in con.execute("SELECT * FROM t ORDER BY k").fetchall()])
        con.close()
    assert held[0] == held[1]
    assert [r[1] for r in held[0]] == ["nan", "0.25", "None", "-inf", repr(float(2**62 + 1))]
    assert [r[3] for r in held[0]] == ["nan", "1.5", "None", "inf", "nan"]

    src = str(tmp_path / "in.parquet")
    objs = [row(i) for i in range(3)]
    pq.write_table(pa.Table.from_pylist(
        [{**o, "weight": w} for o, w in zip(objs, [nan, 0.25, None])]), src)
    for out in (str(tmp_path / "o.duckdb"), str(tmp_path / "o.parquet")):
        score(src, ScriptedEngine(length_judge), settings(), output=out, commit_every=3)
    got = dict(rows(str(tmp_path / "o.duckdb"), "SELECT id, weight FROM pairs"))
    assert math.isnan(got["p0"]) and got["p1"] == 0.25 and got["p2"] is None
    exported = {r["id"]: r["weight"] for r in pq.read_table(str(tmp_path / "o.parquet")).to_pylist()}
    assert math.isnan(exported["p0"]) and exported["p1"] == 0.25 and exported["p2"] is None


@pytest.mark.parametrize("change", ["widen", "add"])
def test_an_edited_row_keeping_its_id_is_judged_again_in_a_chunk_that_alters_pairs(
        tmp_path, change):
    """An edited row that keeps its id, judged again with --rejudge-changed in a chunk that
    widens or adds a passthrough column: its new verdict replaces the old one in one
    transaction. (DuckDB before 2.0 refuses a key deleted and inserted again when the table
    was altered in between, so the columns change before the old pair is deleted.)"""
    src = tmp_path / "in.jsonl"
    out = str(tmp_path / "o.duckdb")
    write_jsonl(src, [row(0, n=1), row(1, n=2)])
    score(str(src), ScriptedEngine(length_judge), settings(), output=out)
    edited = row(1, **({"n": "two"} if change == "widen" else {"n": 2, "extra": "new"}))
    edited["response_b"] = "an edited answer, much longer than the chosen one ever was"
    write_jsonl(src, [row(0, n=1), edited])
    s = score(str(src), ScriptedEngine(length_judge), settings(), output=out,
              rejudge_changed=True)
    assert (s.judged, s.skipped) == (1, 1)
    got = rows(out, "SELECT id, n::VARCHAR, response_b FROM pairs ORDER BY id")
    assert got == [("p0", "1", "short 0"),
                   ("p1", "two" if change == "widen" else "2", edited["response_b"])]
    assert rows(out, "SELECT count(DISTINCT pair_id) FROM samples") == [(2,)]
    assert rows(out, "SELECT count(*) FROM errors") == [(0,)]


def test_a_row_with_more_values_than_columns_is_refused_not_cut(tmp_path):
    """A row of the wrong length is refused, as one statement per row refuses it: the values a
    column list does not name are never dropped silently (and the one statement stores none of
    the rows; row by row, the rows before it stay, as outside the store's transactions)."""
    from rmjudge.store.bulk import insert_rows, insert_rows_each

    for insert in (insert_rows, insert_rows_each):
        con = duckdb.connect(":memory:")
        con.execute("CREATE TABLE t (a VARCHAR, b VARCHAR)")
        for bad in ([["a1", "b1"], ["a2", "b2", "lost"]], [["a1", "b1", "lost"], ["a2", "b2"]],
                    [["a1", "b1", "lost"]]):
            with pytest.raises((ValueError, duckdb.Error)):
                insert(con, "t", bad)
        if insert is insert_rows:
            assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)
        con.close()


def test_a_greedy_table_of_another_version_lacking_a_column_is_one_error_not_a_keyerror(
        tmp_path):
    """Tables other than pairs, samples and errors are checked where rows are written: a
    missing column is a user error naming the file, not a KeyError."""
    from rmjudge.core.errors import UserError

    out = str(tmp_path / "o.duckdb")
    score(PAIRS, ScriptedEngine(length_judge), settings(), output=out)
    con = duckdb.connect(out)
    con.execute('CREATE TABLE greedy (pair_id VARCHAR, "order" VARCHAR, text VARCHAR, '
                'PRIMARY KEY (pair_id, "order"))')
    con.close()
    with Store(out) as store:
        with pytest.raises(UserError, match=r"o\.duckdb: its table greedy lacks the columns "
                                            r"prediction, letter"):
            store.add_greedy([["p1", "ab", "t", 1, "A", "generated", 0.5, 3, "stop", "x", 8]])
    assert rows(out, "SELECT count(*) FROM greedy") == [(0,)]


def test_a_duckdb_below_the_floor_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """DuckDB 1.1 refuses an id deleted and inserted again in one transaction, which
    `--rejudge-changed` does for an edited row that keeps its id, and 1.2 and 1.3 crash on the
    export of `test_hostile_values_and_names_become_rows_not_crashes`, and 1.4.0 and 1.4.1
    refuse compare's second ATTACH: the floor is 1.4.2, declared in pyproject.toml and checked
    where a store opens (an install that went past pip)."""
    import tomllib

    import duckdb

    from rmjudge.store.run_store import DUCKDB_MIN, check_duckdb

    deps = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())[
        "project"]["dependencies"]
    assert "duckdb>=1.4.2" in deps and DUCKDB_MIN == (1, 4, 2)
    for ok in (duckdb.__version__, "1.4.2", "1.10.1", "2.0.0.dev12", "2.0"):
        check_duckdb(ok)
    monkeypatch.setattr(duckdb, "__version__", "1.4.1")
    out = tmp_path / "o.duckdb"
    with pytest.raises(StoreError, match=r"^rmjudge needs DuckDB 1\.4\.2 or later, found 1\.4\.1: "
                                         r"pip install -U 'duckdb>=1\.4\.2'$"):
        Store(str(out))
    assert os.listdir(tmp_path) == []
