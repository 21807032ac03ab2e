"""Scaling out: `--shard I/N` runs merged with `rmjudge merge` equal one unsharded run; the merge
refuses disagreeing or overlapping shards and finds missing ones; the Ray runner (slow) judges
with a pool of engines, survives a killed worker and writes the same tables."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from helpers import pref, refl, rows
from test_score import length_judge

from rmjudge.cli import main
from rmjudge.engine.fake import ScriptedEngine
from rmjudge.runs.merge import MergeError, merge
from rmjudge.io.intake import in_shard
from rmjudge.runs.pipeline import score
from rmjudge.core.settings import JudgeSettings

DATA = Path(__file__).parent / "data"
HAS_RAY = importlib.util.find_spec("ray") is not None
PAIR_Q = ("SELECT id, row_number, verdict, verdict_ab, verdict_ba, consistent, p_a, label, "
          "response_a, response_b FROM pairs ORDER BY id")
SAMPLE_Q = ('SELECT pair_id, "order", stage, idx, text, prediction, confidence, is_anchor, '
            "won_reflection FROM samples ORDER BY ALL")
ERROR_Q = "SELECT row_number, id, reason FROM errors ORDER BY row_number"


def seeded_judge(req, i):
    """Rollouts drawn from the request's seed (so they depend on the seed and pair id only);
    reflections pick a slot from the seed too."""
    rng = random.Random(req.seed * 1000 + i)
    if req.share_key[2] == "reflection":
        return refl(rng.choice((1, 2)))
    return pref(rng.choice((1, 2)), -rng.random(), f"analysis {rng.random():.6f}")


def mixed_input(tmp_path) -> str:
    """Five PandaLM pairs followed by the bad-input matrix (4 good rows, 11 bad ones)."""
    path = tmp_path / "in.jsonl"
    path.write_bytes((DATA / "pandalm_5.jsonl").read_bytes() + (DATA / "mixed_bad.jsonl").read_bytes())
    return str(path)


def settings(**kw):
    return JudgeSettings(**{"samples": 3, "seed": 7, **kw})


def run_shards(src, tmp_path, n, respond=seeded_judge, js=None, **kw) -> list[str]:
    outs = []
    for i in range(n):
        out = str(tmp_path / f"out-{i}.duckdb")
        score(src, ScriptedEngine(respond, **kw), js or settings(), output=out, shard=(i, n))
        outs.append(out)
    return outs


# -- sharding ---------------------------------------------------------------------------------

def test_shards_partition_the_input_exactly_once(tmp_path):
    src = mixed_input(tmp_path)
    outs = run_shards(src, tmp_path, 3)
    ids = [r[0] for o in outs for r in rows(o, "SELECT id FROM pairs")]
    errs = [r[0] for o in outs for r in rows(o, "SELECT row_number FROM errors")]
    assert sorted(ids) == sorted([f"pandalm/{k}" for k in range(5)] + ["g1", "g2", "g3", "g4"])
    assert len(errs) == len(set(errs)) == 11
    # every input row (20 non-blank lines of 21) is in exactly one shard, as a pair or an error row
    pair_rows = [r[0] for o in outs for r in rows(o, "SELECT row_number FROM pairs")]
    assert sorted(pair_rows + errs) == [n for n in range(1, 22) if n != 18]
    # more than one shard has work, so the partition is not trivial
    assert sum(1 for o in outs if rows(o, "SELECT count(*) FROM pairs")[0][0]) >= 2
    for i, o in enumerate(outs):
        assert rows(o, "SELECT shard FROM runs") == [(f"{i}/3",)]
        for (pid,) in rows(o, "SELECT id FROM pairs"):
            assert in_shard(pid, (i, 3))


@pytest.mark.parametrize("respond", [seeded_judge, length_judge], ids=["seeded", "length"])
def test_merged_shards_equal_one_unsharded_run(tmp_path, respond):
    src = mixed_input(tmp_path)
    whole = str(tmp_path / "whole.duckdb")
    score(src, ScriptedEngine(respond), settings(), output=whole)
    # other shapes of batching on the shard side: one pair in flight at a time
    outs = run_shards(src, tmp_path, 3, respond=respond, pairs_in_flight=1)
    merged = str(tmp_path / "all.duckdb")
    report = merge(outs, merged, input=src)
    assert report.problems == [] and report.output == merged
    assert (report.pairs, report.errors, report.runs, report.input_rows) == (9, 11, 3, 20)
    assert rows(merged, PAIR_Q) == rows(whole, PAIR_Q)
    assert rows(merged, SAMPLE_Q) == rows(whole, SAMPLE_Q)
    assert rows(merged, ERROR_Q) == rows(whole, ERROR_Q)
    # the seeded judge really varies with the pair: not every pair gets the same verdicts
    if respond is seeded_judge:
        assert len(set(rows(merged, "SELECT verdict_ab, verdict_ba FROM pairs"))) > 1
    # runs renumbered 1..3, each pair points at the run of its own shard
    runs = rows(merged, "SELECT run_id, shard, merged_from FROM runs ORDER BY run_id")
    assert [(r[0], r[1]) for r in runs] == [(1, "0/3"), (2, "1/3"), (3, "2/3")]
    assert [r[2] for r in runs] == outs
    for pid, run_id in rows(merged, "SELECT id, run_id FROM pairs"):
        assert in_shard(pid, (run_id - 1, 3))
    con = duckdb.connect(merged, read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone() == \
        duckdb.connect(whole, read_only=True).execute(
            "SELECT value FROM meta WHERE key = 'settings'").fetchone()
    con.close()


def test_a_resumed_shard_merges_like_a_clean_one(tmp_path):
    src = mixed_input(tmp_path)
    whole = str(tmp_path / "whole.duckdb")
    score(src, ScriptedEngine(seeded_judge), settings(), output=whole)
    outs = run_shards(src, tmp_path, 2)
    os.remove(outs[1])
    score(src, ScriptedEngine(seeded_judge), settings(), output=outs[1], shard=(1, 2), limit=8)
    score(src, ScriptedEngine(seeded_judge), settings(), output=outs[1], shard=(1, 2))
    merged = str(tmp_path / "all.duckdb")
    report = merge(outs, merged, input=src)
    assert report.problems == [] and report.runs == 3
    assert rows(merged, PAIR_Q) == rows(whole, PAIR_Q)


def test_merge_carries_human_labels_with_their_pairs(tmp_path):
    """Labels from `rmjudge review import` into each shard follow their pair ids into the merged
    store; the same label held by two shards is kept once."""
    from rmjudge.store import Store

    src = mixed_input(tmp_path)
    outs = run_shards(src, tmp_path, 2)
    ids = [[r[0] for r in rows(o, "SELECT id FROM pairs ORDER BY id")] for o in outs]
    with Store(outs[0]) as st:
        st.add_human_labels([(ids[0][0], "ann", "A", "r0.csv"), (ids[0][0], "bob", "B", "r0.csv"),
                             (ids[1][0], "ann", "tie", "both.csv")])
    with Store(outs[1]) as st:
        st.add_human_labels([(ids[1][0], "ann", "tie", "both.csv"), (ids[1][1], "ann", "B", "r1.csv")])
    merged = str(tmp_path / "all.duckdb")
    r = CliRunner().invoke(main, ["merge", *outs, "-o", merged, "--input", src])
    assert r.exit_code == 0, r.output
    assert rows(merged, "SELECT pair_id, reviewer, label, source FROM human_labels ORDER BY ALL") \
        == sorted([(ids[0][0], "ann", "A", "r0.csv"), (ids[0][0], "bob", "B", "r0.csv"),
                   (ids[1][0], "ann", "tie", "both.csv"), (ids[1][1], "ann", "B", "r1.csv")])
    # shards without labels merge as before: no human_labels table
    (tmp_path / "plain").mkdir()
    plain = run_shards(src, tmp_path / "plain", 2)
    merge(plain, str(tmp_path / "plain.duckdb"))
    assert rows(str(tmp_path / "plain.duckdb"), "SELECT count(*) FROM duckdb_tables() WHERE "
                "table_name = 'human_labels'") == [(0,)]


def test_merge_refuses_shards_that_label_a_pair_differently(tmp_path):
    from rmjudge.store import Store

    src = mixed_input(tmp_path)
    outs = run_shards(src, tmp_path, 2)
    pid = rows(outs[0], "SELECT min(id) FROM pairs")[0][0]
    for out, label in zip(outs, ("A", "B")):
        with Store(out) as st:
            st.add_human_labels([(pid, "ann", label, "r.csv")])
    merged = str(tmp_path / "all.duckdb")
    r = CliRunner().invoke(main, ["merge", *outs, "-o", merged])
    assert r.exit_code == 1 and not os.path.exists(merged)
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: 1 human label(s) differ between shards: {pid!r} by 'ann' "
                      "(out-0.duckdb and out-1.duckdb); import the right review file again into "
                      "the shard that holds the wrong label (rmjudge review import SHARD.duckdb "
                      "FILE) and merge again"], r.output
    assert "Traceback" not in r.output


# -- merge refusals -----------------------------------------------------------------------------

def test_merge_refuses_shards_with_other_settings(tmp_path):
    src = mixed_input(tmp_path)
    a = str(tmp_path / "a.duckdb")
    b = str(tmp_path / "b.duckdb")
    score(src, ScriptedEngine(seeded_judge), settings(), output=a, shard=(0, 2))
    score(src, ScriptedEngine(seeded_judge), settings(samples=4), output=b, shard=(1, 2))
    out = str(tmp_path / "all.duckdb")
    with pytest.raises(MergeError) as e:
        merge([a, b], out)
    assert str(e.value) == (
        f"the shards disagree on settings: {a} -> {b}: samples 3 -> 4; rerun the odd shard with "
        "the same model and options (or merge only shards made alike)")
    assert not os.path.exists(out)
    res = CliRunner().invoke(main, ["merge", a, b, "-o", out])
    assert res.exit_code == 1
    assert "Error: the shards disagree on settings" in res.output and "samples 3 -> 4" in res.output
    assert "Traceback" not in res.output


def test_merge_of_a_ranked_store_and_a_pairs_store_names_the_two_kinds(tmp_path):
    """Before, the merge printed a settings diff (rank: ... -> absent) as if one shard had been
    run with other options."""
    import json

    from helpers import quality_engine

    from rmjudge.rank import rank

    pairs_in = tmp_path / "pairs.jsonl"
    pairs_in.write_text(json.dumps({"prompt": "q", "chosen": "a q=2", "rejected": "b q=1"}) + "\n")
    ranked_in = tmp_path / "ranked.jsonl"
    ranked_in.write_text(json.dumps({"prompt": "q", "responses": ["a q=1", "b q=2", "c q=3"]})
                         + "\n")
    js = JudgeSettings(samples=2, max_tokens=32, seed=3)
    a, b = str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb")
    score(str(pairs_in), quality_engine(), js, output=a)
    rank(str(ranked_in), b, engine=quality_engine(), judge=js)
    out = str(tmp_path / "all.duckdb")
    for shards in ([a, b], [b, a]):
        res = CliRunner().invoke(main, ["merge", *shards, "-o", out])
        lines = [x for x in res.output.splitlines() if x.strip()]
        assert res.exit_code == 1 and len(lines) == 1, res.output
        assert lines[0] == (f"Error: {b} is a ranked store (rmjudge rank) and {a} holds pairs "
                            "judged by rmjudge score: stores of different kinds cannot be "
                            "merged; merge the shards of one command")
        assert not os.path.exists(out)


# what `ray start --head`'s GCS (Ray 2.60) sent to an HTTP/2 preface: its SETTINGS frame header
HTTP2_SETTINGS_FRAME = b"\x00\x00\x18\x04\x00\x00\x00\x00\x00" + bytes(24)


@contextlib.contextmanager
def _answering(reply: bytes | None):
    """A TCP server on 127.0.0.1 that answers every connection with `reply` after reading what
    the client sends (None: never answers); yields its port."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.recv(1024)
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept, so the port stops listening
        server.close()
        for conn in held:
            conn.close()


