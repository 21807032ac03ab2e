"""The engine benchmark's bounds (benchmarks/bench_engine.py): the flat bound charges every
generated token at the ceiling's decode rate and the prompt tokens at the prefill run's rate;
the width bound charges each of the engine's decode calls at the bare cost of a step of as
many sequences attending as many KV cells, and its prompt tokens at the prefill rate, both
timed in the engine's process after its run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_engine  # noqa: E402

CEILING = {"decode_rows_per_s": 200.0, "tok_per_s": 150.0}
PREFILL = {"processed_tok_per_s": 500.0}
PAIRED = {"decode_step_s": {"3": 0.02, "8": 0.04}, "prefill_tok_per_s": 400.0}


def test_the_width_bound_charges_each_decode_call_at_its_own_width():
    row = {"generated_tokens": 8 * 10 + 3 * 5, "prompt_tokens": 1000,
           "decode_widths": {"8": 10, "3": 5}, "paired": PAIRED}
    flat = bench_engine.bound_seconds(row, CEILING, PREFILL)
    wide = bench_engine.width_bound_seconds(row)
    assert flat == pytest.approx(95 / 200 + 2.0)
    assert wide == pytest.approx(10 * 0.04 + 5 * 0.02 + 2.5)  # the paired prefill rate


def test_the_width_bound_charges_each_decode_call_at_its_width_and_kv_span():
    """llama.cpp attends every stream of a decode call over its longest one's cells: a call
    carrying a reflection's longer context costs more than one after the first prompt."""
    paired = {"decode_step_s": {"8:512": 0.04, "8:1024": 0.06, "3:1024": 0.03},
              "prefill_tok_per_s": 400.0}
    row = {"generated_tokens": 8 * 10 + 3 * 5, "prompt_tokens": 400,
           "decode_widths": {"8": 10, "3": 5},
           "decode_spans": {"8:512": 6, "8:1024": 4, "3:1024": 5}, "paired": paired}
    assert bench_engine.width_bound_seconds(row) == pytest.approx(
        6 * 0.04 + 4 * 0.06 + 5 * 0.03 + 1.0)
    # a span not timed: no bound
    assert bench_engine.width_bound_seconds(
        {**row, "decode_spans": {**row["decode_spans"], "8:1280": 1}}) is None


def test_no_width_bound_without_every_width_timed():
    row = {"generated_tokens": 40, "prompt_tokens": 0, "decode_widths": {"8": 4, "5": 1},
           "paired": PAIRED}
    assert bench_engine.width_bound_seconds(row) is None
    assert bench_engine.width_bound_seconds({**row, "decode_widths": {"8": 5},
                                             "paired": None}) is None


@pytest.mark.model
def test_the_engine_counts_its_decode_calls_by_width(small_model_path):
    from rmjudge import prompts
    from rmjudge.core.settings import EngineSettings
    from rmjudge.core.types import GenRequest
    from rmjudge.engine.llama import LlamaEngine

    engine = LlamaEngine(EngineSettings(model=small_model_path, threads=1, parallel=4))
    msgs = prompts.pref_messages([{"role": "user", "content": "Which is better?"}], "Yes.", "No.")
    engine.generate([GenRequest(messages=msgs, n=n, temperature=1.0, seed=n, max_tokens=8,
                                assistant_prefix=prompts.ASSISTANT_PREFIX) for n in (3, 2)])
    widths = engine.decode_widths
    assert sum(widths.values()) == engine.decode_steps
    assert sum(w * n for w, n in widths.items()) == engine.decode_rows
    assert max(widths) <= 4 and engine.streams <= 4
    # and by the KV cells they attended: the longest sequence's, padded to 256
    spans = engine.decode_spans
    assert sum(spans.values()) == engine.decode_steps
    assert {w for w, _ in spans} == set(widths) and {c for _, c in spans} == {256}
