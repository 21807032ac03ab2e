"""The Python API (docs/python.md): `rmjudge.score`, `score_batches` and `open_store` on every
kind of data a notebook holds, judged by the run set-up `rmjudge score` uses, with its errors
as typed exceptions; the page's examples run as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import rmjudge
from rmjudge.engine.fake import ScriptedEngine, stage_of
from rmjudge.prompts import completion_text

from helpers import first_slot_response

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "pairs.jsonl"

ROWS = [
    {"id": "r1", "prompt": "What is 2+2?", "chosen": "4, the good one", "rejected": "5",
     "topic": "math", "weight": 1.5, "tags": ["a", "b"]},
    {"id": "r2", "prompt": "Capital of France?", "chosen": "Paris, the good one",
     "rejected": "Lyon", "topic": "geo", "weight": 2.0, "tags": ["c"]},
    {"id": "r3", "prompt": "Largest planet?", "chosen": "Jupiter, the good one",
     "rejected": "Mars", "topic": "space", "weight": 0.5, "tags": []},
]


def knows(request, i):
    """A judge that prefers the response holding "good", whatever its slot."""
    slot = 1 if "good" in first_slot_response(request) else 2
    task = "pref" if stage_of(request) == "rollout" else "refl"
    return completion_text(task, f"Response {slot} is better.", slot)


def judge():
    return ScriptedEngine(knows)


def verdicts(table: pd.DataFrame) -> list[tuple]:
    """(id, verdict, correct) per row, missing values as None."""
    return [tuple(None if pd.isna(v) else v for v in row)
            for row in zip(table["id"], table["verdict"], table["correct"])]


# -- every kind of data ------------------------------------------------------------------------

def test_a_list_of_dicts_gives_verdicts_vote_shares_and_passthrough_columns():
    table = rmjudge.score(ROWS, engine=judge(), samples=2)
    assert isinstance(table, pd.DataFrame)
    assert list(table["row_number"]) == [1, 2, 3]
    assert list(table["id"]) == ["r1", "r2", "r3"]
    # the judge always finds the good response: chosen wins, both orders agree
    assert list(table["correct"]) == [True, True, True]
    assert list(table["consistent"]) == [True, True, True]
    for _, row in table.iterrows():
        assert row["verdict"] == row["verdict_ab"] == row["verdict_ba"] == row["label"]
        assert row["p_a"] == (1.0 if row["verdict"] == "A" else 0.0)
    assert list(table["generations"]) == [4, 4, 4]  # 2 rollouts per order, shortcut: no reflection
    assert list(table["parse_failures"]) == [0, 0, 0]
    assert table["error"].isna().all()
    # input columns come back with their types; JSON columns as Python values
    assert list(table["topic"]) == ["math", "geo", "space"]
    assert list(table["weight"]) == [1.5, 2.0, 0.5]
    assert list(table["tags"]) == [["a", "b"], ["c"], []]
    assert table["messages"][0] == [{"role": "user", "content": "What is 2+2?"}]
    assert "content_hash" not in table.columns


def test_a_dataframe_a_dict_of_columns_an_arrow_table_and_a_generator_judge_alike():
    expected = verdicts(rmjudge.score(ROWS, engine=judge(), samples=2))
    frame = pd.DataFrame(ROWS)
    columns = {k: [r[k] for r in ROWS] for k in ROWS[0]}
    import pyarrow as pa

    for data in (frame, columns, pa.Table.from_pylist(ROWS), (r for r in ROWS)):
        table = rmjudge.score(data, engine=judge(), samples=2)
        assert verdicts(table) == expected, type(data)
        assert list(table["weight"]) == [1.5, 2.0, 0.5]


def test_a_dataframe_nan_is_a_missing_value_and_numpy_values_are_plain():
    frame = pd.DataFrame(ROWS).drop(columns=["tags"])
    frame["weight"] = [1.0, float("nan"), 3.0]
    frame["count"] = pd.array([1, None, 3], dtype="Int64")
    import numpy as np

    frame["tags"] = [np.array(["x", "y"]), np.array([], dtype=str), np.array(["z"])]  # as
    # pandas reads a Parquet list column
    frame["when"] = pd.to_datetime(["2026-01-02", None, "2026-03-04"])
    table = rmjudge.score(frame, engine=judge(), samples=1)
    assert table["weight"].isna().tolist() == [False, True, False]
    assert table["count"].isna().tolist() == [False, True, False]
    assert table["count"][0] == 1
    assert list(table["tags"]) == [["x", "y"], [], ["z"]]
    assert table["when"].isna().tolist() == [False, True, False]
    assert str(table["when"][0]).startswith("2026-01-02")


def test_a_datasets_dataset_and_a_path_judge_alike(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{k: v for k, v in r.items() if k != "tags"} for r in ROWS]
    expected = verdicts(rmjudge.score(rows, engine=judge(), samples=2))
    ds = datasets.Dataset.from_list(rows)
    assert verdicts(rmjudge.score(ds, engine=judge(), samples=2)) == expected
    with pytest.raises(rmjudge.InputError, match=r"several splits \(train, test\); pass one"):
        rmjudge.score(datasets.DatasetDict(train=ds, test=ds), engine=judge())
    path = tmp_path / "rows.jsonl"
    path.write_text(pd.DataFrame(rows).to_json(orient="records", lines=True))
    assert verdicts(rmjudge.score(path, engine=judge(), samples=2)) == expected
    assert verdicts(rmjudge.score(str(path), engine=judge(), samples=2)) == expected


def test_error_rows_are_marked_in_the_table_never_dropped():
    rows = [ROWS[0], {"prompt": "only a prompt"}, "not a row", ROWS[1], ROWS[0]]
    table = rmjudge.score(rows, engine=judge(), samples=1)
    assert list(table["row_number"]) == [1, 2, 3, 4, 5]
    errors = table.set_index("row_number")["error"]
    assert errors[[1, 4]].isna().all()
    assert "no two responses" in errors[2]
    assert errors[3] == "row 3 is str, not a mapping of column names to values"
    assert "duplicate id 'r1'" in errors[5]
    assert table.set_index("row_number")["verdict"][[2, 3, 5]].isna().all()
    assert table["generations"].isna().tolist() == [False, True, True, False, True]


def test_the_example_file_and_its_schema_as_the_command_reads_it():
    table = rmjudge.score(EXAMPLE, engine=judge(), samples=1)
    assert list(table["id"]) == [
        __import__("json").loads(line)["id"] for line in EXAMPLE.read_text().splitlines()]
    assert table["error"].isna().all() and table["verdict"].notna().all()


# -- settings, mapping and labels: the command's -----------------------------------------------

def test_settings_map_and_labels_make_the_commands_run_options():
    """The same settings given to the command and to the API make equal RunOptions."""
    from click.testing import CliRunner

    from rmjudge.api.options import run_options
    from rmjudge.cli import main
    import rmjudge.cli.run_options as cli_score

    seen = {}
    real = cli_score.parse_run_options

    def capture(kw):
        seen["opts"] = real(kw)
        raise SystemExit(0)

    mp = pytest.MonkeyPatch()
    mp.setattr(cli_score, "parse_run_options", capture)
    try:
        CliRunner().invoke(main, ["score", "x.jsonl", "--samples", "3", "--max-tokens", "64",
                                  "--no-reflect", "--seed", "7", "--threads", "2",
                                  "--ctx-size", "2048", "--map", "prompt=q,a=x,b=y,label=pref",
                                  "--label-values", "1=A,2=B", "--label", "pref",
                                  "--limit", "5", "--shard", "0/2"])
    finally:
        mp.undo()
    cli = seen["opts"]
    api = run_options(dict(samples=3, max_tokens=64, reflect=False, seed=7, threads=2,
                           n_ctx=2048), map={"prompt": "q", "a": "x", "b": "y", "label": "pref"},
                      label_values="1=A,2=B", label="pref", limit=5, shard="0/2")
    assert api.judge == cli.judge and api.engine == cli.engine and api.mapper.mapping == cli.mapper.mapping
    assert (api.limit, api.shard, api.commit_every) == (cli.limit, cli.shard, cli.commit_every)
    assert api.mapper.label_values.spec == cli.mapper.label_values.spec
    # --label safer comes with the built-in criteria, in both
    assert run_options({}, label="safer").judge.criteria == "harmless"


def test_map_takes_the_options_text_or_a_dict():
    frame = pd.DataFrame({"q": [r["prompt"] for r in ROWS], "x": [r["chosen"] for r in ROWS],
                          "y": [r["rejected"] for r in ROWS], "pref": ["A", "A", "A"]})
    as_dict = rmjudge.score(frame, engine=judge(), samples=1,
                            map={"prompt": "q", "a": "x", "b": "y", "label": "pref"})
    as_text = rmjudge.score(frame, engine=judge(), samples=1, map="prompt=q,a=x,b=y,label=pref")
    assert verdicts(as_dict) == verdicts(as_text)
    assert list(as_dict["verdict"]) == ["A", "A", "A"] and as_dict["correct"].all()


@pytest.mark.parametrize("kwargs,message", [
    (dict(samplez=4), r"'samplez' is not a setting of rmjudge.score \(did you mean samples\?\)"),
    (dict(samples="4"), r"samples must be int, got '4'"),
    (dict(samples=0), r"--samples must be at least 1"),
    (dict(reflect=1), r"reflect must be bool"),
    (dict(orders="ba"), r"--orders must be 'both' or 'ab'"),
    (dict(map="prompt"), r"--map entry 'prompt' must look like key=column"),
    (dict(map={"question": "q"}), r"--map key 'question' is not one of"),
    (dict(limit=0), r"limit must be a whole number of at least 1"),
    (dict(shard="3/2"), r"--shard must look like I/N"),
    (dict(model="x.gguf"), r"give either engine= .* or model=/server=, not both"),
    (dict(threads=2), r"threads= set how a model is loaded, and engine= is loaded already"),
    (dict(server={"url": "http://h:1/v1", "concurency": 2}), r"server= has no key 'concurency'"),
    (dict(split="train"), r"split= and config= choose a split of a Hugging Face dataset"),
])
def test_bad_arguments_raise_settings_errors_before_anything_is_judged(kwargs, message):
    engine = judge()
    given = {**kwargs} if "server" in kwargs else {"engine": engine, **kwargs}
    with pytest.raises(rmjudge.SettingsError, match=message):
        rmjudge.score(ROWS, **given)
    assert engine.calls == []


def test_input_errors_are_the_commands_typed_errors(tmp_path):
    with pytest.raises(rmjudge.InputError, match="input file not found: .*nope.jsonl"):
        rmjudge.score(tmp_path / "nope.jsonl", engine=judge())
    with pytest.raises(rmjudge.InputError, match="a dict is read as columns"):
        rmjudge.score({"prompt": "p", "chosen": ["x"]}, engine=judge())
    with pytest.raises(rmjudge.InputError, match="cannot read int as rows"):
        rmjudge.score(5, engine=judge())
    numeric = [{"prompt": "p", "response_a": "a", "response_b": "b", "label": 1}]
    with pytest.raises(rmjudge.UserError, match="give the meaning of its values with "
                                                "--label-values"):
        rmjudge.score(numeric, engine=judge())
    with pytest.raises(rmjudge.UserError, match=r"nothing was judged: 2 rows read from a list of "
                                                r"rows \(2 rows\), 2 of them error rows"):
        rmjudge.score([{"question": "q"}, {"question": "r"}], engine=judge())


def test_the_public_surface_is_documented_and_import_stays_light():
    code = ("import sys, rmjudge; heavy = [m for m in ('pandas', 'duckdb', 'torch', "
            "'transformers', 'llama_cpp', 'datasets', 'pyarrow', 'numpy') if m in sys.modules]; "
            "assert not heavy, heavy; assert callable(rmjudge.score); print(rmjudge.__all__)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=env).stdout
    names = eval(out)
    assert {"score", "score_batches", "open_store", "UserError", "Interrupted",
            "__version__"} <= set(names)
    page = (ROOT / "docs" / "python.md").read_text()
    for name in names:
        assert name == "__version__" or getattr(rmjudge, name) is not None
        assert name.startswith("__") or f"rmjudge.{name}" in page or f"`{name}`" in page, name
    with pytest.raises(AttributeError):
        rmjudge.Pair  # noqa: B018  (internal types are not part of the package's surface)


def test_every_setting_keyword_is_documented():
    from rmjudge.api.options import settings_keywords

    page = (ROOT / "docs" / "python.md").read_text()
    missing = [k for k in settings_keywords() if f"`{k}=`" not in page]
    assert not missing, missing


# -- keeping, resuming, streaming, reading -----------------------------------------------------

def test_output_keeps_the_store_and_a_second_call_resumes_it(tmp_path):
    out = tmp_path / "judged.duckdb"
    first = rmjudge.score(ROWS[:2], engine=judge(), samples=2, output=out)
    assert len(first) == 2 and out.exists()
    engine = judge()
    table = rmjudge.score(ROWS, engine=engine, samples=2, output=out)
    assert list(table["id"]) == ["r1", "r2", "r3"]
    assert [r.share_key[0] for call in engine.calls for r in call] and \
        {r.share_key[0] for call in engine.calls for r in call} == {"r3"}  # only the new pair
    with pytest.raises(rmjudge.StoreError, match="other settings .*samples 2 -> 3"):
        rmjudge.score(ROWS, engine=judge(), samples=3, output=out)
    again = rmjudge.score(ROWS, engine=judge(), samples=3, output=out, overwrite=True)
    assert list(again["generations"]) == [6, 6, 6]


def test_without_output_nothing_is_left_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    rmjudge.score(ROWS, engine=judge(), samples=1)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_is_a_typed_error_that_says_what_was_kept(tmp_path):
    def interrupt(request, i):
        raise KeyboardInterrupt

    with pytest.raises(rmjudge.Interrupted, match="nothing was kept .*pass output="):
        rmjudge.score(ROWS, engine=ScriptedEngine(interrupt))
    with pytest.raises(rmjudge.Interrupted, match="rerun the same command to resume"):
        rmjudge.score(ROWS, engine=ScriptedEngine(interrupt), output=tmp_path / "j.duckdb")


def test_a_generator_that_raises_midway_keeps_the_rows_it_gave_then_raises(tmp_path):
    """The rows a generator yielded before it raised were lost (pulled by the judge, never
    stored): they are judged and stored, then its error is raised, and a rerun resumes."""
    rows = [{"id": f"p{i}", "prompt": f"q{i}", "chosen": "good", "rejected": "bad"}
            for i in range(20)]

    def flaky(n):
        yield from rows[:n]
        raise ValueError("the source broke")

    out = tmp_path / "j.duckdb"
    with pytest.raises(ValueError, match="the source broke"):
        rmjudge.score(flaky(13), engine=judge(), samples=1, commit_every=4, output=out)
    got = rmjudge.open_store(out).pairs
    assert sorted(got["id"]) == sorted(r["id"] for r in rows[:13])
    assert got["correct"].all()
    assert list(rmjudge.open_store(out).runs["status"]) == ["failed"]
    table = rmjudge.score(rows, engine=judge(), samples=1, output=out)
    assert len(table) == 20 and table["correct"].all()
    assert list(rmjudge.open_store(out).runs["pairs_judged"]) == [13, 7]


def test_score_batches_yields_each_committed_chunk_and_resumes_after_a_break(tmp_path):
    rows = [{"id": f"p{i}", "prompt": f"q{i}", "chosen": "good", "rejected": "bad"}
            for i in range(12)] + [{"prompt": "no responses"}]
    whole = rmjudge.score(rows, engine=judge(), samples=1)
    chunks = list(rmjudge.score_batches(iter(rows), engine=judge(), samples=1, commit_every=4))
    assert [len(c) for c in chunks[:3]] == [4, 4, 4]
    streamed = pd.concat(chunks).sort_values("row_number").reset_index(drop=True)
    assert list(streamed.columns) == list(whole.columns)
    assert verdicts(streamed) == verdicts(whole)
    assert streamed["error"].notna().sum() == 1

    out = tmp_path / "stream.duckdb"
    for chunk in rmjudge.score_batches(rows, engine=judge(), samples=1, commit_every=2,
                                       output=out):
        break  # stops the worker; what it committed stays
    store = rmjudge.open_store(out)
    kept = len(store.pairs)
    assert 2 <= kept < 12 and list(store.runs["status"]) == ["interrupted"]
    rest = list(rmjudge.score_batches(rows, engine=judge(), samples=1, commit_every=2,
                                      output=out))
    new_ids = set(pd.concat(rest)["id"].dropna())
    assert len(new_ids) == 12 - kept + 0 and not new_ids & set(store.pairs["id"])
    assert verdicts(rmjudge.open_store(out).results) == verdicts(whole)


def test_score_batches_checks_settings_and_paths_when_called(tmp_path):
    with pytest.raises(rmjudge.SettingsError):
        rmjudge.score_batches(ROWS, engine=judge(), samples=0)
    with pytest.raises(rmjudge.InputError, match="not found"):
        rmjudge.score_batches(tmp_path / "nope.jsonl", engine=judge())
    numeric = [{"prompt": "p", "response_a": "a", "response_b": "b", "label": 1}]
    batches = rmjudge.score_batches(numeric, engine=judge())
    with pytest.raises(rmjudge.UserError, match="--label-values"):
        next(batches)


def test_open_store_reads_a_parquet_export_and_refuses_what_is_not_a_store(tmp_path):
    out = tmp_path / "judged.parquet"
    rows = ROWS + [{"prompt": "no responses"}]
    table = rmjudge.score(rows, engine=judge(), samples=2, output=out)
    assert out.exists()
    store = rmjudge.open_store(out)
    assert list(store.pairs["id"]) == ["r1", "r2", "r3"]
    assert len(store.samples) == 12 and set(store.samples["stage"]) == {"rollout"}
    assert list(store.errors["row_number"]) == [4]
    assert list(store.runs["status"]) == ["finished"]
    assert verdicts(store.results) == verdicts(table)
    assert store.sql("SELECT count(*) AS n FROM pairs WHERE correct")["n"][0] == 3
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(rmjudge.UserError):
        rmjudge.open_store(tmp_path / "notes.txt")
    with pytest.raises(rmjudge.UserError, match="no judged table"):
        rmjudge.open_store(tmp_path / "missing.duckdb")


def test_a_store_read_between_two_runs_does_not_block_the_resume(tmp_path):
    out = tmp_path / "judged.duckdb"
    rmjudge.score(ROWS[:1], engine=judge(), samples=1, output=out)
    store = rmjudge.open_store(out)
    assert len(store.pairs) == 1
    rmjudge.score(ROWS, engine=judge(), samples=1, output=out)
    assert len(rmjudge.open_store(out).pairs) == 3


# -- the page's examples -----------------------------------------------------------------------

def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_python_page_examples_run(tmp_path, monkeypatch, capsys):
    """Every ```python block of docs/python.md, in order, in one namespace, with the scripted
    judge standing in for the model each example would load."""
    import rmjudge.engine
    import rmjudge.runs.setup

    monkeypatch.setattr(rmjudge.runs.setup, "load_judge_engine", lambda *a, **k: ScriptedEngine(knows))
    monkeypatch.setattr(rmjudge.engine, "load_engine", lambda *a, **k: ScriptedEngine(knows))
    shutil.copy(EXAMPLE, tmp_path / "pairs.jsonl")
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks((ROOT / "docs" / "python.md").read_text())
    assert len(blocks) >= 8
    namespace: dict = {}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/python.md block {i + 1}", "exec"), namespace)
        except Exception as exc:
            pytest.fail(f"docs/python.md block {i + 1} failed: {type(exc).__name__}: {exc}\n"
                        f"{block}")
    out = capsys.readouterr().out
    assert "refused: nothing was judged" in out
    assert "20 pairs judged" in out


def test_ctrl_c_in_the_loop_of_score_batches_is_interrupted_and_keeps_the_chunks(tmp_path):
    rows = [{"id": f"p{i}", "prompt": f"q{i}", "chosen": "good", "rejected": "bad"}
            for i in range(10)]
    out = tmp_path / "j.duckdb"
    batches = rmjudge.score_batches(rows, engine=judge(), samples=1, commit_every=2, output=out)
    first = next(batches)
    with pytest.raises(rmjudge.Interrupted, match="resume"):
        batches.throw(KeyboardInterrupt)
    store = rmjudge.open_store(out)
    assert set(first["id"]) <= set(store.pairs["id"])
    assert list(store.runs["status"]) == ["interrupted"]


def test_without_pandas_the_api_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['pandas'] = None; import rmjudge\n"
            "try:\n    rmjudge.score([{'prompt': 'p', 'chosen': 'a', 'rejected': 'b'}])\n"
            "except rmjudge.MissingExtraError as exc:\n    print(exc)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    assert out == ("rmjudge's Python API (tables as pandas DataFrames) needs pandas, which is not "
                   "installed: pip install '.[notebook]' in the rmjudge clone")


def test_open_store_reads_a_bare_export_whose_run_store_is_gone(tmp_path):
    from rmjudge.files import store_path

    out = tmp_path / "judged.parquet"
    rows = ROWS + [{"prompt": "no responses"}]
    table = rmjudge.score(rows, engine=judge(), samples=1, output=out)
    Path(store_path(str(out))).unlink()  # copied elsewhere without its hidden run store
    store = rmjudge.open_store(out)
    assert list(store.pairs["id"]) == ["r1", "r2", "r3"] and len(store.samples) == 6
    assert list(store.errors["row_number"]) == [4] and store.runs.empty
    assert verdicts(store.results) == verdicts(table)


def test_rank_candidates_and_open_store_refuse_other_objects_with_a_typed_error(tmp_path):
    """Objects where a path is expected are one typed error, not a traceback from inside."""
    import rmjudge

    with pytest.raises(rmjudge.InputError, match="not a list"):
        rmjudge.rank_candidates([{"prompt": "p", "responses": ["a", "b"]}],
                                str(tmp_path / "r.duckdb"))
    with pytest.raises(rmjudge.UserError, match="not a NoneType"):
        rmjudge.open_store(None)
    assert not (tmp_path / "r.duckdb").exists()


def test_open_store_reads_a_ranked_store_its_rankings_and_every_table(tmp_path):
    """A store of `rmjudge rank`: `rankings` as a DataFrame, and SQL over every table it holds
    (rankings and meta included); a store of `score` has an empty `rankings` with its
    columns."""
    import json

    from helpers import quality_engine

    from rmjudge.core.settings import JudgeSettings
    from rmjudge.rank import rank

    src = tmp_path / "candidates.jsonl"
    src.write_text(json.dumps({"id": "p0", "prompt": "which?", "ratings": [1, 5, 3],
                               "responses": ["one q=1", "five q=5", "three q=3"]}) + "\n")
    out = tmp_path / "ranked.duckdb"
    rank(str(src), str(out), engine=quality_engine(), judge=JudgeSettings(samples=1))
    store = rmjudge.open_store(out)
    ranked = store.rankings.sort_values("rank")
    assert list(ranked["candidate"]) == [1, 2, 0] and list(ranked["gold_rank"]) == [1, 2, 3]
    assert {"pairs", "samples", "errors", "runs", "meta", "rankings"} <= set(store.tables)
    top = store.sql("SELECT prompt_id, candidate FROM rankings WHERE rank = 1")
    assert top.values.tolist() == [["p0", 1]]
    assert store.sql("SELECT count(*) AS n FROM meta")["n"][0] > 0
    assert len(store.pairs) == 3  # the comparisons
    scored = tmp_path / "judged.duckdb"
    rmjudge.score(ROWS, engine=judge(), samples=1, output=scored)
    plain = rmjudge.open_store(scored)
    assert plain.rankings.empty and {"prompt_id", "candidate", "rank"} <= set(plain.rankings)
    assert plain.sql("SELECT count(*) AS n FROM rankings")["n"][0] == 0
    assert "rankings" in plain.tables