def _ray_score_error_line(tmp_path, address: str) -> str:
    """`rmjudge ray-score --address ADDRESS` into tmp_path: its one stderr line, after checking
    it failed with exit 1 and wrote nothing (no output, no work folder)."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "rmjudge", "ray-score",
                        str(DATA / "pandalm_5.jsonl"), "-o", str(tmp_path / "out.duckdb"),
                        "--address", address], capture_output=True, text=True, timeout=120)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    assert list(tmp_path.iterdir()) == []
    return lines[0]


def test_ray_score_at_a_port_that_is_not_a_ray_head_is_one_error_within_seconds(tmp_path):
    """A port that takes connections but is no Ray head (the dashboard's web server, or one
    that never answers): Ray retried it forever; now one `Error:` line, nothing written."""
    pytest.importorskip("ray")
    from rmjudge.runs.ray_runner import unreachable

    with _answering(None) as port:
        why = unreachable(f"127.0.0.1:{port}", timeout=0.3)
        assert why.startswith("it takes connections but does not answer as a Ray head"), why
    with _answering(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n") as port:
        assert "not the dashboard's port" in unreachable(f"ray://127.0.0.1:{port}")
        line = _ray_score_error_line(tmp_path, f"127.0.0.1:{port}")
    assert line.startswith(f"Error: cannot reach the Ray cluster at 127.0.0.1:{port}: it "
                           "takes connections but does not answer as a Ray head")


def test_ray_score_at_an_unreachable_address_is_one_error_before_any_work(tmp_path):
    """Before, `ray-score --address bogus:1` hung in Ray's connection retries (over 120 s)."""
    pytest.importorskip("ray")
    from rmjudge.runs.ray_runner import unreachable

    with _answering(HTTP2_SETTINGS_FRAME) as port:  # as a Ray head's GCS answers (gRPC)
        assert unreachable(f"127.0.0.1:{port}") is None
        assert unreachable(f"ray://127.0.0.1:{port}") is None
    assert unreachable("auto") is None and unreachable(None) is None
    assert "refused" in unreachable(f"127.0.0.1:{port}").lower()
    line = _ray_score_error_line(tmp_path, f"127.0.0.1:{port}")
    assert line.startswith(f"Error: cannot reach the Ray cluster at 127.0.0.1:{port}: ")
    assert "check --address" in line
    out = tmp_path / "out.duckdb"
    # an address Ray would take with minutes of retries or a traceback: one error, no writes
    from rmjudge.core.settings import EngineSettings
    from rmjudge.runs.ray_runner import RayRunError, RaySettings, ray_score

    for address in ("", ":6379", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:+1",
                    "127.0.0.1:1/x", "head", "http://head:6379"):
        with pytest.raises(RayRunError, match=r"is not a Ray address: give auto"):
            ray_score(str(DATA / "pandalm_5.jsonl"), JudgeSettings(), EngineSettings(), str(out),
                      rs=RaySettings(address=address),
                      engine_factory=lambda **k: pytest.fail("no engine before the checks"))
    assert list(tmp_path.iterdir()) == []


