"""`rmjudge filter` output meant for publishing (evidence columns, typed columns, KTO, empty
results) and `rmjudge push` / `filter --push-to-hub` (upload folder, dataset card, the Hub
calls), all offline: judged tables come from `analysis_fixture` (scripted judge), the Hub is
either a recorder object or a stub HTTP server on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from analysis_fixture import ROWS, build, respond
from click.testing import CliRunner

from rmjudge.analysis.filter import FilterSettings, filter_table
from rmjudge.analysis.tables import open_judged
from rmjudge.analysis.typed import column_expression
from rmjudge.cli import main
from rmjudge.engine.fake import ScriptedEngine
from rmjudge.runs.pipeline import score
from rmjudge.publish import hub as hubmod
from rmjudge.publish.card import metadata, render_card
from rmjudge.publish.hub import HubError, prepare_folder, push, source_license
from rmjudge.analysis.filter_record import RecordError, record_path
from rmjudge.core.settings import JudgeSettings

MESSAGES = "list<element: struct<role: string, content: string>>"


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    return build(tmp_path_factory.mktemp("judged"))


@pytest.fixture(scope="module")
def flipped(tmp_path_factory):
    """--on-inconsistent confident: the five A-labelled pairs get B (order (B, A) is surer)."""
    return build(tmp_path_factory.mktemp("flipped"), on_inconsistent="confident")


def _load(path):
    import datasets

    kind = "parquet" if str(path).endswith(".parquet") else "json"
    return datasets.load_dataset(kind, data_files=str(path), split="train")


def _jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _front_matter(readme: str) -> dict:
    from huggingface_hub import DatasetCard

    return DatasetCard(readme).data.to_dict()


# -- evidence columns ---------------------------------------------------------------------------
def test_evidence_columns_follow_the_chosen_response(tmp_path, flipped):
    out = tmp_path / "ev.jsonl"
    with open_judged(flipped) as t:
        s = filter_table(t, str(out), FilterSettings(
            consistent_only=False, relabel=True, relabel_min=0.5, evidence=True,
            keep_columns=("id",)))
        truth = {r[0]: r[1:] for r in t.sql(
            "SELECT id, verdict, p_a, consistent, verdict_ab, verdict_ba FROM pairs")}
    assert (s.kept, s.swapped) == (3, 5)
    rows = {r["id"]: r for r in _jsonl(out)}
    assert len(rows) == 8
    for pid, r in rows.items():
        verdict, p_a, consistent, v_ab, v_ba = truth[pid]
        share = p_a if verdict == "A" else 1 - p_a
        assert r["judge_vote_share"] == pytest.approx(share)
        assert r["judge_consistent"] is consistent
        assert r["judge_verdict_ab"] == ("chosen" if v_ab == verdict else "rejected")
        assert r["judge_verdict_ba"] == ("chosen" if v_ba == verdict else "rejected")
    # p1 was swapped: order (A, B) backed the gold label, now the rejected response
    p1 = rows["p1"]
    assert (p1["judge_verdict_ab"], p1["judge_verdict_ba"]) == ("rejected", "chosen")
    assert rows["p1"]["judge_consistent"] is False and rows["p1"]["chosen"] == "5"
    assert rows["p3"]["judge_verdict_ab"] == rows["p3"]["judge_verdict_ba"] == "chosen"


def test_evidence_is_off_by_default_and_names_are_reserved(tmp_path, judged):
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(tmp_path / "a.parquet")])
    assert r.exit_code == 0, r.output
    assert pq.read_schema(tmp_path / "a.parquet").names == ["prompt", "chosen", "rejected"]
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(tmp_path / "b.parquet"),
                                  "--format", "kto", "--keep-columns", "label"])
    assert r.exit_code == 1 and "--keep-columns label would overwrite" in r.output


# -- KTO ----------------------------------------------------------------------------------------
def test_kto_writes_two_rows_per_pair_in_input_order(tmp_path, judged):
    dpo, kto, chat = tmp_path / "d.jsonl", tmp_path / "k.parquet", tmp_path / "kc.jsonl"
    for out, args in ((dpo, []), (kto, ["--format", "kto", "--evidence"]),
                      (chat, ["--format", "kto", "--chat"])):
        r = CliRunner().invoke(main, ["filter", judged, "-o", str(out), "--keep-columns", "id",
                                      *args])
        assert r.exit_code == 0, r.output
    assert "wrote 3 of 8 pairs (6 rows)" in r.output
    pairs = _jsonl(dpo)
    ds = _load(kto)
    assert ds.column_names[:3] == ["prompt", "completion", "label"]
    assert ds["id"] == [p["id"] for p in pairs for _ in (0, 1)]
    assert ds["label"] == [True, False] * 3
    assert ds["completion"] == [x for p in pairs for x in (p["chosen"], p["rejected"])]
    assert ds["prompt"] == [p["prompt"] for p in pairs for _ in (0, 1)]
    assert ds.features["label"].dtype == "bool"
    # both rows of a pair carry the pair's evidence
    assert ds["judge_vote_share"][0] == ds["judge_vote_share"][1]
    conv = _jsonl(chat)
    assert conv[0]["prompt"] == [{"role": "user", "content": pairs[0]["prompt"]}]
    assert conv[0]["completion"] == [{"role": "assistant", "content": pairs[0]["chosen"]}]
    assert conv[1]["completion"] == [{"role": "assistant", "content": pairs[0]["rejected"]}]


def test_chat_and_rm_write_message_structs_not_json_strings(tmp_path, judged):
    with open_judged(judged) as t:
        filter_table(t, str(tmp_path / "c.parquet"), FilterSettings(chat=True))
        filter_table(t, str(tmp_path / "r.parquet"), FilterSettings(format="rm"))
        filter_table(t, str(tmp_path / "k.parquet"), FilterSettings(format="kto", chat=True))
    for name, cols in (("c", ["prompt", "chosen", "rejected"]), ("r", ["chosen", "rejected"]),
                       ("k", ["prompt", "completion"])):
        schema = pq.read_schema(tmp_path / f"{name}.parquet")
        assert [str(schema.field(c).type) for c in cols] == [MESSAGES] * len(cols), name


# -- typed passthrough columns ------------------------------------------------------------------
EXTRA = [  # per fixture row: int, float, bool, list, struct, mixed, zip code, timestamp
    {"n": i, "ratio": i / 4, "flag": i % 2 == 0, "tags": ["t", str(i)][: 1 + i % 2],
     "meta": {"k": i, "who": f"w{i}"}, "mixed": "[1]" if i < 2 else f"text {i}",
     "zip": f"00{i}2", "stamp": datetime(2024, 5, 1 + i, 10, 0)}
    for i in range(len(ROWS))
]


@pytest.fixture(scope="module")
def typed_table(tmp_path_factory):
    """Judged from a Parquet input whose extra columns have real types (the store keeps them
    as JSON text)."""
    import pyarrow as pa

    tmp = tmp_path_factory.mktemp("typed")
    src = tmp / "typed.parquet"
    pq.write_table(pa.Table.from_pylist([{**r, **x} for r, x in zip(ROWS, EXTRA)]), src)
    out = str(tmp / "typed.duckdb")
    score(str(src), ScriptedEngine(respond), JudgeSettings(samples=4), output=out)
    return out


KEEP = "id,n,ratio,flag,tags,meta,mixed,zip,stamp"


@pytest.mark.parametrize("ext", ["parquet", "jsonl"])
def test_kept_passthrough_columns_get_their_input_types_back(tmp_path, typed_table, ext):
    out = tmp_path / f"t.{ext}"
    r = CliRunner().invoke(main, ["filter", typed_table, "-o", str(out), "--keep-columns", KEEP])
    assert r.exit_code == 0, r.output
    rows = (pq.read_table(out).to_pylist() if ext == "parquet" else _jsonl(out))
    assert [r["id"] for r in rows] == ["p3", "p5", "p6"]
    for row in rows:
        x = EXTRA[int(row["id"][1:]) - 1]
        for col in ("n", "ratio", "flag", "tags", "zip"):
            assert row[col] == x[col] and type(row[col]) is type(x[col]), col
        assert row["meta"] == x["meta"]
        assert row["stamp"] == x["stamp"].isoformat()  # JSON-encoded by the store: text again
    # `mixed` looks like JSON in some rows only (kept rows are all "text ..."): a string column
    assert all(isinstance(r["mixed"], str) for r in rows)
    if ext == "parquet":
        schema = pq.read_schema(out)
        assert {c: str(schema.field(c).type) for c in ("n", "ratio", "flag", "tags", "mixed")} == {
            "n": "int64", "ratio": "double", "flag": "bool", "tags": "list<element: string>",
            "mixed": "string"}
        assert str(schema.field("meta").type) == "struct<k: int64, who: string>"


@pytest.mark.parametrize("values, expected", [
    (["1", "-2", None], [1, -2, None]),
    (["1", "2.5e3"], [1.0, 2500.0]),
    (["true", "false"], [True, False]),
    (['"2024-05-01T10:00:00"', '"x"'], ["2024-05-01T10:00:00", "x"]),
    (["[1, 2]", "[]"], [[1, 2], []]),
    (['{"a": {"b": [1.5]}}', '{"a": null}'], [{"a": {"b": [1.5]}}, {"a": None}]),
    # stays text: not JSON, mixed kinds, one non-JSON row, ints beyond 64 bits, mixed elements
    (["0012", "0013"], ["0012", "0013"]),
    (["1", "true"], ["1", "true"]),
    (["[1]", "[oops"], ["[1]", "[oops"]),
    (["1", "123456789012345678901234"], ["1", "123456789012345678901234"]),
    (['[1, "a"]', "[2]"], ['[1, "a"]', "[2]"]),
    (['{"": 1}'], ['{"": 1}']),
    ([None, None], [None, None]),
])
def test_type_recovery_rule(values, expected):
    con = duckdb.connect(":memory:")
    con.execute("CREATE TEMP TABLE t (c VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?)", [[v] for v in values])
    expr = column_expression(con, "t", "c")
    assert [r[0] for r in con.execute(f"SELECT {expr} FROM t").fetchall()] == expected


@pytest.mark.parametrize("values, declared, sniff, expected", [
    (["3", "-4"], "BIGINT", False, [3, -4]),
    (["0.25", "1.0"], "DOUBLE", False, [0.25, 1.0]),
    (['{"a": 1}', '{"a": 2, "b": "x"}'], "JSON", False, [{"a": 1, "b": None}, {"a": 2, "b": "x"}]),
    (['[1, "a"]', "[2]"], "JSON", False, ['[1, "a"]', "[2]"]),
    # a typed store's VARCHAR column holds strings: "3" stays "3"; a JSON-encoded date is text
    (["3", "4"], "VARCHAR", False, ["3", "4"]),
    (['"2024-05-01"', '"2024-05-02"'], "VARCHAR", False, ["2024-05-01", "2024-05-02"]),
])
def test_declared_types_are_used_as_they_are(values, declared, sniff, expected):
    con = duckdb.connect(":memory:")
    con.execute("CREATE TEMP TABLE t (c VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?)", [[v] for v in values])
    expr = column_expression(con, "t", "c", declared, sniff)
    assert [r[0] for r in con.execute(f"SELECT {expr} FROM t").fetchall()] == expected


@pytest.mark.parametrize("version, code", [("0.2.0", ["3", "5", "6"]), ("0.1.1", [3, 5, 6])])
def test_typed_stores_keep_numeric_strings(tmp_path, typed_table, version, code):
    """A store of 0.2.0+ types its passthrough columns, so a VARCHAR column of digits is text;
    in an older store the same column cannot be told from numbers."""
    import shutil

    store = tmp_path / "s.duckdb"
    shutil.copy(typed_table, store)
    con = duckdb.connect(str(store))
    con.execute("ALTER TABLE pairs ALTER COLUMN n SET DATA TYPE BIGINT")
    con.execute("ALTER TABLE pairs ALTER COLUMN tags SET DATA TYPE JSON")
    con.execute("ALTER TABLE pairs ADD COLUMN code VARCHAR")
    con.execute("UPDATE pairs SET code = substr(id, 2)")
    con.execute("UPDATE runs SET version = ?", [version])
    con.close()
    out = tmp_path / "o.parquet"
    r = CliRunner().invoke(main, ["filter", str(store), "-o", str(out), "--keep-columns",
                                  "id,n,tags,code,stamp"])
    assert r.exit_code == 0, r.output
    rows = pq.read_table(out).to_pylist()
    assert [r["code"] for r in rows] == code
    assert [r["n"] for r in rows] == [2, 4, 5] and rows[0]["tags"] == ["t"]
    assert rows[0]["stamp"] == "2024-05-03T10:00:00"


def test_nested_columns_of_a_parquet_export_come_back_nested(tmp_path, typed_table):
    """An export written with nested Parquet types (lists, structs) reads back as such."""
    export = tmp_path / "judged.parquet"
    con = duckdb.connect(typed_table, read_only=True)
    con.execute(f"""COPY (SELECT * REPLACE (from_json(meta, '{{"k": "BIGINT", "who": "VARCHAR"}}')
                          AS meta, CAST(n AS BIGINT) AS n) FROM pairs)
                    TO '{export}' (FORMAT parquet)""")
    con.close()
    out = tmp_path / "o.jsonl"
    r = CliRunner().invoke(main, ["filter", str(export), "-o", str(out), "--keep-columns",
                                  "id,n,meta"])
    assert r.exit_code == 0, r.output
    rows = _jsonl(out)
    assert rows[0] == {**rows[0], "n": 2, "meta": {"k": 2, "who": "w2"}}


# -- empty result -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("unlabelled")
    src = tmp / "u.jsonl"
    src.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "label"}) + "\n"
                           for r in ROWS))
    out = str(tmp / "u.duckdb")
    score(str(src), ScriptedEngine(respond), JudgeSettings(samples=4), output=out)
    return out


def test_nothing_kept_writes_a_valid_empty_file_and_warns(tmp_path, unlabelled):
    pq_out, js_out = tmp_path / "e.parquet", tmp_path / "e.jsonl"
    warnings = {}
    for out in (pq_out, js_out):
        r = CliRunner().invoke(main, ["filter", unlabelled, "-o", str(out), "--unlabelled",
                                      "drop", "--format", "kto", "--chat", "--evidence",
                                      "--keep-columns", "id,note"],
                               env={"COLUMNS": "1000"})  # the warning's whole line
        assert r.exit_code == 0, r.output
        assert "wrote 0 of 8 pairs" in r.output
        warnings[out.suffix] = [ln for ln in r.output.splitlines() if ln.startswith("warning:")]
    assert warnings[".parquet"] == [f"warning: no pair passed the filter; {pq_out} is a Parquet "
                                    "file with the dataset's columns and no rows"]
    assert "has 0 lines (valid JSONL" in warnings[".jsonl"][0]
    table = pq.read_table(pq_out)
    assert table.num_rows == 0 and os.path.getsize(pq_out) > 0
    assert table.schema.names == ["prompt", "completion", "label", "judge_vote_share",
                                  "judge_consistent", "judge_verdict_ab", "judge_verdict_ba",
                                  "id", "note"]
    assert str(table.schema.field("prompt").type) == MESSAGES
    assert str(table.schema.field("label").type) == "bool"
    assert js_out.read_text() == ""
    # and an empty dataset is not published
    r = CliRunner().invoke(main, ["push", str(pq_out), "me/empty", "--dry-run",
                                  str(tmp_path / "up")])
    assert r.exit_code == 1 and "has no rows (no pair passed the filter)" in r.output


# -- the upload folder and the card -------------------------------------------------------------
def test_dry_run_writes_the_exact_upload_folder_with_a_card(tmp_path, judged):
    out, folder = tmp_path / "pub" / "dpo.parquet", tmp_path / "upload"
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(out), "--evidence",
                                  "--keep-columns", "id,subset", "--push-to-hub",
                                  "my-org/judged-dpo", "--dry-run", str(folder)])
    assert r.exit_code == 0, r.output
    assert "nothing was uploaded" in r.output
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert files == ["README.md", "data/train.parquet"]
    assert (folder / "data/train.parquet").read_bytes() == out.read_bytes()
    ds = _load(folder / "data/train.parquet")
    assert ds.num_rows == 3 and ds.column_names[:3] == ["prompt", "chosen", "rejected"]

    readme = (folder / "README.md").read_text()
    meta = _front_matter(readme)
    assert meta["configs"] == [{"config_name": "default", "data_files": [
        {"split": "train", "path": "data/train.parquet"}]}]
    assert meta["task_categories"] == ["text-generation"] and "dpo" in meta["tags"]
    assert meta["size_categories"] == ["n<1K"] and "license" not in meta
    text = readme.split("\n---\n", 1)[1]
    assert "input: `analysis_pairs.jsonl`" in text and "/work" not in text  # no local paths
    assert "fingerprint of its first row" in text
    assert "sha256 `" + "0" * 64 + "`" in text
    assert '"samples": 4' in text and '"on_inconsistent": "tie"' in text
    assert "| kept (judge agrees with the gold label) | 3 |" in text
    assert "| &nbsp;&nbsp;dropped: orders disagree | 5 |" in text
    # eval figures of the whole table, as `rmjudge eval` computes them, under the names of
    # core/counts.py: accuracy pooled 11/16, consistency 3/8, combined verdict 3 agree, 5 tie
    assert "| accuracy (both orders pooled, the paper's) | 68.8 [" in text
    assert "| positional consistency (right in both orders, the paper's) | 37.5 [" in text
    assert "| combined-verdict agreement: agree | 37.5 [" in text
    assert "| combined-verdict agreement: tie | 62.5 [" in text
    assert "| accuracy (ties = 0.5), comparable with reward-bench | 68.8 [" in text
    assert "rollouts 64: cut at the token limit 1, unparsed 1, forced verdicts 1" in text
    assert "| `judge_vote_share` | float64 |" in text
    assert 'load_dataset("my-org/judged-dpo", split="train")' in text

    # the same folder again, now with a license: refreshed in place
    r = CliRunner().invoke(main, ["push", str(out), "my-org/judged-dpo", "--license", "mit",
                                  "--dry-run", str(folder)])
    assert r.exit_code == 0, r.output
    assert _front_matter((folder / "README.md").read_text())["license"] == "mit"


def test_unlabelled_card_has_no_eval_and_jsonl_keeps_its_format(tmp_path, unlabelled):
    out = tmp_path / "u.jsonl"
    r = CliRunner().invoke(main, ["filter", unlabelled, "-o", str(out)])
    assert r.exit_code == 0, r.output
    prep = prepare_folder(str(out), "me/u", str(tmp_path / "f"))
    assert prep.data_path == "data/train.jsonl" and prep.rows == 3
    assert "| labelled by the judge (no gold label) | 3 |" in prep.readme
    assert "## Judge quality" not in prep.readme  # no gold labels, no eval figures
    assert _load(tmp_path / "f" / "data/train.jsonl").num_rows == 3


def test_push_refuses_missing_or_stale_records_and_bad_ids(tmp_path, judged):
    out = tmp_path / "d.jsonl"
    assert CliRunner().invoke(main, ["filter", judged, "-o", str(out)]).exit_code == 0
    r = CliRunner().invoke(main, ["push", str(out), "not a repo", "--dry-run", str(tmp_path / "x")])
    assert r.exit_code == 1 and r.output.startswith("Error: 'not a repo' is not a dataset")
    with out.open("a") as f:
        f.write('{"prompt": "edited", "chosen": "x", "rejected": "y"}\n')
    r = CliRunner().invoke(main, ["push", str(out), "me/d", "--dry-run", str(tmp_path / "x")])
    assert r.exit_code == 1 and f"Error: {out} changed since `rmjudge filter` wrote it" in r.output
    os.remove(record_path(str(out)))
    with pytest.raises(RecordError, match="has no filter record"):
        prepare_folder(str(out), "me/d", str(tmp_path / "x"))
    # a folder holding other files is not overwritten
    out2 = tmp_path / "e.jsonl"
    assert CliRunner().invoke(main, ["filter", judged, "-o", str(out2)]).exit_code == 0
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(HubError, match="holds other files"):
        prepare_folder(str(out2), "me/e", str(tmp_path / "busy"))
    # --private & co. without --push-to-hub
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(out2), "--private"])
    assert r.exit_code == 1 and "go with --push-to-hub" in r.output


def test_source_license_comes_from_the_cached_card(tmp_path, monkeypatch):
    from huggingface_hub import constants

    snap = tmp_path / "hub" / "datasets--org--prefs" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# prefs\n")
    refs = tmp_path / "hub" / "datasets--org--prefs" / "refs"
    refs.mkdir()
    (refs / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    record = {"runs": [{"input": "hf://datasets/org/prefs@train"}], "format": "dpo",
              "counts": {"rows": 12000}}
    assert source_license(record) == "cc-by-4.0"
    assert source_license({"runs": [{"input": "hf://datasets/org/other"}]}) is None
    meta = metadata(record, "data/train.parquet", "cc-by-4.0", "x")
    assert meta["source_datasets"] == ["org/prefs"] and meta["size_categories"] == ["10K<n<100K"]
    record.update(counts={"rows": 12000, "written": 12000, "pairs": 20000, "kept": 12000,
                          "swapped": 0, "labelled": 0, "dropped": {"orders disagree": 8000}},
                  input={"source": "hf://datasets/org/prefs@train", "fingerprint": "f" * 32,
                         "revision": "b" * 40})
    text = render_card(record, "data/train.parquet", "me/x", "cc-by-4.0")
    assert "- input: `hf://datasets/org/prefs@train` ([org/prefs](https://huggingface.co/" \
        "datasets/org/prefs))" in text
    assert f"- revision: `{'b' * 40}`" in text and "- license: cc-by-4.0" in text
    assert _front_matter(text)["license"] == "cc-by-4.0"


# -- pushing ------------------------------------------------------------------------------------
class RecordingApi:
    """Stands in for huggingface_hub.HfApi: records the calls and what the folder held."""

    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", repo_id, kw))
        return f"https://huggingface.co/datasets/{repo_id}"

    def upload_folder(self, **kw):
        folder = Path(kw["folder_path"])
        files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
                 if p.is_file()}
        self.calls.append(("upload_folder", kw, files))


def test_push_creates_the_repo_and_uploads_the_folder(tmp_path, judged, monkeypatch):
    out = tmp_path / "k.parquet"
    assert CliRunner().invoke(main, ["filter", judged, "-o", str(out), "--format",
                                     "kto"]).exit_code == 0
    api = RecordingApi()
    url = push(str(out), "org/kto", private=True, api=api, token="hf_x")
    assert url == "https://huggingface.co/datasets/org/kto"
    (c, repo, kw), (u, up, files) = api.calls
    assert (c, repo) == ("create_repo", "org/kto")
    assert kw == {"repo_type": "dataset", "private": True, "exist_ok": True, "token": "hf_x"}
    assert up["repo_id"] == "org/kto" and up["repo_type"] == "dataset"
    assert up["delete_patterns"] == ["data/*"] and up["token"] == "hf_x"
    assert sorted(files) == ["README.md", "data/train.parquet"]
    assert files["data/train.parquet"] == out.read_bytes()
    assert "kto" in _front_matter(files["README.md"].decode())["tags"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rmjudge-push-")]


def test_push_without_token_or_extra_is_one_error_line(tmp_path, judged, monkeypatch):
    out = tmp_path / "d.parquet"
    assert CliRunner().invoke(main, ["filter", judged, "-o", str(out)]).exit_code == 0
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    no_token = ("Error: no Hugging Face token to push with: run `hf auth login` or set "
                "HF_TOKEN to a token with write access\n")
    r = CliRunner().invoke(main, ["push", str(out), "me/d"])
    assert r.exit_code == 1 and r.output == no_token
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(tmp_path / "y.parquet"),
                                  "--push-to-hub", "me/d"])
    assert r.exit_code == 1 and r.output == no_token
    assert not (tmp_path / "y.parquet").exists()  # checked before any work
    real = hubmod.importlib.util.find_spec
    monkeypatch.setattr(hubmod.importlib.util, "find_spec",
                        lambda name, *a: None if name == "huggingface_hub" else real(name, *a))
    for args in (["push", str(out), "me/d"],
                 ["filter", judged, "-o", str(tmp_path / "x.parquet"), "--push-to-hub", "me/d"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1 and r.output == (
            "Error: publishing a dataset needs the Hugging Face Hub client: "
            "pip install '.[hub]' in the rmjudge clone\n")
    assert not (tmp_path / "x.parquet").exists()  # checked before any work


class _StubHub(BaseHTTPRequestHandler):
    """The few Hub endpoints a dataset push uses; every request is recorded."""

    calls: list = []

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        data = b""
        if self.headers.get("Transfer-Encoding") == "chunked":
            while (size := int(self.rfile.readline().strip(), 16)):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        return data

    def _send(self, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = self._body()
        self.calls.append(("POST", self.path, body, self.headers.get("authorization")))
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        if self.path == "/api/repos/create":
            return self._send({"url": f"{base}/datasets/org/stub", "name": "org/stub"})
        if "/preupload/" in self.path:
            return self._send({"files": [{"path": f["path"], "uploadMode": "regular",
                                          "shouldIgnore": False}
                                         for f in json.loads(body)["files"]]})
        if "/commit/" in self.path:
            return self._send({"commitUrl": f"{base}/datasets/org/stub/commit/{'a' * 40}",
                               "commitOid": "a" * 40})
        return self._send({})

    def do_GET(self) -> None:
        self.calls.append(("GET", self.path, b"", self.headers.get("authorization")))
        self._send([] if "/tree/" in self.path else {})

    def log_message(self, *args) -> None:
        pass


def test_filter_push_to_hub_against_a_local_hub(tmp_path, judged):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StubHub)
    _StubHub.calls = []
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                     daemon=True).start()
    try:
        out = tmp_path / "d.parquet"
        env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
               "HF_TOKEN": "hf_stubtoken", "HF_HOME": str(tmp_path / "hf"),
               "HF_HUB_DISABLE_TELEMETRY": "1"}
        env.pop("HF_HUB_OFFLINE", None)
        p = subprocess.run([sys.executable, "-m", "rmjudge", "filter", judged, "-o", str(out),
                            "--keep-columns", "id", "--push-to-hub", "org/stub", "--private"],
                           env=env, capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
    assert p.returncode == 0, p.stderr
    assert "pushed" in p.stdout and "(private)" in p.stdout
    posts = {path.split("?")[0]: (body, auth) for method, path, body, auth in _StubHub.calls
             if method == "POST"}
    body, auth = posts["/api/repos/create"]
    assert json.loads(body) == {"name": "stub", "organization": "org", "visibility": "private",
                                "type": "dataset"}
    assert auth == "Bearer hf_stubtoken"
    commit_body = posts["/api/datasets/org/stub/commit/main"][0]
    commit = [json.loads(line) for line in commit_body.splitlines()]
    files = {c["value"]["path"]: base64.b64decode(c["value"]["content"])
             for c in commit if c["key"] == "file"}
    assert sorted(files) == ["README.md", "data/train.parquet"]
    assert files["data/train.parquet"] == out.read_bytes()
    (tmp_path / "got.parquet").write_bytes(files["data/train.parquet"])
    assert _load(tmp_path / "got.parquet")["id"] == ["p3", "p5", "p6"]
    assert _front_matter(files["README.md"].decode())["configs"][0]["data_files"][0]["path"] == \
        "data/train.parquet"


def test_hub_failures_are_user_errors_and_bugs_are_not(tmp_path, judged):
    out = tmp_path / "d.parquet"
    assert CliRunner().invoke(main, ["filter", judged, "-o", str(out)]).exit_code == 0

    class Refusing(RecordingApi):
        def create_repo(self, repo_id, **kw):
            raise ConnectionError("[Errno 111] Connection refused")

    class Broken(RecordingApi):
        def upload_folder(self, **kw):
            raise TypeError("a bug")

    refused = r"^cannot push .*: \[Errno 111\] Connection refused \(check"
    with pytest.raises(HubError, match=refused):
        push(str(out), "org/x", api=Refusing(), token="hf_x")
    with pytest.raises(TypeError):
        push(str(out), "org/x", api=Broken(), token="hf_x")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rmjudge-push-")]


def test_dry_run_never_replaces_a_card_or_data_it_did_not_write(tmp_path, judged):
    out = tmp_path / "d.parquet"
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(out)])
    assert r.exit_code == 0, r.output
    for files in ({"README.md": "# my notes\n"}, {"data/train.parquet": "mine"},
                  {"README.md": "---\ntags:\n- other\n---\nmine\n", "data/train.jsonl": "x"}):
        folder = tmp_path / f"f{len(files)}{sorted(files)[0][0]}"
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
        r = CliRunner().invoke(main, ["push", str(out), "me/d", "--dry-run", str(folder)])
        assert r.exit_code == 1 and "not written by rmjudge" in r.output, r.output
        for name, text in files.items():  # untouched
            assert (folder / name).read_text() == text
