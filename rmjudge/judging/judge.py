"""`Judge`: ReflectRM judging of a stream of pairs over any Engine, pipelined across pairs.

Each pair is a small coroutine (`_pair_task`) that yields batches of generation requests
(stage 1 rollouts, optionally more rollouts in adaptive mode, then stage 2 reflections) and
finally returns a `PairResult`. The driver (`_PairFeed`) hands the engine the requests of up to
`pairs_in_flight` pairs, so stage 2 of some pairs and stage 1 of others share the engine's
batch; a streaming engine takes a pair's next stage the moment its previous one is done.
Memory is bounded by `pairs_in_flight`, not the input.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generator, Iterable, Iterator

from rmjudge.engine.base import Engine
from rmjudge.judging.runspec import RunSpec, resolve
from rmjudge.judging.protocol import PairOrderJob, PairResult, combine_orders, to_letter
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import Generation, GenRequest, Pair

PairTask = Generator[list[GenRequest], list[list[Generation]], PairResult]


class PairFailed(Exception):
    """A pair could not be judged (for example it does not fit the model's context)."""


@dataclass
class Failure:
    pair: Pair
    reason: str


@dataclass
class Finished:
    """The generations the engine has finished for a Judge, and their tokens: the work done,
    for the progress display's time left (rmjudge/runs/progress.py)."""

    generations: int = 0
    tokens: int = 0


def _prompted(make):
    """`make()`, the requests of a stage; a prompt that a user's template (a format file,
    --prompt-template) fails to render for this pair fails the pair, not the run."""
    from rmjudge.core.errors import UserError

    try:
        return make()
    except UserError as exc:
        raise PairFailed(f"its prompt could not be made: {exc}") from None


def _check(gens: list[list[Generation]]) -> None:
    for group in gens:
        for g in group:
            if g.finish_reason == "error":
                raise PairFailed(g.error or "the engine could not run this pair")


def _agree(jobs: list[PairOrderJob]) -> bool:
    letters = set()
    for j in jobs:
        preds = {r.prediction for r in j.parsed}
        if not preds:
            return False
        letters |= {to_letter(j.order, p) for p in preds}
    return len(letters) == 1


class Judge:
    def __init__(self, engine: Engine, settings: JudgeSettings | RunSpec,
                 pairs_in_flight: int | None = None, n_ctx: int | None = None):
        """`settings`: the judge settings, resolved here for the engine's model within `n_ctx`
        (the per-sequence limit `--ctx-size` sets; rmjudge.judging.runspec.resolve), or the run's
        `RunSpec`, already resolved for this model, used as it is (`n_ctx` is then its)."""
        self.engine = engine
        spec = settings if isinstance(settings, RunSpec) else resolve(settings, engine.info, n_ctx)
        self.spec = spec
        self.settings = spec.settings  # unset --max-tokens / --forced resolved for this model
        self.suffix = spec.suffix
        self.pairs_in_flight = pairs_in_flight or engine.preferred_pairs_in_flight(self.settings)
        self.finished = Finished()

    def _pair_task(self, pair: Pair) -> PairTask:
        s = self.settings
        jobs = [PairOrderJob(pair, o, s, self.suffix, self.spec.style) for o in s.order_list]
        first = s.adaptive or s.samples
        gens = yield _prompted(lambda: [j.rollout_request(first) for j in jobs])
        _check(gens)
        for j, g in zip(jobs, gens):
            j.add_rollouts(g)
        if s.adaptive and not _agree(jobs):
            gens = yield [j.rollout_request(s.samples - first, start=first) for j in jobs]
            _check(gens)
            for j, g in zip(jobs, gens):
                j.add_rollouts(g)
        plans = _prompted(lambda: [j.reflection_requests() for j in jobs])
        flat = [r for p in plans for r in p]
        if flat:
            gens = yield flat
            _check(gens)
            k = 0
            for j, p in zip(jobs, plans):
                j.add_reflections([g[0] for g in gens[k:k + len(p)]])
                k += len(p)
        return combine_orders(pair, {j.order: j.result() for j in jobs}, s.on_inconsistent)

    def judge(self, pair: Pair) -> PairResult:
        """Judge one pair (convenience; `run` is the efficient path)."""
        for out in self.run([pair]):
            if isinstance(out, Failure):
                raise PairFailed(out.reason)
            return out
        raise AssertionError("unreachable")

    def run(self, pairs: Iterable[Pair]) -> Iterator[PairResult | Failure]:
        """Judge pairs, yielding a PairResult or a Failure for each, in completion order.

        An engine with `steps(source)` (the batched llama.cpp engine) is fed continuously: the
        next stage of a pair joins its running batch as soon as the pair's last sequence ends.
        Other engines get every ready request in one `generate` call at a time. Either way at
        most about `pairs_in_flight` pairs' worth of sequences are in flight."""
        feed = _PairFeed(self, iter(pairs))
        for _ in self.engine.steps(feed):
            while feed.out:
                yield feed.out.popleft()
        while feed.out:
            yield feed.out.popleft()


@dataclass
class _Active:
    """A pair being judged: its coroutine and the results of its current stage."""

    pair: Pair
    task: PairTask
    results: list = field(default_factory=list)
    left: int = 0


class _PairFeed:
    """The judge's side of the engine: hands out the requests of pairs' stages (the next stage
    of an active pair first, then a new pair while fewer than the target number of sequences
    are in flight) and steps each pair's coroutine when its stage is done."""

    def __init__(self, judge: Judge, pairs: Iterator[Pair]):
        self.judge = judge
        self.pairs = pairs
        self.exhausted = False
        s = judge.settings
        self.target = judge.pairs_in_flight * s.samples * len(s.order_list)
        self.in_flight = 0  # sequences handed out and not done
        self.ready: deque[tuple[_Active, list[GenRequest]]] = deque()
        self.out: deque[PairResult | Failure] = deque()
        self.owner: dict[int, tuple[_Active, int]] = {}

    def take(self) -> list[GenRequest]:
        requests = None
        while requests is None:  # a pair may finish (or fail) before asking for anything
            if self.ready:
                active, requests = self.ready.popleft()
            elif not self.exhausted and self.in_flight < self.target:
                pair = next(self.pairs, None)
                if pair is None:
                    self.exhausted = True
                    return []
                active = _Active(pair, self.judge._pair_task(pair))
                requests = self._step(active, None)
            else:
                return []
        active.results = [None] * len(requests)
        active.left = len(requests)
        for i, r in enumerate(requests):
            self.owner[id(r)] = (active, i)
            self.in_flight += r.n
        return requests

    def done(self, request: GenRequest, generations: list[Generation]) -> None:
        active, i = self.owner.pop(id(request))
        self.in_flight -= request.n
        finished = self.judge.finished
        finished.generations += len(generations)
        finished.tokens += sum(g.n_tokens for g in generations)
        active.results[i] = generations
        active.left -= 1
        if active.left == 0:
            requests = self._step(active, active.results)
            if requests is not None:
                self.ready.append((active, requests))

    def _step(self, active: _Active, results) -> list[GenRequest] | None:
        """Advance a pair's coroutine: its next requests, or None when it has finished (its
        result or failure queued in `out`)."""
        try:
            while True:
                requests = next(active.task) if results is None else active.task.send(results)
                if requests:
                    return requests
                results = []  # a stage with nothing to generate
        except StopIteration as stop:
            self.out.append(stop.value)
        except PairFailed as exc:
            self.out.append(Failure(active.pair, str(exc)))
        return None
