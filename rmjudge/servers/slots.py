"""The slots of a llama-server shared by the requests in flight (llama-server's `-np`).

llama-server keeps one KV cache per slot. rmjudge gives each group of requests that share a
prompt (a request's N samples; a pair and order's reflections) as many slots as it decodes
side by side, and the group keeps them until its forced verdicts are done, so that every
request of the group finds its prefix in a slot it holds. `SlotBudget` shares them out: a
group takes as many as it decodes side by side and gives them back when it ends; groups wait
first come, first served, so a wide group is not starved by narrow ones.

The budget hands out slot ids (0 to `total` - 1, llama-server's own numbering), the lowest free
ones first: llama-server decodes its busy slots in one llama.cpp batch, and with a KV stream per
slot (its default when `-np` is given) llama.cpp cuts that batch wherever the slot ids skip
one, each piece reading all the weights again (llama.cpp's `split_equal`). Busy slots packed
from 0 up make one piece: at the 1.7B shape, 8 sequences decoded 14-20% slower in slots 0-3
and 8-11 than in 0-7 (docs/speed.md). It also remembers the prompt it last saw sent to each
slot, so a group that names its prompt gets, as its first slot, the one of its slots whose
remembered prompt shares the longest start with it (where llama-server finds that prompt
cached), or a free slot above them that holds much more of it (`HINT_GAIN` tokens: a pair's
reflections find their rollout prompt). What a slot holds is only ever a hint: llama-server
compares every request with the tokens the slot really holds, so a wrong hint costs time,
never a result.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from typing import Sequence


# tokens of a group's prompt a free slot above the lowest ones must hold beyond theirs to be
# taken instead of the highest of them (`SlotBudget._pick`)
HINT_GAIN = 64


class SlotBudget:
    """`total` slots; `hold(k, prompt)` takes k of them (at most `total`) for the body of an
    `async with` and yields their ids. Created inside the event loop that uses it."""

    def __init__(self, total: int):
        if total < 1:
            raise ValueError("a slot budget needs at least one slot")
        self.total = total
        self._free: list[int] = list(range(total))
        self._turns: deque[object] = deque()
        self._changed = asyncio.Condition()
        self.held: dict[int, Sequence] = {}  # slot id -> the prompt last sent to it

    @property
    def free(self) -> int:
        return len(self._free)

    def width(self, wanted: int) -> int:
        """How many slots a group that would use `wanted` gets: between 1 and `total`."""
        return max(1, min(wanted, self.total))

    def keep(self, slot: int, prompt: Sequence) -> None:
        """Remember that `prompt` was sent to `slot` (see `hold`)."""
        self.held[slot] = prompt

    def _pick(self, k: int, prompt: Sequence | None) -> list[int]:
        """The k lowest free slots (see the module docstring), first among them the one
        holding the longest start of `prompt`; a free slot above them that holds at least
        `HINT_GAIN` tokens more of it (4 characters a token for a text prompt) takes the
        highest one's place: evaluating those tokens again costs more than a gap."""
        free = sorted(self._free)
        ids = free[:k]
        if prompt is not None:
            held = {slot: len(os.path.commonprefix([self.held.get(slot) or prompt[:0], prompt]))
                    for slot in free}
            best = max(range(k), key=lambda j: (held[ids[j]], -j))
            ids.insert(0, ids.pop(best))
            gain = HINT_GAIN * (4 if isinstance(prompt, str) else 1)
            above = max(free[k:], key=held.__getitem__, default=None)
            if above is not None and held[above] >= held[ids[0]] + gain:
                ids = [above] + ids[:k - 1]
        for slot in ids:
            self._free.remove(slot)
        return ids

    async def _take(self, k: int, prompt: Sequence | None) -> list[int]:
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
            ids = self._pick(k, prompt)
            self._changed.notify_all()
            return ids

    async def _give(self, ids: list[int]) -> None:
        async with self._changed:
            self._free.extend(ids)
            self._changed.notify_all()

    @contextlib.asynccontextmanager
    async def hold(self, k: int, prompt: Sequence | None = None):
        """Hold `width(k)` slots; yields their ids, the first the one that holds the longest
        start of `prompt` (when given)."""
        ids = await self._take(self.width(k), prompt)
        try:
            yield ids
        finally:
            await asyncio.shield(self._give(ids))
