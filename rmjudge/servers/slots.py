"""A budget of server slots shared by the requests in flight (llama-server's `-np`).

llama-server keeps one KV cache per slot. rmjudge sends a request's N samples as one request
with `n: N` (the server evaluates the prompt once and copies it to N slots) and keeps those N
slots for the group until its forced verdicts are done, so each forced verdict finds its
sample's slot, prompt and text cached. `SlotBudget` is the count of free slots: a group takes
as many as it decodes side by side and gives them back when it ends; groups wait first come,
first served, so a wide group is not starved by narrow ones.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class SlotBudget:
    """`total` slots; `hold(k)` takes k of them (at most `total`) for the body of an
    `async with`. Created inside the event loop that uses it."""

    def __init__(self, total: int):
        if total < 1:
            raise ValueError("a slot budget needs at least one slot")
        self.total = total
        self.free = total
        self._turns: deque[object] = deque()
        self._changed = asyncio.Condition()

    def width(self, wanted: int) -> int:
        """How many slots a group that would use `wanted` gets: between 1 and `total`."""
        return max(1, min(wanted, self.total))

    async def _take(self, k: int) -> None:
        turn = object()
        async with self._changed:
            self._turns.append(turn)
            try:
                await self._changed.wait_for(lambda: self._turns[0] is turn and self.free >= k)
            except BaseException:  # cancelled while waiting: the next in line may go
                self._turns.remove(turn)
                self._changed.notify_all()
                raise
            self._turns.popleft()
            self.free -= k
            self._changed.notify_all()

    async def _give(self, k: int) -> None:
        async with self._changed:
            self.free += k
            self._changed.notify_all()

    @contextlib.asynccontextmanager
    async def hold(self, k: int):
        k = self.width(k)
        await self._take(k)
        try:
            yield k
        finally:
            await asyncio.shield(self._give(k))
