"""Hub dataset ids the Hub's way: `hf://datasets/ORG/NAME@REVISION` pins a revision, the config
and split go in a query or --config / --split, the commit read is recorded (a resume against a
moved revision is refused, the card names it), and the old `:CONFIG@SPLIT` form still reads with
a one-line warning. Everything runs offline against a Hub cache laid out as huggingface_hub lays
it out (refs/, snapshots/<commit>/ linking into blobs/), in fresh interpreters, since the Hub's
offline switch is read at import time."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import duckdb
import pytest

from rmjudge.io.huggingface import (HubSource, hub_uri, output_parts, parse_hub_source,
                                    with_config_split)
from rmjudge.io.readers import InputError, default_output_stem

if importlib.util.find_spec("datasets") is None:  # found, not imported: collection stays light
    pytest.skip("datasets is not installed", allow_module_level=True)

TESTS = Path(__file__).resolve().parent
OLD = "1" * 40  # the first commit, tagged v1
NEW = "2" * 40  # the second commit, where main points once it "moves"
REPO = "org/prefs"


def _rows(tag: str, n: int) -> list[dict]:
    return [{"id": f"{tag}{i}", "prompt": f"question {i}", "chosen": f"a good answer {i}",
             "rejected": f"bad {i}"} for i in range(n)]


# The second commit keeps the first row (so only the recorded commit tells them apart) and
# changes the rest.
OLD_TRAIN, OLD_TEST = _rows("old", 4), _rows("oldtest", 2)
NEW_TRAIN, NEW_TEST = OLD_TRAIN[:1] + _rows("new", 5)[1:], _rows("newtest", 2)

README = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/train.parquet
  - split: test
    path: en/test.parquet
---
# prefs
"""


def _parquet_bytes(tmp: Path, rows: list[dict]) -> bytes:
    src, out = tmp / "rows.jsonl", tmp / "rows.parquet"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    duckdb.execute(f"COPY (SELECT * FROM read_json_auto('{src}')) TO '{out}' (FORMAT parquet)")
    data = out.read_bytes()
    src.unlink()
    out.unlink()
    return data


def _commit(root: Path, commit: str, files: dict[str, bytes]) -> None:
    """snapshots/<commit>/<path> as relative links to blobs/<hash>, as hf download leaves them."""
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = root / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))


def hub_cache(home: Path, tmp: Path) -> Path:
    """org/prefs with two commits: OLD (tag v1, and main for now) and NEW."""
    root = home / "hub" / ("datasets--" + REPO.replace("/", "--"))
    for commit, train, test in ((OLD, OLD_TRAIN, OLD_TEST), (NEW, NEW_TRAIN, NEW_TEST)):
        _commit(root, commit, {"README.md": README.encode(),
                               "en/train.parquet": _parquet_bytes(tmp, train),
                               "en/test.parquet": _parquet_bytes(tmp, test)})
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(OLD)
    (root / "refs" / "v1").write_text(OLD)
    return root


def move_main(root: Path) -> None:
    (root / "refs" / "main").write_text(NEW)


def _env(home: Path) -> dict:
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "RMJUDGE_MODEL": str(home / "fake.gguf")}
    for var in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "HUGGINGFACE_HUB_CACHE",
                "HF_DATASETS_OFFLINE"):
        env.pop(var, None)
    return env


PROBE = r"""
import json, sys
from rmjudge.io.huggingface import resolved_revision
from rmjudge.io.readers import InputError, read_rows
out = {}
for src in sys.argv[1:]:
    try:
        ids = [r.obj["id"] for r in read_rows(src)]
        out[src] = {"ids": ids, "revision": resolved_revision(src)}
    except InputError as exc:
        out[src] = {"error": str(exc)}
print("RESULT " + json.dumps(out))
"""

# `rmjudge` itself, with the scripted judge in place of the model (the CLI's own error handling,
# stderr and exit code are what the user meets).
CLI = r"""
import sys
sys.path.insert(0, sys.argv[1])
from test_score import length_judge
import rmjudge.engine
from rmjudge.engine.fake import ScriptedEngine
rmjudge.engine.load_engine = lambda es, server=None: ScriptedEngine(length_judge)
from rmjudge.cli import main
main(sys.argv[2:], prog_name="rmjudge")
"""