def test_merge_refuses_a_doubled_pair(tmp_path):
    src = mixed_input(tmp_path)
    outs = run_shards(src, tmp_path, 2)
    whole = str(tmp_path / "whole.duckdb")
    score(src, ScriptedEngine(seeded_judge), settings(), output=whole, limit=5)
    out = str(tmp_path / "all.duckdb")
    with pytest.raises(MergeError) as e:
        merge(outs + [whole], out)
    msg = str(e.value)
    assert msg.startswith("5 pair id(s) are in more than one shard: 'pandalm/0' (")
    assert "whole.duckdb" in msg and "the shards overlap" in msg
    assert not os.path.exists(out)
    # the same shard file under two names is an overlap too
    copy = str(tmp_path / "copy.duckdb")
    shutil.copy(outs[0], copy)
    with pytest.raises(MergeError, match=r"pair id\(s\) are in more than one shard"):
        merge([outs[0], copy, outs[1]], out)


def test_merge_finds_a_missing_shard(tmp_path):
    src = mixed_input(tmp_path)
    outs = run_shards(src, tmp_path, 3)
    out = str(tmp_path / "all.duckdb")
    missing_rows = sorted(r[0] for r in rows(outs[2], "SELECT row_number FROM pairs UNION ALL "
                                                        "SELECT row_number FROM errors"))
    report = merge(outs[:2], out, input=src)
    assert report.output is None and not os.path.exists(out)
    assert report.problems[0] == "missing shard(s) 2/3: run rmjudge score --shard for each and merge again"
    shown = ", ".join(str(n) for n in missing_rows[:5])
    assert report.problems[1].startswith(f"{len(missing_rows)} input row(s) are in no shard: rows {shown}")
    assert report.problems[1].endswith("(they belong to shard 2/3); run the missing shard(s) and merge again")
    res = CliRunner().invoke(main, ["merge", *outs[:2], "-o", out, "--input", src])
    assert res.exit_code == 1
    assert "problem: missing shard(s) 2/3" in res.output
    assert "Error: nothing written; fix the problems above or pass --allow-incomplete" in res.output
    # --allow-incomplete writes what there is
    res = CliRunner().invoke(main, ["merge", *outs[:2], "-o", out, "--input", src, "--allow-incomplete"])
    assert res.exit_code == 0, res.output
    n = sum(rows(o, "SELECT count(*) FROM pairs")[0][0] for o in outs[:2])
    assert rows(out, "SELECT count(*) FROM pairs") == [(n,)]


