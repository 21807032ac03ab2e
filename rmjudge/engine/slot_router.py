"""Which llama-server slot a group of requests goes to (engine/server.py).

llama-server keeps one KV cache per slot (`-np`): a request reuses only the prefix that its own
slot already holds, and the server picks a slot by prompt similarity among the slots idle at
that moment, so the N samples of a prompt sent at once land on N slots and each evaluates the
prompt, and a forced verdict or a reflection sent later often finds its prefix's slot taken by
another request. The in-process engine evaluates a pair and order's prompt once for all of them.

`SlotRouter` gives the client that control: every request carries `id_slot`, and a group of
requests sharing a prompt (a request's samples, their forced verdicts, a stage's requests of one
pair and order) holds one slot and runs there one after another, so the slot evaluates the
shared prompt once and every later member reuses it. A group takes the idle slot whose last
prompt shares the longest prefix with its own (the rollout prompt's slot for the reflections,
which open with the same text), else the least recently used one; when every slot is held it
waits for one. Pairs run side by side on different slots, batched by the server as before.
Routing changes where requests run, never what they return: each sample keeps its own seed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence


def common_prefix_len(a: Sequence, b: Sequence) -> int:
    """Length of the longest common prefix of two token lists (or two strings)."""
    return len(os.path.commonprefix([a, b]))  # type: ignore[type-var]


class SlotRouter:
    def __init__(self, n_slots: int):
        if n_slots < 1:
            raise ValueError("a slot router needs at least one slot")
        self.n_slots = n_slots
        self.held: list[Sequence | None] = [None] * n_slots  # the prompt each slot last ran
        self.busy = [False] * n_slots
        self.last_used = [0] * n_slots
        self._clock = 0
        self._cond: asyncio.Condition | None = None  # made on the event loop that uses it

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    def choose(self, prompt: Sequence) -> int | None:
        """The idle slot for `prompt`: the longest shared prefix, then the least recently used
        (lowest index on a tie); None when every slot is held."""
        best, best_key = None, None
        for i in range(self.n_slots):
            if self.busy[i]:
                continue
            held = self.held[i]
            shared = common_prefix_len(held, prompt) if held is not None and isinstance(
                held, type(prompt)) else 0
            key = (shared, -self.last_used[i], -i)
            if best_key is None or key > best_key:
                best, best_key = i, key
        return best

    async def acquire(self, prompt: Sequence) -> int:
        """Hold the best idle slot for a group whose requests open with `prompt` (waits while
        every slot is held)."""
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: not all(self.busy))
            slot = self.choose(prompt)
            assert slot is not None
            self.busy[slot] = True
            return slot

    async def release(self, slot: int, prompt: Sequence | None) -> None:
        """Give a slot back; `prompt` is the last prompt it ran (None: unknown, e.g. failed)."""
        cond = self._condition()
        async with cond:
            self.busy[slot] = False
            self.held[slot] = prompt
            self._clock += 1
            self.last_used[slot] = self._clock
            cond.notify(1)