def probe(home: Path, *sources: str) -> dict:
    res = subprocess.run([sys.executable, "-c", PROBE, *sources], capture_output=True,
                         text=True, env=_env(home), timeout=300, check=False)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, res.stderr[-3000:]
    return json.loads(line[0][len("RESULT "):])


def rmjudge(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    (home / "fake.gguf").write_bytes(b"GGUF" + bytes(28))
    return subprocess.run([sys.executable, "-c", CLI, str(TESTS), *args], capture_output=True,
                          text=True, env=_env(home), timeout=300, cwd=cwd, check=False)


def ids_of(store: Path) -> list[str]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return [r[0] for r in con.execute("SELECT id FROM pairs ORDER BY row_number").fetchall()]
    finally:
        con.close()


def input_meta(store: Path) -> dict:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return json.loads(con.execute("SELECT value FROM meta WHERE key = 'input'").fetchone()[0])
    finally:
        con.close()


def ids(rows: list[dict]) -> list[str]:
    return [r["id"] for r in rows]


# -- the id's text --------------------------------------------------------------------------

def test_hub_ids_parse_in_the_hubs_form_and_the_old_one():
    assert parse_hub_source("hf://datasets/org/prefs@v1.0?config=en&split=test") == \
        HubSource("org/prefs", "en", "test", revision="v1.0")
    assert parse_hub_source("hf://datasets/org/prefs@refs%2Fconvert%2Fparquet?split=train") == \
        HubSource("org/prefs", None, "train", revision="refs/convert/parquet")
    assert parse_hub_source("hf://datasets/org/prefs?split=test") == \
        HubSource("org/prefs", None, "test")
    # a bare @X is decided when the dataset is found; with :CONFIG it is the old form's split
    assert parse_hub_source("hf://datasets/org/prefs@test") == \
        HubSource("org/prefs", None, None, at="test")
    assert parse_hub_source("hf://datasets/org/prefs:en@test") == \
        HubSource("org/prefs", "en", "test", legacy=True)
    for bad in ("hf://datasets/org/prefs?splits=test", "hf://datasets/org/prefs?split=",
                "hf://datasets/org/prefs?split=a&split=b"):
        with pytest.raises(InputError, match=r"the query after `\?` takes config=NAME and "
                                             r"split=NAME"):
            parse_hub_source(bad)
    with pytest.raises(InputError, match=r"give the config in the query "
                                         r"\(hf://datasets/org/prefs\?config=en&split=a\)"):
        parse_hub_source("hf://datasets/org/prefs:en?split=a")
    assert hub_uri("org/prefs", "refs/pr/1", "en", None) == \
        "hf://datasets/org/prefs@refs%2Fpr%2F1?config=en"
    # output names: the old form's names are kept, a revision comes last
    assert default_output_stem("hf://datasets/org/prefs:en@test") == "org_prefs.en.test"
    assert default_output_stem("hf://datasets/org/prefs@v1?config=en&split=test") == \
        "org_prefs.en.test.v1"
    assert output_parts("hf://datasets/org/prefs@test") == ["org_prefs", "test"]


def test_config_and_split_options_fold_into_the_id(tmp_path):
    assert with_config_split("hf://datasets/org/prefs@v1", "en", "test") == \
        "hf://datasets/org/prefs@v1?config=en&split=test"
    assert with_config_split("hf://datasets/org/prefs:en@test", None, "test") == \
        "hf://datasets/org/prefs?config=en&split=test"
    assert with_config_split("x.jsonl", None, None) == "x.jsonl"
    with pytest.raises(InputError, match=r"names the config 'en' but --config says 'fr'"):
        with_config_split("hf://datasets/org/prefs:en@test", "fr", None)
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    assert with_config_split(str(tmp_path / "dd"), None, "test") == f"{tmp_path}/dd@test"
    with pytest.raises(InputError, match=r"--config and --split choose .* not of x.jsonl"):
        with_config_split("x.jsonl", None, "test")


def test_config_and_split_options_on_other_inputs_are_one_error_line(tmp_path):
    from click.testing import CliRunner

    from rmjudge.cli import main

    (tmp_path / "x.jsonl").write_text(json.dumps(OLD_TRAIN[0]) + "\n")
    for cmd in ("score", "eval"):
        r = CliRunner().invoke(main, [cmd, str(tmp_path / "x.jsonl"), "--split", "test"])
        assert r.exit_code == 1, r.output
        assert r.stderr == ("Error: --config and --split choose the config and split of a Hugging "
                            "Face dataset (hf://datasets/ORG/NAME; --split also a save_to_disk "
                            f"DatasetDict folder), not of {tmp_path}/x.jsonl\n")
    r = CliRunner().invoke(main, ["score", "hf://datasets/org/prefs:en@test", "--config", "fr"])
    assert r.exit_code == 1 and r.stderr == (
        "Error: hf://datasets/org/prefs:en@test names the config 'en' but --config says 'fr'; "
        "give it once\n")


def test_every_command_that_reads_an_input_dataset_has_config_and_split(tmp_path):
    """score, eval, ray-score, merge --input and rmjudge-train build-data: the same two options,
    generated from `DatasetChoice`, applied before anything else (one error line)."""
    from dataclasses import fields

    from click.testing import CliRunner

    from rmjudge.cli import main
    from rmjudge.io.huggingface import DatasetChoice
    from rmjudge.training.cli import main as train

    x = str(tmp_path / "x.jsonl")
    (tmp_path / "x.jsonl").write_text(json.dumps(OLD_TRAIN[0]) + "\n")
    from rmjudge.cli import eval as eval_cli, merge as merge_cli, ray_score, score as score_cli

    commands = {"score": score_cli.command, "eval": eval_cli.command,
                "ray-score": ray_score.command, "merge": merge_cli.command,
                "build-data": train.commands["build-data"]}
    helps = {f.metadata["option"]: f.metadata["help"] for f in fields(DatasetChoice)}
    for name, cmd in commands.items():
        opts = {o: p.help for p in cmd.params for o in p.opts if o in helps}
        assert opts == helps, name
    error = ("Error: --config and --split choose the config and split of a Hugging Face dataset "
             "(hf://datasets/ORG/NAME; --split also a save_to_disk DatasetDict folder), not of "
             f"{x}\n")
    out = str(tmp_path / "o.duckdb")
    for prog, args in ((main, ["ray-score", x, "-o", out]),
                       (main, ["merge", out, "-o", str(tmp_path / "m.duckdb"), "--input", x]),
                       (train, ["build-data", x, "-o", str(tmp_path / "t.jsonl")])):
        r = CliRunner().invoke(prog, [*args, "--split", "test"])
        assert (r.exit_code, r.stderr) == (1, error), args
    r = CliRunner().invoke(main, ["merge", out, "-o", str(tmp_path / "m.duckdb"), "--split", "x"])
    assert r.exit_code == 1 and r.stderr.startswith("Error: --config and --split choose the "
                                                    "config and split of the --input dataset")


def test_merge_input_and_a_ray_snapshot_read_the_split_asked_for(tmp_path):
    import datasets

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score
    from rmjudge.runs.ray_runner import is_dataset_source, snapshot_input
    from rmjudge.core.settings import JudgeSettings

    from helpers import pref, refl

    dd = str(tmp_path / "dd")
    datasets.DatasetDict(train=datasets.Dataset.from_list(OLD_TRAIN),
                         test=datasets.Dataset.from_list(OLD_TEST)).save_to_disk(dd)
    shard = str(tmp_path / "test.duckdb")

    def respond(req, i):
        return refl(1) if req.share_key[2] == "reflection" else pref(1)

    score(f"{dd}@test", ScriptedEngine(respond), JudgeSettings(samples=1), output=shard)
    from click.testing import CliRunner

    from rmjudge.cli import main

    r = CliRunner().invoke(main, ["merge", shard, "-o", str(tmp_path / "all.duckdb"),
                                  "--input", dd, "--split", "test"])
    assert r.exit_code == 0, r.output
    assert "input: 2 rows" in r.stderr and "problem" not in r.stderr
    assert is_dataset_source(f"{dd}@test") and is_dataset_source("hf://datasets/org/prefs")
    assert not is_dataset_source(str(tmp_path / "x.jsonl"))
    snap = snapshot_input(f"{dd}@test", str(tmp_path))
    assert [json.loads(line) for line in Path(snap).read_text().splitlines()] == OLD_TEST


# -- offline against the cache ----------------------------------------------------------------

@pytest.mark.slow  # fresh interpreters, each importing datasets
def test_a_revision_pins_the_rows_of_its_commit(tmp_path):
    home = tmp_path / "home"
    move_main(hub_cache(home, tmp_path))  # main: NEW; v1: OLD
    base = "hf://datasets/org/prefs"
    got = probe(home, f"{base}?split=train", f"{base}@{OLD}?split=train",
                f"{base}@v1?config=en&split=train", f"{base}@v1", f"{base}@{NEW}?split=test",
                f"{base}@nope", f"{base}@v2?split=train", f"{base}@{'3' * 40}")
    assert got[f"{base}?split=train"] == {
        "ids": ids(NEW_TRAIN), "revision": {"revision": None, "commit": NEW,
                                            "pinned": f"{base}@{NEW}?split=train"}}
    assert got[f"{base}@{OLD}?split=train"] == {
        "ids": ids(OLD_TRAIN), "revision": {"revision": OLD, "commit": OLD,
                                            "pinned": f"{base}@{OLD}?split=train"}}
    assert got[f"{base}@v1?config=en&split=train"] == {
        "ids": ids(OLD_TRAIN), "revision": {"revision": "v1", "commit": OLD,
                                            "pinned": f"{base}@{OLD}?config=en&split=train"}}
    assert got[f"{base}@{NEW}?split=test"]["ids"] == ids(NEW_TEST)
    assert got[f"{base}@v1"]["error"] == (
        f"{base}@v1 has several splits (train, test); choose one: --split train or "
        f"'{base}@v1?split=train'")
    assert got[f"{base}@nope"]["error"] == (
        f"{base}@nope: 'nope' is neither a branch, tag or full commit sha of org/prefs (in the "
        "local cache or on the Hub) nor one of its splits (train, test)")
    for rev in ("v2", "3" * 40):
        err = next(v["error"] for k, v in got.items() if f"@{rev}" in k)
        assert f"org/prefs at revision {rev} is not in the local Hugging Face cache" in err
        assert f"hf download --repo-type dataset --revision {rev} org/prefs" in err


@pytest.mark.slow  # fresh interpreters, each importing datasets
def test_the_old_form_still_reads_with_one_warning_line(tmp_path):
    home = tmp_path / "home"
    move_main(hub_cache(home, tmp_path))
    for old, new in (("hf://datasets/org/prefs:en@test",
                      ("'hf://datasets/org/prefs?config=en&split=test' or "
                       "hf://datasets/org/prefs --config en --split test")),
                     ("hf://datasets/org/prefs@test", ("'hf://datasets/org/prefs?split=test' or "
                                                       "hf://datasets/org/prefs --split test"))):
        out = tmp_path / f"{len(old)}.duckdb"
        r = rmjudge(home, "score", old, "-o", str(out), "--samples", "2", "--quiet")
        assert r.returncode == 0, r.stderr
        warnings = [ln for ln in r.stderr.splitlines() if "warning" in ln]
        assert warnings == [(f"rmjudge: warning: {old} is the old form of a Hub dataset id, read "
                             "until the next release (`@` is now a revision, as in "
                             f"huggingface_hub); write {new}")], r.stderr
        assert ids_of(out) == ids(NEW_TEST)
        assert input_meta(out)["commit"] == NEW


@pytest.mark.slow  # fresh interpreters, each importing datasets
def test_resume_against_a_moved_revision_is_refused_and_the_card_names_the_commit(tmp_path):
    home = tmp_path / "home"
    root = hub_cache(home, tmp_path)  # main: OLD for now
    out = tmp_path / "o.duckdb"
    src = "hf://datasets/org/prefs"
    r = rmjudge(home, "score", src, "--split", "train", "-o", str(out), "--samples", "2",
                "--limit", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    assert ids_of(out) == ids(OLD_TRAIN)[:2]
    assert input_meta(out) | {"fingerprint": None} == {
        "source": f"{src}?split=train", "fingerprint": None, "revision": None, "commit": OLD,
        "pinned": f"{src}@{OLD}?split=train"}

    move_main(root)  # same first row, other data: only the commit tells
    r = rmjudge(home, "score", src, "--split", "train", "-o", str(out), "--samples", "2",
                "--quiet")
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"Error: {out} holds results for commit {OLD} of {src}?split=train, but "
        f"{src}?split=train now resolves to commit {NEW}; to resume, give the input pinned to "
        f"that commit ({src}@{OLD}?split=train) with the same -o, use -o to write elsewhere, or "
        "--overwrite to start again")
    assert ids_of(out) == ids(OLD_TRAIN)[:2]  # untouched
    r = rmjudge(home, "score", f"{src}@{NEW}?split=train", "-o", str(out), "--samples", "2",
                "--quiet")  # another commit named outright: refused alike
    assert r.returncode == 1 and r.stderr.startswith(
        f"Error: {out} holds results for commit {OLD} of {src}?split=train, but "
        f"{src}@{NEW}?split=train is commit {NEW}; to resume, give the input pinned")

    r = rmjudge(home, "score", f"{src}@{OLD}?split=train", "-o", str(out), "--samples", "2",
                "--quiet")  # pinned: resumes with the rows of the first commit
    assert r.returncode == 0, r.stderr
    assert ids_of(out) == ids(OLD_TRAIN)

    # the card names the revision and the commit
    tagged = tmp_path / "v1.duckdb"
    r = rmjudge(home, "score", f"{src}@v1", "--split", "train", "-o", str(tagged), "--samples",
                "2", "--quiet")
    assert r.returncode == 0, r.stderr
    for store, line in ((out, f"- revision: the default branch, commit `{OLD}`"),
                        (tagged, f"- revision: `v1`, commit `{OLD}`")):
        data = tmp_path / f"{store.stem}.parquet"
        r = rmjudge(home, "filter", str(store), "-o", str(data))
        assert r.returncode == 0, r.stderr
        r = rmjudge(home, "push", str(data), "me/x", "--dry-run", str(tmp_path / store.stem))
        assert r.returncode == 0, r.stderr
        card = (tmp_path / store.stem / "README.md").read_text()
        assert line in card, card


# -- online (the Hub's API stood in for) -------------------------------------------------------

class FakeApi:
    """huggingface_hub.HfApi as the Hub answers for org/prefs: main at NEW, tag v1 at OLD."""

    calls: ClassVar[list] = []

    def dataset_info(self, repo, revision=None):
        from types import SimpleNamespace

        FakeApi.calls.append(("dataset_info", repo, revision))
        return SimpleNamespace(sha={None: NEW, "main": NEW, "v1": OLD, OLD: OLD}[revision])

    def list_repo_refs(self, repo, repo_type=None):
        from types import SimpleNamespace

        FakeApi.calls.append(("list_repo_refs", repo, repo_type))
        return SimpleNamespace(branches=[SimpleNamespace(name="main")],
                               tags=[SimpleNamespace(name="v1")])


def test_online_the_revision_is_resolved_to_a_commit_and_that_commit_is_read(monkeypatch,
                                                                             tmp_path, capsys):
    import datasets
    import huggingface_hub
    from huggingface_hub import constants

    from rmjudge.io.huggingface import resolved_revision
    from rmjudge.io.readers import read_rows

    loads = []

    def load_dataset(path, config=None, revision=None, streaming=False):
        loads.append((path, config, revision, streaming))
        rows = {OLD: OLD_TRAIN, NEW: NEW_TRAIN}[revision]
        return {"train": rows, "test": rows[:1]}

    FakeApi.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    src = "hf://datasets/org/online-prefs"
    assert [r.obj["id"] for r in read_rows(f"{src}@v1?split=train")] == ids(OLD_TRAIN)
    assert loads[-1] == ("org/online-prefs", None, OLD, True)  # the commit, not the tag
    assert resolved_revision(f"{src}@v1?split=train") == {
        "revision": "v1", "commit": OLD, "pinned": f"{src}@{OLD}?split=train"}
    assert [r.obj["id"] for r in read_rows(f"{src}?split=train")] == ids(NEW_TRAIN)
    assert loads[-1] == ("org/online-prefs", None, NEW, True)
    # a bare @X: a tag on the Hub is the revision; a split name the old form's split
    with pytest.raises(InputError, match=r"has several splits \(train, test\); choose one: "
                                         r"--split train"):
        list(read_rows(f"{src}@v1"))
    capsys.readouterr()
    assert [r.obj["id"] for r in read_rows(f"{src}@test")] == ids(NEW_TRAIN)[:1]
    assert ("list_repo_refs", "org/online-prefs", "dataset") in FakeApi.calls
    assert f"write '{src}?split=test'" in capsys.readouterr().err