def test_merge_input_check_without_shard_specs(tmp_path):
    """Unsharded partial runs: the --input check alone finds the rows nobody judged."""
    src = mixed_input(tmp_path)
    a = str(tmp_path / "a.duckdb")
    score(src, ScriptedEngine(seeded_judge), settings(), output=a, limit=3)
    report = merge([a], str(tmp_path / "all.duckdb"), input=src)
    assert report.problems == ["17 input row(s) are in no shard: rows 4, 5, 6, 7, 8 and 12 more; "
                               "run the missing shard(s) and merge again"]


def test_merge_refuses_to_overwrite_and_names_the_fix(tmp_path):
    src = mixed_input(tmp_path)
    outs = run_shards(src, tmp_path, 2)
    out = str(tmp_path / "all.duckdb")
    res = CliRunner().invoke(main, ["merge", *outs, "-o", out],
                             env={"COLUMNS": "1000"})  # whole lines (80: test_output_width.py)
    assert res.exit_code == 0, res.output
    assert "rmjudge merge: 2 shards" in res.output and "-> " + out + ": 9 pairs, 11 errors" in res.output
    res = CliRunner().invoke(main, ["merge", *outs, "-o", out])
    assert res.exit_code == 1
    assert f"Error: {out} exists; use --overwrite to replace it or -o to write elsewhere" in res.output
    res = CliRunner().invoke(main, ["merge", *outs, "-o", out, "--overwrite"])
    assert res.exit_code == 0, res.output
    assert rows(out, "SELECT count(*) FROM pairs") == [(9,)]
    with pytest.raises(MergeError, match="is not an rmjudge run store"):
        empty = str(tmp_path / "empty.duckdb")
        duckdb.connect(empty).close()
        merge([outs[0], empty], str(tmp_path / "x.duckdb"))


# -- Ray runner -------------------------------------------------------------------------------

class FakeEngines:
    """Picklable engine factory for Ray workers: the scripted seeded judge; with `crash_marker`,
    the first worker to generate creates the marker and kills its own process."""

    def __init__(self, crash_marker: str | None = None):
        self.crash_marker = crash_marker

    def __call__(self, vocab_only: bool = False):
        marker = self.crash_marker

        class Engine(ScriptedEngine):
            def generate(self, requests):
                if marker and not os.path.exists(marker):
                    open(marker, "w").close()
                    os._exit(1)
                return super().generate(requests)

        return Engine(seeded_judge)


@pytest.fixture(scope="module")
def local_ray():
    if not HAS_RAY:
        pytest.skip("Ray is not installed: pip install '.[ray]'")
    import ray

    tests_dir = str(Path(__file__).parent)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": tests_dir + os.pathsep
                                       + os.environ.get("PYTHONPATH", "")}})
    yield ray
    ray.shutdown()


RAY_PAIR_Q = PAIR_Q.replace("row_number, ", "")


@pytest.mark.slow
def test_ray_runner_survives_a_killed_worker_and_matches_score(tmp_path, local_ray):
    from rmjudge.runs.ray_runner import RayRunError, RaySettings, ray_score
    from rmjudge.core.settings import EngineSettings

    src = mixed_input(tmp_path)
    whole = str(tmp_path / "whole.duckdb")
    score(src, ScriptedEngine(seeded_judge), settings(), output=whole)
    out = str(tmp_path / "ray.duckdb")
    marker = str(tmp_path / "crashed")
    s = ray_score(src, settings(), EngineSettings(), out,
                  rs=RaySettings(workers=2, rows_per_batch=4, cpus_per_worker=0.75),
                  engine_factory=FakeEngines(marker))
    assert os.path.exists(marker)  # a worker really died mid-run
    assert (s.batches, s.batches_done_before, s.pairs, s.errors, s.duplicates) == (5, 0, 9, 11, 1)
    assert rows(out, "SELECT count(*), count(DISTINCT id) FROM pairs") == [(9, 9)]
    assert rows(out, PAIR_Q) == rows(whole, PAIR_Q)
    assert rows(out, SAMPLE_Q) == rows(whole, SAMPLE_Q)
    assert rows(out, ERROR_Q) == rows(whole, ERROR_Q)
    # the workers judged 10 pairs: g1's later copy sits in another batch, so it was judged and
    # then moved to errors as a duplicate, exactly as rmjudge score records it
    assert rows(out, "SELECT run_id, status, pairs_judged FROM runs") == [(1, "finished", 10)]
    assert "duplicate id 'g1' (first seen on row 6)" in dict(rows(out, ERROR_Q.replace(", id", "")))[14]
    # a rerun finds every batch done, judges nothing and rebuilds the same tables
    s = ray_score(src, settings(), EngineSettings(), out,
                  rs=RaySettings(workers=2, rows_per_batch=4, cpus_per_worker=0.5),
                  engine_factory=FakeEngines())
    assert (s.batches, s.batches_done_before, s.judged, s.pairs) == (5, 5, 0, 9)
    assert rows(out, PAIR_Q) == rows(whole, PAIR_Q)
    assert rows(out, "SELECT run_id, status FROM runs") == [(1, "finished"), (2, "finished")]
    # other settings on the same work directory are refused, naming the difference
    with pytest.raises(RayRunError, match=r"holds batches made with other settings \(samples 3 -> 4\)"):
        ray_score(src, settings(samples=4), EngineSettings(), out, rs=RaySettings(),
                  engine_factory=FakeEngines())


# -- the embedded model (tiny settings) -------------------------------------------------------

STABLE_Q = ("SELECT id, row_number, label, prompt, response_a, response_b, rollouts_ab, rollouts_ba "
            "FROM pairs ORDER BY id")


def model_rows(tmp_path, n=3) -> str:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join((DATA / "pandalm_5.jsonl").read_bytes().splitlines(True)[:n]))
    return str(path)


def model_settings():
    return JudgeSettings(samples=2, max_tokens=16, seed=3)


