"""Decoding sequences are kept in consecutive slots: llama.cpp cuts a decode call wherever the
slot ids skip one, and each piece reads all the weights again. When a group in the middle ends
first, the groups above it move down into its slots (`Scheduler._pack`), and no sample changes:
a stream's cells sit at the same places in any slot."""

from __future__ import annotations

import pytest

from rmjudge import prompts
from rmjudge.core.settings import EngineSettings
from rmjudge.core.types import GenRequest

pytestmark = [pytest.mark.model, pytest.mark.slow]


def _req(text: str, seed: int, max_tokens: int) -> GenRequest:
    msgs = prompts.pref_messages([{"role": "user", "content": "Which answer is better?"}],
                                 text, "No.")
    return GenRequest(messages=msgs, n=4, assistant_prefix=prompts.ASSISTANT_PREFIX,
                      temperature=1.0, seed=seed, max_tokens=max_tokens)


def _run(path: str, pack: bool):
    from rmjudge.engine.llama import LlamaEngine

    engine = LlamaEngine(EngineSettings(model=path, threads=1, parallel=16))
    engine.pack = pack
    # slots 0-3 decode long, 4-7 end after 2 tokens, 8-11 decode long: a gap in the middle
    reqs = [_req("Yes.", 1, 20), _req("Maybe so.", 2, 2), _req("No, never.", 3, 20)]
    out = engine.generate(reqs)
    samples = [[(g.text, g.token_logprobs, g.finish_reason) for g in gens] for gens in out]
    return engine, samples


def test_a_gap_in_the_middle_is_closed_and_no_sample_changes(small_model_path):
    packed, with_moves = _run(small_model_path, True)
    left, as_they_were = _run(small_model_path, False)
    assert with_moves == as_they_were
    assert left.sequences_packed == 0 and packed.sequences_packed >= 1
    # the run left as it was had its decode calls cut at the gap; packing saved pieces
    assert left.decode_pieces > left.decode_steps
    assert packed.decode_pieces < left.decode_pieces
