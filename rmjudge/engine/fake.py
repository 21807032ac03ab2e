"""A scripted engine for tests: outputs come from a Python function, not a model.

`ScriptedEngine(respond)` calls `respond(request, sample_index)` for every sample; it returns a
`Generation` or a string (then each whitespace-separated word counts as a token with log-prob
-0.1). Forced verdicts come from `force(request, sample_index, text)` -> (p1, p2). Every call is
recorded in `calls`, so tests can assert what the protocol asked for.
"""

from __future__ import annotations

import math
from typing import Callable

from rmjudge.engine.base import Engine, ModelInfo
from rmjudge.core.types import Generation, GenRequest

Respond = Callable[[GenRequest, int], "Generation | str"]
Force = Callable[[GenRequest, int, str], "tuple[float, float]"]

FAKE_INFO = ModelInfo(
    path="<scripted>", sha256="0" * 64, architecture="fake", name="scripted", n_ctx_train=4096,
    chat_template=None, prompt_suffix="",
)


def stage_of(request: GenRequest) -> str:
    """'rollout' or 'reflection', from the request's share key (set by the protocol)."""
    return request.share_key[2]


class ScriptedEngine(Engine):
    def __init__(self, respond: Respond, force: Force | None = None, pairs_in_flight: int = 4):
        self.respond = respond
        self.force = force or (lambda req, i, text: (0.7, 0.3))
        self.info = FAKE_INFO
        self.calls: list[list[GenRequest]] = []
        self._pairs = pairs_in_flight
        self._generated = 0

    def preferred_pairs_in_flight(self, settings) -> int:
        return self._pairs

    @property
    def generated_tokens(self) -> int:
        return self._generated

    def count_tokens(self, requests: list[GenRequest]) -> list[int]:
        return [sum(len(m["content"].split()) for m in r.messages) for r in requests]

    def generate(self, requests: list[GenRequest]) -> list[list[Generation]]:
        self.calls.append(list(requests))
        out = []
        for req in requests:
            gens = []
            for i in range(req.n):
                g = self.respond(req, i)
                if isinstance(g, str):
                    g = Generation(text=g, token_logprobs=[-0.1] * max(1, len(g.split())),
                                   finish_reason="stop", token_ends=word_ends(g))
                if req.force is not None and g.finish_reason != "error":
                    cont = req.force.continuation(g.text)
                    if cont is not None:
                        p1, p2 = self.force(req, i, g.text)
                        g.forced_probs = (p1, p2)
                        g.forced_logprob = math.log(max(p1, p2))
                self._generated += g.n_tokens
                gens.append(g)
            out.append(gens)
        return out


def word_ends(text: str) -> list[int]:
    """Where each scripted "token" (a word with the spaces after it) ends, as UTF-8 byte
    offsets; one token for an empty text."""
    import re

    ends = [len(text[:m.end()].encode()) for m in re.finditer(r"\S+\s*", text)]
    return ends or [0]