@pytest.fixture(scope="module")
def model_runs(tmp_path_factory, embedded_engine):
    """One unsharded run and three --shard runs of 3 PandaLM rows on the embedded model."""
    tmp = tmp_path_factory.mktemp("model_shards")
    src = model_rows(tmp)
    engine = embedded_engine
    whole = str(tmp / "whole.duckdb")
    score(src, engine, model_settings(), output=whole)
    outs = []
    for i in range(3):
        outs.append(str(tmp / f"out-{i}.duckdb"))
        score(src, engine, model_settings(), output=outs[-1], shard=(i, 3))
    merged = str(tmp / "all.duckdb")
    report = merge(outs, merged, input=src)
    return src, whole, merged, report


@pytest.mark.slow
@pytest.mark.model
def test_model_shards_merge_to_every_pair_once(model_runs):
    src, whole, merged, report = model_runs
    assert report.problems == [] and (report.pairs, report.errors, report.runs) == (3, 0, 3)
    assert rows(merged, STABLE_Q) == rows(whole, STABLE_Q)
    assert rows(merged, "SELECT count(*), count(DISTINCT id) FROM pairs") == [(3, 3)]
    meta = "SELECT value FROM meta WHERE key = 'settings'"
    assert rows(merged, meta) == rows(whole, meta)
    assert "model_sha256" in rows(merged, meta)[0][0]
    # every pair has its 2 rollouts per order
    assert rows(merged, """SELECT count(*) FROM samples WHERE stage = 'rollout'""") == [(12,)]


@pytest.mark.slow
@pytest.mark.model
def test_model_shards_give_the_same_generations(model_runs):
    # the batched engine's numbers do not depend on what shares its decode calls, so a pair
    # gets the same samples whichever shard judges it
    src, whole, merged, report = model_runs
    q = 'SELECT pair_id, "order", stage, idx, text, confidence FROM samples ORDER BY ALL'
    assert rows(merged, q) == rows(whole, q)


@pytest.mark.slow
@pytest.mark.model
def test_ray_runner_on_the_embedded_model(tmp_path, local_ray, model_path):
    from rmjudge.runs.ray_runner import RaySettings, ray_score
    from rmjudge.core.settings import EngineSettings

    src = model_rows(tmp_path)
    out = str(tmp_path / "ray.duckdb")
    es = EngineSettings(model=model_path, threads=1)
    s = ray_score(src, model_settings(), es, out,
                  rs=RaySettings(workers=2, rows_per_batch=1, cpus_per_worker=0.75))
    assert (s.batches, s.judged, s.pairs, s.errors) == (3, 3, 3, 0)
    ref = str(tmp_path / "ref.duckdb")
    from rmjudge.engine import load_engine

    score(src, load_engine(es), model_settings(), output=ref, limit=0)  # schema and settings only
    cols = "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = '{}' ORDER BY column_index"
    for table in ("samples", "errors", "runs"):
        assert rows(out, cols.format(table)) == rows(ref, cols.format(table)), table
    # pairs: the contract's columns, then the input's passthrough columns
    ref_cols = rows(ref, cols.format("pairs"))
    assert rows(out, cols.format("pairs")) == ref_cols + [("source", "VARCHAR"), ("subset", "VARCHAR")]
    meta = "SELECT value FROM meta WHERE key = 'settings'"
    assert rows(out, meta) == rows(ref, meta)
    assert rows(out, "SELECT count(*), count(DISTINCT id) FROM pairs") == [(3, 3)]
    assert rows(out, "SELECT count(*) FROM samples WHERE stage = 'rollout'") == [(12,)]
    assert rows(out, "SELECT count(*) FROM pairs WHERE verdict IS NULL") == [(0,)]


def test_a_ray_work_dir_that_is_a_file_is_one_error_and_left_untouched(tmp_path):
    """Before, --work-dir naming a file was a NotADirectoryError traceback after the tokenizer
    loaded."""
    pytest.importorskip("ray")
    from rmjudge.core.settings import EngineSettings, JudgeSettings
    from rmjudge.runs.ray_runner import RayRunError, RaySettings, ray_score

    work = tmp_path / "notes.txt"
    work.write_text("mine")
    with pytest.raises(RayRunError, match=r"--work-dir .*notes.txt is a file, not a folder"):
        ray_score(str(DATA / "pandalm_5.jsonl"), JudgeSettings(), EngineSettings(),
                  str(tmp_path / "out.duckdb"), rs=RaySettings(work_dir=str(work)),
                  engine_factory=lambda **k: pytest.fail("no engine before the checks"))
    assert work.read_text() == "mine" and not (tmp_path / "out.duckdb").exists()


def test_ray_input_listing_and_batches_without_ray(tmp_path, monkeypatch):
    """The driver's file listing and the batch cutting (plain functions, no Ray needed)."""
    from rmjudge.runs.ray_runner import ROW_STRIDE, RayRunError, _Chunker, list_inputs

    (tmp_path / "b.jsonl").write_bytes((DATA / "mixed_bad.jsonl").read_bytes())
    (tmp_path / "a.jsonl").write_bytes((DATA / "pandalm_5.jsonl").read_bytes())
    (tmp_path / "notes.txt").write_text("not input")
    files = list_inputs(str(tmp_path))
    assert files == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    assert list_inputs(str(tmp_path / "b.*")) == files[1:]
    monkeypatch.chdir(tmp_path)
    assert list_inputs("a.jsonl") == files[:1]  # relative local paths too
    with pytest.raises(RayRunError, match="input not found"):
        list_inputs(str(tmp_path / "missing.jsonl"))
    chunk = _Chunker(files, 4, done={"f00001-r001000000005-001000000008"})
    out = chunk({"path": files[1], "bytes": (tmp_path / "b.jsonl").read_bytes()})
    import orjson

    keys = [(o["key"], o["stored"]) for o in out]
    # 15 rows in batches of 4; the batch already done comes with its folder, for the worker to
    # check its rows against (edited rows), not to judge it again
    assert keys == [("f00001-r001000000001-001000000004", ""),
                    ("f00001-r001000000005-001000000008", "f00001-r001000000005-001000000008"),
                    ("f00001-r001000000009-001000000012", ""),
                    ("f00001-r001000000014-001000000016", "")]
    first = orjson.loads(out[0]["rows"])
    assert [r[0] for r in first] == [ROW_STRIDE + n for n in (1, 2, 3, 4)]
    assert first[1][1] is None and first[1][2].startswith("b.jsonl: line 2 is not valid JSON")
    # a single input file keeps its own line numbers, as rmjudge score does
    single = _Chunker(files[1:], 100, done=set())({"path": files[1], "bytes": (tmp_path / "b.jsonl").read_bytes()})
    assert [r[0] for r in orjson.loads(single[0]["rows"])][:3] == [1, 2, 3]


