"""`Judge`: ReflectRM judging of a stream of pairs over any Engine, pipelined across pairs.

Each pair is a small coroutine (`_pair_task`) that yields batches of generation requests
(stage 1 rollouts, optionally more rollouts in adaptive mode, then stage 2 reflections) and
finally returns a `PairResult`. The driver keeps up to `pairs_in_flight` pairs active and sends
all of their pending requests to the engine in one call, so stage 2 of some pairs and stage 1
of others share the engine's batch. Memory is bounded by `pairs_in_flight`, not the input.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generator, Iterable, Iterator

from rmjudge.engine.base import Engine
from rmjudge.runspec import resolve
from rmjudge.protocol import PairOrderJob, PairResult, combine_orders, to_letter
from rmjudge.settings import JudgeSettings
from rmjudge.types import Generation, GenRequest, Pair

PairTask = Generator[list[GenRequest], list[list[Generation]], PairResult]


class PairFailed(Exception):
    """A pair could not be judged (for example it does not fit the model's context)."""


@dataclass
class Failure:
    pair: Pair
    reason: str


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
    def __init__(self, engine: Engine, settings: JudgeSettings, pairs_in_flight: int | None = None):
        self.engine = engine
        self.settings = settings
        self.suffix = resolve(settings, engine.info).suffix
        self.pairs_in_flight = pairs_in_flight or engine.preferred_pairs_in_flight(settings)

    def _pair_task(self, pair: Pair) -> PairTask:
        s = self.settings
        jobs = [PairOrderJob(pair, o, s, self.suffix) for o in s.order_list]
        first = s.adaptive or s.samples
        gens = yield [j.rollout_request(first) for j in jobs]
        _check(gens)
        for j, g in zip(jobs, gens):
            j.add_rollouts(g)
        if s.adaptive and not _agree(jobs):
            gens = yield [j.rollout_request(s.samples - first, start=first) for j in jobs]
            _check(gens)
            for j, g in zip(jobs, gens):
                j.add_rollouts(g)
        plans = [j.reflection_requests() for j in jobs]
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

        At most about `pairs_in_flight` pairs' worth of sequences are pending at once.
        """
        source = iter(pairs)
        active: deque[tuple[Pair, PairTask, list[GenRequest]]] = deque()
        exhausted = False
        target = self.pairs_in_flight * self.settings.samples * len(self.settings.order_list)
        while True:
            # Admit pairs while the pending work is below target: pairs in stage 2 need fewer
            # sequences than in stage 1, so new pairs join them and keep the batch full.
            while not exhausted and sum(r.n for _, _, reqs in active for r in reqs) < target:
                pair = next(source, None)
                if pair is None:
                    exhausted = True
                    break
                task = self._pair_task(pair)
                active.append((pair, task, next(task)))
            if not active:
                return
            requests = [r for _, _, reqs in active for r in reqs]
            results = self.engine.generate(requests)
            k = 0
            still: deque[tuple[Pair, PairTask, list[GenRequest]]] = deque()
            for pair, task, reqs in active:
                mine = results[k:k + len(reqs)]
                k += len(reqs)
                try:
                    still.append((pair, task, task.send(mine)))
                except StopIteration as stop:
                    yield stop.value
                except PairFailed as exc:
                    yield Failure(pair, str(exc))
            active = still
