"""What the batched llama.cpp engine schedules: a sequence per sample (`Seq`), the sequences of
one request (`Job`), the sequences that share an evaluated prompt prefix (`Group`), and what
`Scheduler.steps` is serving (`Schedule`); `ListSource` is a fixed list of requests served as
a `RequestSource` (`LlamaEngine.generate`).

A sequence's prompt is evaluated in chunks of at least `MIN_CHUNK` tokens (docs/engine.md,
"Reproducible by construction"), and a prefix shorter than `MIN_REUSE` tokens is neither
restored nor saved nor copied from a group evaluating it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from rmjudge.core.types import Generation, GenRequest

MIN_CHUNK = 2  # a prompt token is never evaluated as the only token of its sequence's chunk
MIN_REUSE = 16  # shortest cached prefix worth restoring (and saving)


@dataclass
class Seq:
    sample: int
    req: GenRequest
    feed: list[int]  # tokens still to evaluate for this sequence
    pos: int  # next position
    rng: np.random.Generator | None
    slot: int = -1
    phase: str = "wait"  # wait (for the group prefix) | feed | decode | force | done
    out: bytearray = field(default_factory=bytearray)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # len(out) after each token
    finish: str = "length"
    force_choices: tuple[int, int] | None = None
    forced: tuple[float, float] | None = None
    forced_lp: float | None = None
    error: str | None = None
    need: int = 0  # KV cells: prompt + max_tokens + forced-verdict margin
    job: "Job | None" = None


@dataclass
class Job:
    """One request's sequences; reported to the source when the last of them is done."""

    req: GenRequest
    seqs: list[Seq]
    left: int


class ListSource:
    """A fixed list of requests taken at once, the results stored by request position."""

    def __init__(self, requests: list[GenRequest], results: list):
        self.requests = requests
        self.results = results
        self.index = {id(r): [] for r in requests}
        for i, r in enumerate(requests):
            self.index[id(r)].append(i)

    def take(self) -> list[GenRequest]:
        out, self.requests = self.requests, []
        return out

    def done(self, request: GenRequest, generations: list[Generation]) -> None:
        self.results[self.index[id(request)].pop(0)] = generations


@dataclass
class Group:
    prefix: list[int]
    seqs: list[Seq]
    fed: int = 0  # prefix tokens evaluated so far (on the first sequence's slot)
    owner: int = -1
    source: "Group | None" = None  # a group still evaluating this one's opening: wait for it
    share: int = 0  # prefix tokens to copy from `source` once it has evaluated them
    copied_at: int = -1  # the context's decode-call count when its own opening was copied


@dataclass
class Schedule:
    """What `steps` is serving: groups waiting for slots, groups evaluating their shared prefix,
    and the sequences that feed or decode on their own."""

    free_slots: list[int]  # lowest first
    queue: deque[Group] = field(default_factory=deque)
    queued: int = 0  # sequences waiting in `queue`
    prefilling: list[Group] = field(default_factory=list)
    live: list[Seq] = field(default_factory=list)