def test_shard_spec_checks_ignore_other_run_labels():
    from rmjudge.runs.merge import ShardInfo, _check_shard_specs

    ok = [ShardInfo("a", 1, 0, 1, ["0/2"], "finished"), ShardInfo("b", 1, 0, 1, ["1/2"], "finished")]
    assert _check_shard_specs(ok) == []
    ray_run = [ShardInfo("r", 3, 0, 1, ["ray:2"], "finished")]
    assert _check_shard_specs(ray_run) == []
    mixed = ok[:1] + [ShardInfo("c", 1, 0, 2, ["0/3", "1/3"], "running")]
    assert _check_shard_specs(mixed) == [
        "the shards were cut with different counts (0/2, 0/3, 1/3)",
        "the last run in c did not finish (status running); rerun its rmjudge score command to "
        "complete it"]


def test_ray_batches_record_a_repeated_id_with_intakes_reason(tmp_path):
    """Assembling Ray batches gives a pair id seen again in a later batch the error row that
    `rmjudge score` gives a duplicate id (intake's reason, quotes in the id included), and
    keeps the first copy; no Ray needed: the batches are the Parquet files workers write."""
    from test_store import row, write_jsonl

    from rmjudge.io.intake import duplicate_reason
    from rmjudge.files import write_query_file
    from rmjudge.store import NewStore, Store, import_batches

    batches = tmp_path / "batches"
    inputs = [[row(0), row(9, id="it's")], [row(1), row(2), row(8, id="it's")]]
    for i, objs in enumerate(inputs):
        store_file = str(tmp_path / f"b{i}.duckdb")
        score(write_jsonl(tmp_path / f"in{i}.jsonl", objs), ScriptedEngine(length_judge),
              settings(samples=1), output=store_file)
        (batches / str(i)).mkdir(parents=True)
        with Store(store_file) as s:
            for t in ("pairs", "samples", "errors"):
                write_query_file(s.con, f"SELECT * FROM {t}",
                                 str(batches / str(i) / f"{t}.parquet"), "parquet")
    out = str(tmp_path / "all.duckdb")
    new = NewStore(out, {"samples": 1}, overwrite=False)
    counts = import_batches(new.store, str(batches), [])
    new.install()
    assert counts == (4, 1, 1)
    assert rows(out, "SELECT row_number, id, reason FROM errors") == [
        (3, "it's", duplicate_reason(3, "it's", 2))]
    reason = rows(out, "SELECT reason FROM errors")[0][0]
    assert "duplicate id \"it's\" (first seen on row 2)" in reason
    assert rows(out, "SELECT response_b FROM pairs WHERE id = 'it''s'") == [("short 9",)]


# -- Ray batches: types, keys, column map and edited rows, as `score` keeps them ---------------

TYPED_ROWS = [
    {"id": "p1", "prompt": "q1", "chosen": "a long answer 1", "rejected": "b1", "n": 1,
     "score": 1, "meta": {"a": 1}, "flag": True, "Tag": "x"},
    {"id": "p2", "prompt": "q2", "chosen": "a long answer 2", "rejected": "b2", "n": 2,
     "score": 2, "meta": [1, 2], "flag": False, "Tag": "y"},
    {"id": "p3", "prompt": "q3", "chosen": "a long answer 3", "rejected": "b3", "n": 3,
     "score": 2.5, "tag": "lower"},
    {"id": "p4", "prompt": "q4", "chosen": "a long answer 4", "rejected": "b4", "n": 4,
     "flag": True, "tag": "z"},
    {"id": "p5", "prompt": "q5", "chosen": "a long answer 5", "rejected": "b5", "n": 5,
     "note": "only here", "Tag": "w"},
    {"id": "p6", "prompt": "q6", "chosen": "a long answer 6", "rejected": "b6", "n": 6,
     "score": 7},
]
PAIRS_COLS = ("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'pairs' "
              "ORDER BY column_index")
COLUMN_MAP = "SELECT value FROM meta WHERE key = 'passthrough'"
TYPED_Q = ('SELECT id, row_number, verdict, label, response_a, n, score, CAST(meta AS VARCHAR), '
           'flag, "Tag", tag_2, note, content_hash FROM pairs ORDER BY id')


def write_rows(path, objs) -> str:
    import orjson

    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))
    return str(path)


def ray_batches_in_process(src: str, out: str, work: str, rows_per_batch: int,
                           rejudge_changed: bool = False) -> list[dict]:
    """What `ray_score` does, without Ray: the driver's tidying and chunking, one worker per
    batch, the assembly. Returns the workers' answers (one per batch)."""
    import orjson

    from rmjudge.runs.pipeline import verdict_settings
    from rmjudge.runs.ray_runner import _Chunker, _JudgeWorker, assemble, list_inputs
    from rmjudge.runs.setup import RunOptions
    from rmjudge.io.mapping import Mapper
    from rmjudge.core.settings import EngineSettings
    from rmjudge.store import recover_batches

    engine = ScriptedEngine(seeded_judge)
    js = settings()
    opts = RunOptions(js, EngineSettings(), Mapper({}, seed=js.seed),
                      rejudge_changed=rejudge_changed)
    vs = orjson.loads(orjson.dumps(verdict_settings(js, engine.info)))
    batches = os.path.join(work, "batches")
    os.makedirs(batches, exist_ok=True)
    recover_batches(batches)
    files = list_inputs(src)
    chunker = _Chunker(files, rows_per_batch, {d for d in os.listdir(batches)
                                               if not d.startswith(".")})
    worker = _JudgeWorker(lambda: engine, opts, vs, work, run_id=1)
    answers = []
    for f in files:
        with open(f, "rb") as fh:
            for b in chunker({"path": f, "bytes": fh.read()}):
                got = worker({k: [v] for k, v in b.items()})
                answers.append({k: v[0] for k, v in got.items()})
    assemble(work, out, vs, [])
    return answers


