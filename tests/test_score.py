"""The score pipeline on the scripted engine: tables, bad input, resume, settings, locks, exports."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest
from helpers import first_slot_response, pref, refl, rows

from rmjudge.engine.fake import ScriptedEngine
from rmjudge.runs.pipeline import score
from rmjudge.core.settings import JudgeSettings
from rmjudge.files import StoreError
from rmjudge.store import Store

DATA = Path(__file__).parent / "data"


def length_judge(req, i):
    """Prefers the longer response, except every third rollout disagrees; reflections pick 1."""
    if req.share_key[2] == "reflection":
        return refl(1 if i % 2 == 0 else 2)
    body = req.messages[-1]["content"]
    r1 = first_slot_response(req)
    r2 = body.split("### Response 2\n", 1)[1].split("\n\n## Your task", 1)[0]
    pred = 1 if len(r1) >= len(r2) else 2
    if i % 3 == 2:
        pred = 3 - pred
    return pref(pred, -0.1 * (i + 1), f"analysis {i}")


class Crash(Exception):
    pass


def crashing_judge(after_calls: int):
    calls = {"n": 0}

    def respond(req, i):
        calls["n"] += 1
        if calls["n"] > after_calls:
            raise Crash()
        return length_judge(req, i)

    return respond


def settings(**kw):
    return JudgeSettings(**{"samples": 3, "seed": 1, **kw})


def test_mixed_bad_input_judges_good_rows_and_records_every_bad_one(tmp_path):
    out = str(tmp_path / "o.duckdb")
    s = score(str(DATA / "mixed_bad.jsonl"), ScriptedEngine(length_judge), settings(), output=out)
    assert s.judged == 4 and s.errors == 11
    ids = [r[0] for r in rows(out, "SELECT id FROM pairs ORDER BY row_number")]
    assert ids == ["g1", "g2", "g3", "g4"]
    errs = dict(rows(out, "SELECT row_number, reason FROM errors"))
    assert "line 2 is not valid JSON" in errs[2]
    assert errs[3].startswith("line 3 is an array")
    assert errs[4].startswith("line 4 is a number")
    assert "no two responses" in errs[5]
    assert "field 'chosen' is empty" in errs[6]
    assert "field 'chosen' must be a string, got a number" in errs[7]
    assert "duplicate id 'g1' (first seen on row 1)" in errs[9]
    assert "must end with a user turn" in errs[10]
    assert "no two responses" in errs[11]
    assert "field 'prompt' must be a string or a list" in errs[12]
    assert "not valid UTF-8" in errs[15]
    # every input line is accounted for: judged or an error (blank line 13 is not a row)
    assert len(ids) + len(errs) == 15
    raw = rows(out, "SELECT raw FROM errors WHERE row_number = 2")[0][0]
    assert raw.startswith('{"id": "bad-json"')


def test_tables_follow_the_contract(tmp_path):
    out = str(tmp_path / "o.duckdb")
    score(str(DATA / "pandalm_5.jsonl"), ScriptedEngine(length_judge), settings(), output=out)
    cols = {r[0] for r in rows(out, "SELECT column_name FROM duckdb_columns() WHERE table_name='pairs'")}
    assert {"id", "verdict", "verdict_ab", "verdict_ba", "consistent", "p_a", "label", "correct",
            "shortcut_ab", "shortcut_ba", "source", "subset"} <= cols
    n_pairs, = rows(out, "SELECT count(*) FROM pairs")[0]
    assert n_pairs == 5
    # 3 rollouts per order, reflections only where rollouts disagreed
    per = rows(out, """SELECT pair_id, "order", count(*) FILTER (WHERE stage='rollout'),
                       count(*) FILTER (WHERE stage='reflection') FROM samples GROUP BY 1, 2""")
    assert len(per) == 10 and all(r[2] == 3 and r[3] in (0, 2) for r in per)
    run = rows(out, "SELECT pairs_judged, status, model_sha256 FROM runs")
    assert run == [(5, "finished", "0" * 64)]
    srcs = rows(out, "SELECT DISTINCT source FROM pairs")
    assert srcs == [("pandalm",)]


def test_resume_after_crash_gives_exactly_one_row_per_pair(tmp_path):
    out = str(tmp_path / "o.duckdb")
    src = str(DATA / "pandalm_5.jsonl")
    with pytest.raises(Crash):
        score(src, ScriptedEngine(crashing_judge(40), pairs_in_flight=1), settings(), output=out,
              commit_every=1)
    partial = rows(out, "SELECT count(*) FROM pairs")[0][0]
    assert 0 < partial < 5
    s = score(src, ScriptedEngine(length_judge), settings(), output=out)
    assert s.skipped == partial and s.judged == 5 - partial
    assert rows(out, "SELECT count(*), count(DISTINCT id) FROM pairs") == [(5, 5)]
    dupes = rows(out, """SELECT count(*) FROM (SELECT pair_id, "order", stage, idx FROM samples
                         GROUP BY ALL HAVING count(*) > 1)""")
    assert dupes == [(0,)]
    # a third run has nothing left to do
    s = score(src, ScriptedEngine(length_judge), settings(), output=out)
    assert s.judged == 0 and s.skipped == 5


def test_same_verdicts_with_and_without_resume(tmp_path):
    src = str(DATA / "pandalm_5.jsonl")
    a = str(tmp_path / "a.duckdb")
    score(src, ScriptedEngine(length_judge), settings(), output=a)
    b = str(tmp_path / "b.duckdb")
    score(src, ScriptedEngine(length_judge), settings(), output=b, limit=2)
    score(src, ScriptedEngine(length_judge), settings(), output=b)
    q = "SELECT id, verdict, verdict_ab, verdict_ba, p_a FROM pairs ORDER BY id"
    assert rows(a, q) == rows(b, q)


def test_other_settings_on_the_same_output_are_refused(tmp_path):
    out = str(tmp_path / "o.duckdb")
    src = str(DATA / "pandalm_5.jsonl")
    score(src, ScriptedEngine(length_judge), settings(), output=out, limit=1)
    with pytest.raises(StoreError) as e:
        score(src, ScriptedEngine(length_judge), settings(samples=4, seed=2), output=out)
    assert str(e.value) == (
        f"{out} holds results made with other settings (samples 3 -> 4, seed 1 -> 2); rerun with "
        "the same settings to resume, use -o to write elsewhere, or --overwrite to start again")
    s = score(src, ScriptedEngine(length_judge), settings(samples=4, seed=2), output=out, overwrite=True)
    assert s.judged == 5


@pytest.mark.parametrize("old_format", [None, 2])
def test_an_output_made_with_an_older_prompt_format_is_not_resumed(tmp_path, old_format):
    # a run of rmjudge 0.3.0 recorded no prompt_format; 0.4.0 wrote format 2, whose
    # reflection prompt was worded otherwise
    import duckdb
    import orjson

    from rmjudge.prompts import PROMPT_FORMAT

    out = str(tmp_path / "o.duckdb")
    src = str(DATA / "pandalm_5.jsonl")
    score(src, ScriptedEngine(length_judge), settings(), output=out, limit=1)
    con = duckdb.connect(out)
    old = orjson.loads(con.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()[0])
    if old_format is None:
        del old["prompt_format"]
    else:
        old["prompt_format"] = old_format
    con.execute("UPDATE meta SET value = ? WHERE key = 'settings'", [orjson.dumps(old).decode()])
    con.close()
    with pytest.raises(StoreError, match=rf"other settings \(prompt_format {old_format} -> "
                                         rf"{PROMPT_FORMAT}\)"):
        score(src, ScriptedEngine(length_judge), settings(), output=out)


def test_a_second_writer_is_locked_out(tmp_path):
    out = str(tmp_path / "o.duckdb")
    first = Store(out)
    try:
        with pytest.raises(StoreError, match="another rmjudge process is writing"):
            Store(out)
    finally:
        first.close()
    Store(out).close()  # free again


@pytest.mark.parametrize("ext", ["parquet", "jsonl"])
def test_parquet_and_jsonl_outputs(tmp_path, ext):
    out = str(tmp_path / f"labels.{ext}")
    s = score(str(DATA / "mixed_bad.jsonl"), ScriptedEngine(length_judge), settings(), output=out)
    assert set(map(os.path.basename, s.files)) == {
        f"labels.{ext}", f"labels.samples.{ext}", f"labels.errors.{ext}"}
    reader = "read_parquet" if ext == "parquet" else "read_json_auto"
    con = duckdb.connect()
    assert con.execute(f"SELECT count(*) FROM {reader}('{out}')").fetchone() == (4,)
    n = con.execute(f"SELECT count(*) FROM {reader}('{tmp_path}/labels.errors.{ext}')").fetchone()
    assert n == (11,)
    # rerun resumes from the work store
    s = score(str(DATA / "mixed_bad.jsonl"), ScriptedEngine(length_judge), settings(), output=out)
    assert s.judged == 0 and s.skipped == 4


def test_verdicts_recompute_from_samples(tmp_path):
    out = str(tmp_path / "o.duckdb")
    score(str(DATA / "pandalm_5.jsonl"), ScriptedEngine(length_judge), settings(samples=5),
          output=out)
    from recompute import recompute_all

    recompute_all(out)
