"""The engine's context grows while sequences run: a request longer than the KV streams hold
arrives mid-run, the context is made again, larger, and the running sequences' cells move into
it (`KVContext.regrow`) instead of the batch draining first. The samples are those of a run
whose context held the long request from the start, byte for byte."""

from __future__ import annotations

import pytest

from rmjudge import prompts
from rmjudge.core.settings import EngineSettings
from rmjudge.core.types import GenRequest

pytestmark = [pytest.mark.model, pytest.mark.slow]


def _req(text: str, n: int, seed: int) -> GenRequest:
    msgs = prompts.pref_messages([{"role": "user", "content": "Which answer is better?"}],
                                 text, "No.")
    return GenRequest(messages=msgs, n=n, assistant_prefix=prompts.ASSISTANT_PREFIX,
                      temperature=1.0, seed=seed, max_tokens=24)


class _Later:
    """Gives the short requests at once and the long one at the `at`-th take, while the short
    ones decode; keeps each request's generations."""

    def __init__(self, short: list[GenRequest], long: GenRequest, at: int):
        self.steps = [short] + [[] for _ in range(at - 1)] + [[long]]
        self.got: dict[int, list] = {}

    def take(self) -> list[GenRequest]:
        return self.steps.pop(0) if self.steps else []

    def done(self, request: GenRequest, generations) -> None:
        self.got[request.seed] = [(g.text, g.token_logprobs) for g in generations]


def test_a_long_request_mid_run_moves_the_running_sequences_and_changes_no_sample(
        small_model_path):
    from rmjudge.engine.llama import LlamaEngine

    short = [_req("Yes.", 4, seed) for seed in (1, 2)]
    long = _req("Yes, because " + "the answer holds; " * 200, 2, 3)

    moving = LlamaEngine(EngineSettings(model=small_model_path, threads=1, parallel=16))
    moving.generate([_req("Yes.", 16, 9)])  # a context of all 16 streams first
    source = _Later(short, long, at=4)
    for _ in moving.steps(source):
        pass
    assert moving.contexts_made == 2 and moving.sequences_moved == 8

    fresh = LlamaEngine(EngineSettings(model=small_model_path, threads=1, parallel=16))
    reference = _Later([long] + short, long, at=1)
    reference.steps = [[long] + short]  # the long request first: one context, nothing moves
    for _ in fresh.steps(reference):
        pass
    assert fresh.contexts_made == 1 and fresh.sequences_moved == 0
    assert source.got == reference.got


def test_the_context_holds_the_slots_the_work_fills_and_grows_for_more_changing_no_sample(
        small_model_path):
    """One request of 4 samples makes a context of 4 streams, not --parallel's 16 (llama.cpp
    zeroes every stream's cells when it makes a context); a second request arriving mid-run
    that needs more slots waits until the running ones are done (llama.cpp restores cells
    only into a context of the same stream count) and then gets a context of all 16; every
    sample is that of a run that had both requests from the start."""
    from rmjudge.engine.llama import LlamaEngine

    first, second = _req("Yes.", 4, 1), _req("Yes.", 4, 2)
    alone = LlamaEngine(EngineSettings(model=small_model_path, threads=1, parallel=16))
    only = _Later([first], first, at=1)
    only.steps = [[first]]
    for _ in alone.steps(only):
        pass
    assert (alone.streams, alone.contexts_made) == (4, 1)

    waiting = LlamaEngine(EngineSettings(model=small_model_path, threads=1, parallel=16))
    source = _Later([first], second, at=4)
    for _ in waiting.steps(source):
        pass
    assert (waiting.streams, waiting.contexts_made, waiting.sequences_moved) == (16, 2, 0)
    later = [_req("Yes.", 4, 3), _req("Yes.", 4, 4)]
    waiting.generate(later)  # all 16 streams now: made once, nothing waits
    assert waiting.contexts_made == 2

    fresh = LlamaEngine(EngineSettings(model=small_model_path, threads=1, parallel=16))
    reference = _Later([first, second], second, at=1)
    reference.steps = [[first, second]]
    for _ in fresh.steps(reference):
        pass
    assert (fresh.streams, fresh.contexts_made) == (8, 1)
    assert source.got == reference.got and only.got[1] == reference.got[1]