def test_ray_batches_keep_the_types_keys_and_column_map_of_score(tmp_path):
    """Batches of 2 rows: `score` (BIGINT -> DOUBLE across rows) and the Ray batches (BIGINT in
    one batch, DOUBLE in another) give the same columns, types, values and key map; "Tag" and
    "tag" (only in the second batch) stay two columns; JSON and BOOLEAN stay typed."""
    src = write_rows(tmp_path / "in.jsonl", TYPED_ROWS)
    whole = str(tmp_path / "whole.duckdb")
    score(src, ScriptedEngine(seeded_judge), settings(), output=whole)
    out = str(tmp_path / "ray.duckdb")
    answers = ray_batches_in_process(src, out, str(tmp_path / "work"), 2)
    assert [a["state"] for a in answers] == ["new"] * 3
    assert rows(out, PAIRS_COLS) == rows(whole, PAIRS_COLS)
    types = dict(rows(out, PAIRS_COLS))
    assert (types["n"], types["score"], types["meta"], types["flag"], types["Tag"],
            types["tag_2"]) == ("BIGINT", "DOUBLE", "JSON", "BOOLEAN", "VARCHAR", "VARCHAR")
    assert rows(out, COLUMN_MAP) == rows(whole, COLUMN_MAP)
    assert rows(out, TYPED_Q) == rows(whole, TYPED_Q)
    assert rows(out, "SELECT tag_2 FROM pairs WHERE id = 'p3'") == [("lower",)]


def test_ray_batches_find_edited_rows_and_judge_them_again_on_request(tmp_path):
    """A rerun meets finished batches again: unchanged ones stand, an edited row is refused
    (named) unless judged again, which rewrites its batch to what `score` of the edited
    input holds; a file that grew completes its last batch without a duplicate."""
    objs = [dict(r) for r in TYPED_ROWS[:5]]
    src = write_rows(tmp_path / "in.jsonl", objs)
    out, work = str(tmp_path / "ray.duckdb"), str(tmp_path / "work")
    ray_batches_in_process(src, out, work, 2)
    again = ray_batches_in_process(src, out, work, 2)
    assert [a["state"] for a in again] == ["done"] * 3
    objs[2]["chosen"] = "an edited answer 3"
    src = write_rows(tmp_path / "in.jsonl", objs)
    refused = ray_batches_in_process(src, out, work, 2)
    assert [(a["state"], a["changed"]) for a in refused] == [
        ("done", "[]"), ("changed", "[3]"), ("done", "[]")]
    redone = ray_batches_in_process(src, out, work, 2, rejudge_changed=True)
    assert [(a["state"], a["judged"]) for a in redone] == [("done", 0), ("updated", 1), ("done", 0)]
    objs.append(dict(TYPED_ROWS[5]))
    src = write_rows(tmp_path / "in.jsonl", objs)
    grown = ray_batches_in_process(src, out, work, 2)
    assert [(a["key"][-5:], a["state"], a["judged"]) for a in grown][-1] == ("00006", "updated", 1)
    assert sorted(os.listdir(os.path.join(work, "batches"))) == [
        "f00000-r000000000001-000000000002", "f00000-r000000000003-000000000004",
        "f00000-r000000000005-000000000006"]
    whole = str(tmp_path / "whole.duckdb")
    score(src, ScriptedEngine(seeded_judge), settings(), output=whole)
    assert rows(out, TYPED_Q) == rows(whole, TYPED_Q)
    assert rows(out, SAMPLE_Q) == rows(whole, SAMPLE_Q)
    assert rows(out, "SELECT count(*) FROM errors") == [(0,)]


def test_a_swap_of_batch_folders_cut_short_is_undone(tmp_path):
    """A worker killed between setting a finished batch aside and moving its new folder in
    leaves `.old-KEY-XXXXXXXX`: the next run puts it back; temporaries are removed."""
    from rmjudge.store import recover_batches

    batches = tmp_path / "batches"
    key = "f00000-r000000000001-000000000002"
    (batches / f".old-{key}-0123abcd").mkdir(parents=True)
    (batches / f".old-{key}-0123abcd" / "pairs.parquet").write_bytes(b"x")
    (batches / f".tmp-{key}-89abcdef").mkdir()
    (batches / "f00000-r000000000003-000000000003").mkdir()
    (batches / "f00000-r000000000003-000000000004").mkdir()  # the same batch, grown
    recover_batches(str(batches))
    assert sorted(os.listdir(batches)) == [key, "f00000-r000000000003-000000000004"]
    assert (batches / key / "pairs.parquet").read_bytes() == b"x"


