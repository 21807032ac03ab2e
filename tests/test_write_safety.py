"""Every command that writes keeps `rmjudge score`'s rules: an output that is one of its inputs,
or an existing file the command did not write, is refused with one `Error:` line and left
byte-for-byte unchanged, before any model loads (the models given here are missing or fake,
so a command that loaded one first would fail with another message). Also: a missing training
extra, a missing or non-model `--model`, and non-GGUF / truncated GGUF inputs are one `Error:`
line, as users meet them on stderr."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from analysis_fixture import FIXTURE, build
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
FAKE_GGUF = b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 56  # the magic, then nothing usable
MISSING_MODEL = "/nonexistent/judge.gguf"


def _cli(name):
    if name == "rmjudge":
        from rmjudge.cli import main
    elif name == "train":
        from rmjudge.training.cli import main
    else:
        from rmjudge.quantize.cli import main
    return main


def _digest(path: Path) -> str:
    """sha256 of a file, or of every file (name and bytes) under a folder."""
    h = hashlib.sha256()
    if path.is_dir():
        for p in sorted(path.rglob("*")):
            h.update(str(p.relative_to(path)).encode())
            if p.is_file():
                h.update(p.read_bytes())
    else:
        h.update(path.read_bytes())
    return h.hexdigest()


def _refused(cli: str, args: list[str], protected: Path) -> str:
    before = _digest(protected)
    r = CliRunner().invoke(_cli(cli), [str(a) for a in args])
    lines = r.stderr.splitlines()
    assert r.exit_code != 0, r.output
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    assert "Traceback" not in r.output
    assert _digest(protected) == before, f"{protected} was changed"
    assert str(protected) in lines[0], f"the refusal must name {protected}: {lines[0]}"
    return lines[0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Inputs of every writing command: pairs, a judged store, a filter export, a fake GGUF, a
    PEFT adapter folder, a Hugging Face folder, training examples."""
    d = tmp_path_factory.mktemp("world")
    shutil.copy(FIXTURE, d / "pairs.jsonl")
    build(d, "judged.duckdb")
    r = CliRunner().invoke(_cli("rmjudge"), ["filter", str(d / "judged.duckdb"), "-o",
                                             str(d / "export.jsonl"), "--allow-inconsistent"])
    assert r.exit_code == 0, r.output
    (d / "fake.gguf").write_bytes(FAKE_GGUF)
    (d / "adapter").mkdir()
    (d / "adapter" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    (d / "hf").mkdir()
    (d / "hf" / "config.json").write_text("{}")
    from rmjudge.training.data import write_examples

    write_examples([{"id": "x#pref", "task": "pref", "source_id": "x", "label": 1,
                     "prompt": [{"role": "user", "content": "q"}], "conversation": [],
                     "responses": ["a", "b"], "suffix": "", "critique_rollouts": None}],
                   d / "data.jsonl")
    return d


def _copy(world, tmp_path, name) -> Path:
    src = world / name
    dest = tmp_path / name
    (shutil.copytree if src.is_dir() else shutil.copy)(src, dest)
    return dest


# Each case: (cli, args, protected) for -o naming an input of the command.
def _as_input(cmd: str, w: Path, t: Path):
    pairs, judged = _copy(w, t, "pairs.jsonl"), _copy(w, t, "judged.duckdb")
    gguf, adapter, hf = _copy(w, t, "fake.gguf"), _copy(w, t, "adapter"), _copy(w, t, "hf")
    export = w / "export.jsonl"
    return {
        "score": ("rmjudge", ["score", pairs, "-o", pairs, "--model", MISSING_MODEL], pairs),
        "filter": ("rmjudge", ["filter", judged, "-o", judged], judged),
        "report": ("rmjudge", ["report", judged, "-o", judged], judged),
        "view": ("rmjudge", ["view", judged, "-o", judged], judged),
        "push --dry-run": ("rmjudge", ["push", export, "org/name", "--dry-run", export], export),
        "merge": ("rmjudge", ["merge", judged, "-o", judged], judged),
        "ray-score": ("rmjudge", ["ray-score", f"{judged}:pairs", "-o", judged, "--model",
                                  MISSING_MODEL], judged),
        "build-data": ("train", ["build-data", pairs, "-o", pairs, "--model", MISSING_MODEL],
                       pairs),
        "sft": ("train", ["sft", pairs, "-o", pairs, "--model", MISSING_MODEL], pairs),
        "grpo": ("train", ["grpo", "--model", hf, "--data", w / "data.jsonl", "-o", hf], hf),
        "export unpack": ("export", ["unpack", gguf, gguf], gguf),
        "export merge": ("export", ["merge", "--base", hf, "--adapter", adapter, "-o", adapter],
                         adapter),
        "export convert": ("export", ["convert", hf, "-o", hf], hf),
        "export quantize": ("export", ["quantize", gguf, "-o", gguf], gguf),
        "export lora": ("export", ["lora", adapter, "--base", gguf, "-o", gguf], gguf),
    }[cmd]


# Each case: (cli, args, protected) for -o naming an existing file the command did not write.
def _foreign(cmd: str, w: Path, t: Path):
    mine = t / "mine"
    mine.mkdir()
    pairs, judged = w / "pairs.jsonl", w / "judged.duckdb"
    hf = w / "hf"
    f = {ext: mine / f"notes.{ext}" for ext in ("duckdb", "jsonl", "html", "gguf")}
    for ext, p in f.items():
        p.write_text(f"my own {ext} file\n")
    folder = mine / "folder"
    folder.mkdir()
    (folder / "README.md").write_text("# my notes\n")
    (folder / "config.json").write_text('{"mine": true}\n')
    return {
        "score": ("rmjudge", ["score", pairs, "-o", f["duckdb"], "--model", MISSING_MODEL],
                  f["duckdb"]),
        "filter": ("rmjudge", ["filter", judged, "-o", f["jsonl"]], f["jsonl"]),
        "report": ("rmjudge", ["report", judged, "-o", f["html"]], f["html"]),
        "view": ("rmjudge", ["view", judged, "-o", folder], folder),
        "push --dry-run": ("rmjudge", ["push", w / "export.jsonl", "org/name", "--dry-run",
                                       folder], folder),
        "merge": ("rmjudge", ["merge", judged, "-o", f["duckdb"]], f["duckdb"]),
        "ray-score": ("rmjudge", ["ray-score", pairs, "-o", f["duckdb"], "--model",
                                  MISSING_MODEL], f["duckdb"]),
        "build-data": ("train", ["build-data", pairs, "-o", f["jsonl"], "--model",
                                 MISSING_MODEL], f["jsonl"]),
        "sft": ("train", ["sft", pairs, "-o", folder, "--model", MISSING_MODEL], folder),
        "grpo": ("train", ["grpo", "--model", hf, "--data", w / "data.jsonl", "-o", folder],
                 folder),
        "export unpack": ("export", ["unpack", w / "fake.gguf", folder], folder),
        "export merge": ("export", ["merge", "--base", hf, "--adapter", w / "adapter", "-o",
                                    folder], folder),
        "export convert": ("export", ["convert", hf, "-o", f["gguf"]], f["gguf"]),
        "export quantize": ("export", ["quantize", w / "fake.gguf", "-o", f["gguf"]], f["gguf"]),
        "export lora": ("export", ["lora", w / "adapter", "--base", hf, "-o", f["gguf"]],
                        f["gguf"]),
    }[cmd]


WRITERS = ["score", "filter", "report", "view", "push --dry-run", "merge", "ray-score", "build-data",
           "sft", "grpo", "export unpack", "export merge", "export convert", "export quantize",
           "export lora"]


@pytest.mark.parametrize("cmd", WRITERS)
def test_every_writing_command_refuses_its_input_as_output(world, tmp_path, cmd):
    if cmd == "ray-score":
        pytest.importorskip("ray")
    cli, args, protected = _as_input(cmd, world, tmp_path)
    _refused(cli, args, protected)


@pytest.mark.parametrize("cmd", WRITERS)
def test_every_writing_command_refuses_a_file_it_did_not_write(world, tmp_path, cmd):
    if cmd == "ray-score":
        pytest.importorskip("ray")
    cli, args, protected = _foreign(cmd, world, tmp_path)
    _refused(cli, args, protected)


# -- build-data ---------------------------------------------------------------------------------

def test_build_data_refuses_its_input_through_symlinks_relative_paths_and_hard_links(world,
                                                                                    tmp_path):
    one = tmp_path / "one.jsonl"
    one.write_text((world / "pairs.jsonl").read_text().splitlines()[0] + "\n")
    (tmp_path / "link.jsonl").symlink_to(one)
    os.link(one, tmp_path / "hard.jsonl")
    rel = os.path.relpath(one)
    for out in (one, tmp_path / "link.jsonl", tmp_path / "hard.jsonl", rel):
        line = _refused("train", ["build-data", one, "-o", out, "--samples", "2",
                                  "--max-tokens", "8"], one)
        assert "would overwrite the input" in line
    # the rollout cache and the stats file are outputs too
    line = _refused("train", ["build-data", one, "-o", tmp_path / "d.jsonl", "--cache", one],
                    one)
    assert "would overwrite the input" in line
    assert line.endswith("; choose another --cache")  # the option to change, not -o


def test_build_data_refuses_a_bad_extension_before_loading_a_model(world, tmp_path):
    r = CliRunner().invoke(_cli("train"), ["build-data", str(world / "pairs.jsonl"), "-o",
                                           str(tmp_path / "x.txt"), "--model", MISSING_MODEL])
    assert r.exit_code == 1
    assert r.stderr == f"Error: output {tmp_path / 'x.txt'}: use a .jsonl or .parquet file name\n"


def test_build_data_replaces_only_its_own_unchanged_output(world, tmp_path):
    """A rerun replaces the file build-data wrote (its stats record the sha256); once edited,
    the file is someone's and needs --overwrite."""
    from helpers import pref

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.training.data import DataConfig, build_data, stats_path
    from rmjudge.training.rollouts import EngineRollouts, SamplingSettings

    src = EngineRollouts(ScriptedEngine(lambda req, i: pref(1 + i % 2)),
                         SamplingSettings(samples=2, temperature=1.0, max_tokens=8, seed=0))
    out = tmp_path / "train.jsonl"
    build_data(str(world / "pairs.jsonl"), out, src, DataConfig(ratio="1:1"))
    assert json.loads(stats_path(out).read_text())["output_sha256"] == \
        hashlib.sha256(out.read_bytes()).hexdigest()
    build_data(str(world / "pairs.jsonl"), out, src, DataConfig(ratio="1:1"))  # rerun: fine
    out.write_bytes(out.read_bytes() + b"\n")
    line = _refused("train", ["build-data", world / "pairs.jsonl", "-o", out, "--model",
                              MISSING_MODEL], out)
    assert "not written by `rmjudge-train build-data`" in line and "--overwrite" in line
    build_data(str(world / "pairs.jsonl"), out, src, DataConfig(ratio="1:1"), overwrite=True)
    assert not [p.name for p in tmp_path.iterdir() if ".new-" in p.name]


# -- sft / grpo output folders ------------------------------------------------------------------

def test_training_folders_accept_their_own_earlier_output(world, tmp_path):
    from rmjudge.training.grpo import GRPOSettings, check_output
    from rmjudge.training.outputs import claim_output_dir

    s = GRPOSettings(model=str(world / "hf"), data=str(world / "data.jsonl"),
                     output_dir=str(tmp_path / "run"))
    check_output(s)  # new folder
    claim_output_dir(s, "rmjudge-train grpo")
    (tmp_path / "run" / "log.jsonl").write_text("{}\n")
    check_output(s)  # its own: --resume writes into it
    sft_run = tmp_path / "sft"
    sft_run.mkdir()
    (sft_run / "x").write_text("")
    claim = GRPOSettings(model=str(world / "hf"), data=str(world / "data.jsonl"),
                         output_dir=str(sft_run))
    from rmjudge.files import OverwriteError

    with pytest.raises(OverwriteError, match="did not write"):
        check_output(claim)
    check_output(claim, overwrite=True)


# -- missing extras, bad models -----------------------------------------------------------------

BLOCK_TORCH = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
sys.argv = ["rmjudge-train"] + sys.argv[1:]
from rmjudge.training.cli import main
main()
"""


@pytest.mark.parametrize("args", [
    ["sft", "{pairs}", "-o", "{tmp}/warm"],
    ["eval", "--model", "{hf}", "--data", "{data}"],
    ["build-data", "{pairs}", "-o", "{tmp}/d.jsonl", "--backend", "transformers", "--model",
     "{hf}"],
], ids=["sft", "eval", "build-data-transformers"])
def test_without_torch_training_commands_name_the_extra(world, tmp_path, args):
    args = [a.format(pairs=world / "pairs.jsonl", tmp=tmp_path, hf=world / "hf",
                     data=world / "data.jsonl") for a in args]
    r = subprocess.run([sys.executable, "-c", BLOCK_TORCH, *args], capture_output=True,
                       text=True, cwd=ROOT, timeout=300, check=False)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: "), r.stderr
    assert "torch" in r.stderr and "pip install '.[train]'" in r.stderr


def test_a_missing_or_non_model_path_is_one_error_line(world, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model\n")
    for model, says in (("/nonexistent_dir", "model not found: /nonexistent_dir"),
                        (notes, "is not a GGUF file"),
                        (tmp_path, "is not a Hugging Face model folder (no config.json)")):
        r = CliRunner().invoke(_cli("train"), ["eval", "--model", str(model), "--data",
                                               str(world / "data.jsonl")])
        assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.output
        assert r.stderr.startswith("Error: ") and says in r.stderr, r.stderr
        r = CliRunner().invoke(_cli("train"), ["build-data", str(world / "pairs.jsonl"), "-o",
                                               str(tmp_path / "d.jsonl"), "--model", str(model),
                                               "--backend", "transformers"])
        assert r.exit_code == 1 and says in r.stderr and r.stderr.count("\n") == 1, r.output


@pytest.fixture(scope="module")
def bad_ggufs(tmp_path_factory, model_path):
    d = tmp_path_factory.mktemp("bad")
    (d / "notes.gguf").write_text("hello\n")
    (d / "truncated.gguf").write_bytes(Path(model_path).read_bytes()[:2_000_000])
    (d / "empty").mkdir()
    return d


@pytest.mark.model
@pytest.mark.parametrize("bad,says", [
    ("notes.gguf", "is not a GGUF file (bad magic"),
    ("truncated.gguf", "the file is corrupt, truncated or of an unsupported architecture"),
    ("empty", "got a folder"),
])
@pytest.mark.parametrize("cmd", ["unpack", "quantize", "verify"])
def test_export_commands_refuse_bad_ggufs_in_one_line(bad_ggufs, tmp_path, model_path, cmd,
                                                      bad, says):
    path = bad_ggufs / bad
    if cmd == "verify":
        hf = tmp_path / "hf"
        hf.mkdir()
        (hf / "config.json").write_text("{}")
        args = ["verify", hf, "--gguf", path]
    else:
        args = {"unpack": ["unpack", path, tmp_path / "out"],
                "quantize": ["quantize", path, "-o", tmp_path / "q.gguf"]}[cmd]
    r = CliRunner().invoke(_cli("export"), [str(a) for a in args])
    assert r.exit_code == 1, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: "), r.stderr
    assert says in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "q.gguf").exists()


def test_verify_refuses_an_empty_reference_folder(world, tmp_path):
    r = CliRunner().invoke(_cli("export"), ["verify", str(tmp_path), "--gguf",
                                            str(world / "fake.gguf")])
    assert r.exit_code == 1
    assert r.stderr == (f"Error: {tmp_path} is not a Hugging Face model folder (no config.json): "
                        "pass the folder that save_pretrained wrote\n")


# -- folders built beside their target ----------------------------------------------------------

def test_a_folder_is_moved_in_without_replacing_a_file_that_appeared(tmp_path):
    from rmjudge.files import OverwriteError, install_folder, temp_folder_beside

    out = tmp_path / "model"
    tmp = temp_folder_beside(str(out))
    Path(tmp, "config.json").write_text("new")
    install_folder(tmp, str(out), overwrite=False)  # a new folder: renamed into place
    assert (out / "config.json").read_text() == "new" and not Path(tmp).exists()
    tmp = temp_folder_beside(str(out))
    Path(tmp, "config.json").write_text("newer")
    with pytest.raises(OverwriteError, match="appeared while"):
        install_folder(tmp, str(out), overwrite=False)
    assert (out / "config.json").read_text() == "new" and not Path(tmp).exists()
    tmp = temp_folder_beside(str(out))
    Path(tmp, "config.json").write_text("newer")
    install_folder(tmp, str(out), overwrite=True)
    assert (out / "config.json").read_text() == "newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


class Saver:
    """A library's saver: `save_pretrained(folder)` writes its files into `folder`."""

    def __init__(self, files: dict[str, str], fail: bool = False):
        self.files, self.fail, self.folders = files, fail, []

    def save_pretrained(self, folder: str, suffix: str = "") -> None:
        self.folders.append(folder)
        for name, text in self.files.items():
            Path(folder, name).write_text(text + suffix)
        if self.fail:
            raise OSError(28, "No space left on device")


def test_save_folder_moves_a_savers_folder_in_whole_and_a_failure_leaves_the_old_one(tmp_path):
    import functools

    from rmjudge.files import save_folder

    out = tmp_path / "run" / "model"
    model, tok = Saver({"model.safetensors": "w1"}), Saver({"tokenizer.json": "t1"})
    save_folder(str(out), model.save_pretrained, tok.save_pretrained)
    assert model.folders == tok.folders and Path(model.folders[0]).parent == out.parent
    assert Path(model.folders[0]).name.startswith(".model.new-")  # built beside, not in place
    assert {p.name: p.read_text() for p in out.iterdir()} == {"model.safetensors": "w1",
                                                               "tokenizer.json": "t1"}
    save_folder(str(out), functools.partial(model.save_pretrained, suffix="-2"))
    assert {p.name: p.read_text() for p in out.iterdir()} == {"model.safetensors": "w1-2"}
    broken = Saver({"model.safetensors": "half"}, fail=True)
    with pytest.raises(OSError):
        save_folder(str(out), broken.save_pretrained)
    assert {p.name: p.read_text() for p in out.iterdir()} == {"model.safetensors": "w1-2"}
    assert sorted(p.name for p in out.parent.iterdir()) == ["model"]  # no temporary, no lock


def test_scratch_is_removed_with_its_files_and_lies_beside_a_file_when_asked(tmp_path):
    from rmjudge.files import scratch

    target = tmp_path / "out.duckdb"
    with scratch(prefix=".out.work-", beside=str(target)) as folder:
        assert Path(folder).parent == tmp_path and Path(folder).name.startswith(".out.work-")
        Path(folder, "batch").mkdir()
        Path(folder, "batch", "pairs.parquet").write_bytes(b"x")
    assert not Path(folder).exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(KeyError):
        with scratch() as folder:
            raise KeyError("stop")
    assert not Path(folder).exists()


# -- temporaries of a killed writer: beside the output, cleaned by the next run ---------------

_WRITER = """
import sys, time
from rmjudge.files import write_produced
from rmjudge.training.outputs import StagedCheckpoints
from pathlib import Path

what, target = sys.argv[1], sys.argv[2]
if what == "file":
    def produce(tmp):
        with open(tmp, "wb") as f:
            f.write(b"half an output")
            f.flush()
            print("writing", flush=True)
            time.sleep(60)
    write_produced(target, produce)
else:
    staged = StagedCheckpoints(Path(target), keep=2)
    (Path(staged.path) / "checkpoint-5").mkdir()
    (Path(staged.path) / "checkpoint-5" / "model.safetensors").write_bytes(b"half")
    print("writing", flush=True)
    time.sleep(60)
"""


def _writer(what: str, target) -> subprocess.Popen:
    """A process writing `target` through the store (a file, or trainer checkpoints), stopped
    halfway: it prints "writing" and sleeps."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", _WRITER, what, str(target)],
                         stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "writing"
    return p


def _killed(p: subprocess.Popen) -> None:
    p.kill()
    p.wait()


def test_build_data_removes_a_killed_writers_temporaries_and_leaves_a_live_ones(tmp_path):
    from test_training_data import build

    out = tmp_path / "train.jsonl"
    dead = _writer("file", out)
    dead_files = sorted(n for n in os.listdir(tmp_path) if n.startswith(".train.jsonl.new-"))
    _killed(dead)
    assert len(dead_files) == 2 and dead_files[1].endswith(".lock")  # the temporary and its lock
    live = _writer("file", out)
    try:
        live_files = sorted(set(n for n in os.listdir(tmp_path)
                                if n.startswith(".train.jsonl.new-")) - set(dead_files))
        build(tmp_path, ["mixed-1", "hard-1"])
        left = sorted(n for n in os.listdir(tmp_path) if ".new-" in n)
        assert left == live_files  # the killed one's gone; the live one's untouched
    finally:
        _killed(live)
    assert out.is_file() and b"half an output" not in out.read_bytes()


def test_training_checkpoints_are_staged_and_a_killed_runs_are_removed(tmp_path):
    from types import SimpleNamespace

    from rmjudge.training.outputs import StagedCheckpoints, claim_output_dir

    out = tmp_path / "run"
    out.mkdir()
    dead = _writer("checkpoints", out)
    _killed(dead)
    staged_dead = [n for n in os.listdir(out) if n.startswith(".checkpoints.new-")]
    assert len(staged_dead) == 2  # a half checkpoint aside (never in out itself), and its lock
    assert not any(n.startswith("checkpoint-") for n in os.listdir(out))
    live = _writer("checkpoints", out)
    try:
        live_staged = sorted(set(n for n in os.listdir(out) if n.startswith(".checkpoints.new-"))
                             - set(staged_dead))
        claim_output_dir(SimpleNamespace(output_dir=str(out)), "rmjudge-train sft")
        assert sorted(n for n in os.listdir(out) if ".new-" in n) == live_staged
    finally:
        _killed(live)
    staged = StagedCheckpoints(out, keep=2)
    try:
        for step in (1, 2, 3):  # what the trainer writes, then its on_save
            (Path(staged.path) / f"checkpoint-{step}").mkdir()
            (Path(staged.path) / f"checkpoint-{step}" / "state.json").write_text(str(step))
            assert staged.collect() == [str(out / f"checkpoint-{step}")]
        (Path(staged.path) / "checkpoint-3").mkdir()  # saved again (a resumed run)
        (Path(staged.path) / "checkpoint-3" / "state.json").write_text("again")
        staged.collect()
    finally:
        staged.close()
    assert sorted(n for n in os.listdir(out) if n.startswith("checkpoint-")) == [
        "checkpoint-2", "checkpoint-3"]
    assert (out / "checkpoint-3" / "state.json").read_text() == "again"
    assert sorted(n for n in os.listdir(out) if ".new-" in n or n.startswith(".old-")) == \
        live_staged  # this run's staging is gone; the killed live writer's waits for a run
