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