@pytest.mark.slow
def test_ray_run_and_score_give_the_same_types_and_keys_and_rejudge_edited_rows(tmp_path,
                                                                                 local_ray):
    from rmjudge.runs.ray_runner import RayRunError, RaySettings, ray_score
    from rmjudge.core.settings import EngineSettings

    objs = [dict(r) for r in TYPED_ROWS]
    src = write_rows(tmp_path / "in.jsonl", objs)
    whole = str(tmp_path / "whole.duckdb")
    score(src, ScriptedEngine(seeded_judge), settings(), output=whole)
    out = str(tmp_path / "ray.duckdb")
    rs = RaySettings(workers=1, rows_per_batch=2, cpus_per_worker=0.5)
    s = ray_score(src, settings(), EngineSettings(), out, rs=rs, engine_factory=FakeEngines())
    assert (s.batches, s.pairs, s.errors) == (3, 6, 0)
    ident = "SELECT value FROM meta WHERE key = 'input'"
    assert rows(out, ident) == rows(whole, ident) and "fingerprint" in rows(out, ident)[0][0]
    assert rows(out, PAIRS_COLS) == rows(whole, PAIRS_COLS)
    assert rows(out, COLUMN_MAP) == rows(whole, COLUMN_MAP)
    assert rows(out, TYPED_Q) == rows(whole, TYPED_Q)
    objs[3]["rejected"] = "an edited b4"
    write_rows(tmp_path / "in.jsonl", objs)
    with pytest.raises(RayRunError, match=r"row 4 now holds other content .* --rejudge-changed"):
        ray_score(src, settings(), EngineSettings(), out, rs=rs, engine_factory=FakeEngines())
    s = ray_score(src, settings(), EngineSettings(), out, rs=rs, engine_factory=FakeEngines(),
                  rejudge_changed=True)
    assert (s.batches, s.batches_done_before, s.judged, s.pairs) == (3, 2, 1, 6)
    score(src, ScriptedEngine(seeded_judge), settings(), output=whole, overwrite=True)
    assert rows(out, TYPED_Q) == rows(whole, TYPED_Q)


# -- merge --input: pairs matched by id and checked by content; one Hub commit ----------------

def test_merge_input_check_matches_pairs_by_id_and_reports_edited_rows(tmp_path):
    lines = (DATA / "pandalm_5.jsonl").read_bytes().splitlines(True)
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(lines))
    outs = run_shards(str(src), tmp_path, 2)
    reordered = tmp_path / "reordered.jsonl"
    reordered.write_bytes(b"".join(reversed(lines)))
    report = merge(outs, str(tmp_path / "all.duckdb"), input=str(reordered))
    assert report.problems == [] and report.pairs == 5
    import json

    objs = [json.loads(x) for x in lines]
    objs[1]["rejected"] = objs[1]["rejected"] + " (edited)"
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(o) + "\n" for o in objs))
    report = merge(outs, str(tmp_path / "all2.duckdb"), input=str(edited))
    assert report.output is None and report.problems == [
        f"1 row(s) of {edited} hold other content than the pair judged for them: rows 2; rerun "
        "their shard's rmjudge score command with --rejudge-changed, then merge again"]


def test_merge_refuses_shards_of_two_hub_commits_and_records_the_commit(tmp_path):
    from rmjudge.store import Store

    outs = run_shards(str(DATA / "pandalm_5.jsonl"), tmp_path, 2)
    for out, commit in zip(outs, ("a" * 40, "a" * 40)):
        with Store(out) as s:
            s.set_meta("input", dict(s.meta("input"), source="hf://datasets/org/pairs",
                                     commit=commit))
    merged = str(tmp_path / "all.duckdb")
    merge(outs, merged)
    import json

    assert json.loads(rows(merged, "SELECT value FROM meta WHERE key = 'input'")[0][0])[
        "commit"] == "a" * 40
    with Store(outs[1]) as s:
        s.set_meta("input", dict(s.meta("input"), commit="b" * 40))
    with pytest.raises(MergeError, match=r"judged from different commits of their input: .*"
                                         r"out-0\.duckdb from a{40}, .*out-1\.duckdb from b{40}"):
        merge(outs, str(tmp_path / "all2.duckdb"))


def test_a_head_that_refuses_the_driver_is_one_error_naming_token_authentication(monkeypatch):
    """Ray 2.60's `ray start --head` turns token authentication on; a driver without
    RAY_AUTH_MODE=token is refused after Ray's retries with "Failed to connect": the error says
    what to set (checked by hand against a local `ray start --head`: docs/scaling.md)."""
    from rmjudge.runs.ray_runner import RayRunError, RaySettings, _connect

    class Ray:
        def is_initialized(self):
            return False

        def init(self, **kwargs):
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379")

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(RayRunError) as caught:
        _connect(Ray(), RaySettings(address="10.0.0.5:6379"))
    assert str(caught.value).startswith("cannot start or reach the Ray cluster at 10.0.0.5:6379: "
                                        "Failed to connect to Ray cluster at 10.0.0.5:6379; ")
    assert "set RAY_AUTH_MODE=token" in str(caught.value)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # already set: the hint would mislead
    with pytest.raises(RayRunError) as caught:
        _connect(Ray(), RaySettings(address="10.0.0.5:6379"))
    assert "RAY_AUTH_MODE" not in str(caught.value)
    with pytest.raises(RayRunError) as caught:  # a local instance has no head to authenticate
        _connect(Ray(), RaySettings(address=None))
    assert "RAY_AUTH_MODE" not in str(caught.value)


@pytest.mark.slow
def test_ray_workers_judge_with_the_prompt_style_the_driver_read(tmp_path, local_ray):
    """--criteria @FILE and --prompt-template are read once, by the driver; the workers get
    the style it read (pickled with the template's source) and judge exactly as `score`."""
    from rmjudge.runs.ray_runner import RaySettings, ray_score
    from rmjudge.core.settings import EngineSettings
    from test_run_setup import TEMPLATE

    crit, tmpl = tmp_path / "rubric.txt", tmp_path / "prompt.jinja"
    crit.write_text("Prefer the shorter answer.")
    tmpl.write_text(TEMPLATE)
    styled = settings(criteria=f"@{crit}", prompt_template=str(tmpl))
    src = mixed_input(tmp_path)
    whole = str(tmp_path / "whole.duckdb")
    score(src, ScriptedEngine(seeded_judge), styled, output=whole)
    out = str(tmp_path / "ray.duckdb")
    s = ray_score(src, styled, EngineSettings(), out,
                  rs=RaySettings(workers=1, rows_per_batch=8, cpus_per_worker=0.5),
                  engine_factory=FakeEngines())
    assert s.pairs == 9
    assert rows(out, PAIR_Q) == rows(whole, PAIR_Q)
    assert rows(out, SAMPLE_Q) == rows(whole, SAMPLE_Q)
