"""A `--server` run's groups on llama-server's slots (engine/server.py is the engine).

llama-server keeps one KV cache per slot (`-np`). The requests sharing a prompt (a request's N
samples; a pair and order's reflections) are a group, and a group holds as many slots as it
decodes side by side (servers/slots.py shares them out: at most the server's slots and
`--server-concurrency`) until its forced verdicts are done, so that every request of the
group finds its prefix in a slot the group holds. How a group uses its slots:

- **With slot copies** (llama-server started with `--slot-save-path`, and a copy kept until it
  is used: servers/slot_copies.py): the group's shared prefix is evaluated once, on the slot
  that holds most of it, and copied to the group's other slots; each slot then runs its share
  of the group's requests one after another, every request and its forced verdict pinned to
  the slot (`id_slot`), where the request finds the prefix and the forced verdict its sample's
  tokens. Samples are seeded one by one, as in-process.
- **Without**: a request's N samples go as one request with `n: N`, which llama-server
  evaluates once and copies to N slots; those copies record no tokens a later request can
  match, so the samples' forced verdicts go one after another to the slot that evaluated the
  prompt, and requests sharing a prefix (reflections) run one after another on one slot. A
  server that answers `n: N` with one choice gets one request per sample, in turn.
"""

from __future__ import annotations

import asyncio
import os
from typing import Awaitable, Callable, Optional

from rmjudge.core.types import Generation, GenRequest
from rmjudge.servers.client import ServerClient
from rmjudge.servers.slot_copies import restore_slot, save_slot
from rmjudge.servers.slots import SlotBudget

Prompt = Optional[str | list[int]]
Member = tuple[int, int, Prompt]  # (request index, sample index, prompt)


async def gather_all(aws) -> list:
    """`asyncio.gather` of `aws` that, when one fails, cancels the others and waits for them
    before raising (plain gather leaves them running: requests in flight after the run has
    stopped, destroyed pending when the loop closes)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class SlotGroups:
    """The groups of one `--server` run on llama-server's `total` slots (module docstring).
    `sample(req, s, prompt, slot)` sends one sample (pinned to `slot` unless None);
    `samples(req, k, prompt, first)` k samples as one `n: k` request; `prime(prefix, slot)` a
    one-token request that leaves `prefix` cached on `slot` (its prompt tokens, None when not
    told); `n_copies()` whether the server answers `n: N` with N choices."""

    def __init__(self, client: ServerClient, tag: str, total: int, copies: bool,
                 sample: Callable[..., Awaitable[Generation]],
                 samples: Callable[..., Awaitable[list[Generation]]],
                 prime: Callable[..., Awaitable[int | None]], n_copies: Callable[[], bool]):
        self.client = client
        self.tag = tag  # the server's name in its copies' files (servers/slot_copies.py)
        self.total = total
        self.copies = copies
        self.found: dict[int, int | None] = {}  # slot -> tokens of its last prompt cached
        self._sample, self._samples, self._prime = sample, samples, prime
        self._n_copies = n_copies
        self._budget: SlotBudget | None = None  # made in the event loop that uses it

    async def run(self, requests: list[GenRequest], members: list[Member],
                  out: list[list[Generation | None]]) -> None:
        """One group's generations into `out` (`members`: its requests' samples)."""
        if self._budget is None:
            self._budget = SlotBudget(self.total)
        if self.copies:
            await self._on_copies(requests, members, out)
        elif len({i for i, _, _ in members}) == 1:
            await self._rollouts(requests, members, out)
        else:
            await self._in_turn(requests, members, out)

    async def _on_copies(self, requests: list[GenRequest], members: list[Member],
                         out: list[list[Generation | None]]) -> None:
        """The members' shared prefix evaluated on the slot that holds most of it and copied
        to the others the group holds (one slot per member, at most the budget); each slot
        then runs its share of the members one after another, each pinned to it, from the
        moment its copy is in it."""
        prefix = os.path.commonprefix([p for _, _, p in members])  # type: ignore[type-var]
        async with self._budget.hold(len(members), prefix) as ids:  # type: ignore[union-attr]
            saved = len(ids) > 1 and self.copies
            size = None  # the prefix's tokens, as the server counted them
            if saved:
                size = await self._prime(prefix, ids[0])
                saved = await save_slot(self.client, self.tag, ids[0])
                if not saved:
                    self.copies = False  # this group goes on; later ones as without
            for slot in ids:
                self._budget.keep(slot, prefix)  # type: ignore[union-attr]

            async def lane(k: int) -> None:
                # the first slot starts at once; each other one once the copy is in it
                copied = saved
                if k and saved:
                    copied = await restore_slot(self.client, self.tag, ids[0], ids[k])
                    if not copied:
                        self.copies = False
                for j, (i, s, prompt) in enumerate(members[k::len(ids)]):
                    self.found.pop(ids[k], None)
                    out[i][s] = await self._sample(requests[i], s, prompt, ids[k])
                    cached = self.found.get(ids[k])
                    if copied and k and not j and size and cached is not None \
                            and 2 * cached < size:
                        # a copied slot that lost its copy before its first request (a
                        # server that empties idle slots): no more copies
                        self.copies = False

            await gather_all(lane(k) for k in range(len(ids)))

    async def _rollouts(self, requests: list[GenRequest], members: list[Member],
                        out: list[list[Generation | None]]) -> None:
        """One request's samples: one request of `n` per width of slots the group holds (the
        prompt evaluated once, copied to the others), each chunk seeded by its first sample's
        seed; on a server that answers `n: N` with one choice, the samples one after another
        on the slot that holds the prompt."""
        i, _, prompt = members[0]
        req = requests[i]
        async with self._budget.hold(req.n if self._n_copies() else 1) as ids:  # type: ignore
            width, start = len(ids), 0
            while start < req.n:
                k = min(width, req.n - start) if self._n_copies() else 1
                if k == 1 or prompt is None:
                    out[i][start] = await self._sample(req, start, prompt, None)
                    start += 1
                    continue
                gens = await self._samples(req, k, prompt, start)
                out[i][start:start + len(gens)] = gens
                start += len(gens)

    async def _in_turn(self, requests: list[GenRequest], members: list[Member],
                       out: list[list[Generation | None]]) -> None:
        """Requests sharing a prompt prefix (a pair and order's reflections): one after another
        on one slot, each finding the prefix its predecessor left there."""
        async with self._budget.hold(1):  # type: ignore[union-attr]
            for i, s, prompt in members:
                out[i][s] = await self._sample(requests[i], s, prompt, None)
