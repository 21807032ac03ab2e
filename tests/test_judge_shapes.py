"""benchmarks/judge_shapes.py: judge-shaped random-weight GGUFs for timing. A tiny shape is made
(F16 source by the `gguf` package, quantized by llama.cpp's quantizer), once, with the embedded
model's tokenizer and chat template; llama.cpp loads it and rmjudge's engine generates from it.
The real shapes' parameter counts are the published ones."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest
from conftest import HAS_MODEL

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import judge_shapes  # noqa: E402

TINY = judge_shapes.Shape("tiny", "tiny test", hidden=64, layers=2, heads=4, kv_heads=2, ffn=128)


def test_the_shapes_have_the_published_parameter_counts():
    """SmolLM2's model cards: 134,515,008 (135M), 361,821,120 (360M), 1,711,376,384 (1.7B)."""
    counts = {k: s.parameters() for k, s in judge_shapes.SHAPES.items()}
    assert counts["135m"] == 134_515_008
    assert counts["360m"] == 361_821_120
    assert counts["1.7b"] == 1_711_376_384
    assert 7.0e9 < counts["7b"] < 7.5e9


@pytest.mark.model
@pytest.mark.skipif(not HAS_MODEL, reason="the embedded model is not installed")
def test_a_tiny_shape_is_made_once_loads_and_generates(tmp_path):
    pytest.importorskip("gguf")
    from rmjudge.core.settings import EngineSettings
    from rmjudge.core.types import GenRequest
    from rmjudge.engine import load_engine
    from rmjudge.models.gguf_header import gguf_metadata_value
    from rmjudge.engine.llama import LlamaEngine

    path = judge_shapes.bench_model(TINY, "Q8_0", folder=str(tmp_path))
    name = "smollm2-tiny-shape.random-weights.timing-only.Q8_0.gguf"
    assert Path(path).name == name
    assert os.listdir(tmp_path) == [name]  # the F16 source removed, no temporary left
    assert gguf_metadata_value(path, "general.file_type") == 7  # Q8_0, by llama.cpp
    assert "for timing only, not a judge" in gguf_metadata_value(path, "general.name")
    assert gguf_metadata_value(path, "rmjudge.bench.random_weights") is True
    assert gguf_metadata_value(path, "llama.block_count") == 2
    assert gguf_metadata_value(path, "llama.embedding_length") == 64
    assert gguf_metadata_value(path, "llama.attention.head_count_kv") == 2
    template = judge_shapes.template_model()
    assert (gguf_metadata_value(path, "tokenizer.chat_template")
            == gguf_metadata_value(template, "tokenizer.chat_template"))
    made = os.stat(path).st_mtime_ns
    assert judge_shapes.bench_model(TINY, "Q8_0", folder=str(tmp_path)) == path
    assert os.stat(path).st_mtime_ns == made  # made once

    engine = LlamaEngine(EngineSettings(model=path, threads=1, parallel=2))
    req = GenRequest(messages=({"role": "user", "content": "Name a color."},), n=2,
                     temperature=1.0, seed=3, max_tokens=6)
    embedded = load_engine(EngineSettings(model=template), vocab_only=True)
    assert engine.count_tokens([req]) == embedded.count_tokens([req])  # the same tokenizer
    gens = engine.generate([req])[0]
    assert len(gens) == 2 and sum(g.n_tokens for g in gens) > 0
    for g in gens:
        assert g.finish_reason in ("length", "stop")
        assert all(math.isfinite(lp) and lp <= 0 for lp in g.token_logprobs)
