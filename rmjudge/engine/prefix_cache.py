"""Evaluated prompt prefixes kept across stages: token ids and the KV state llama.cpp saved for
them (`llama_state_seq_get_data`), least recently used first out, within a byte budget.

The llama.cpp engine saves a group's shared prefix (a pair-order's rollout prompt) when it has
evaluated it, and restores the longest match into a new sequence's stream instead of
evaluating those tokens again: the reflection prompt opens with the rollout prompt's text
(`rmjudge.prompts`), so a pair's reflections evaluate only their critiques and task. A token's
cells hold the same numbers whichever chunks evaluated them (docs/engine.md), so a restored
prefix gives exactly the samples that evaluating it again would: whether an entry is still
cached changes the time a run takes, never its results (except on CPU for a model with K-quant
weights, whose numbers depend on a call's row count: docs/engine.md).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np


@dataclass
class Entry:
    tokens: np.ndarray  # int64 token ids the state holds, positions 0..len-1
    state: bytes


class PrefixCache:
    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self.used = 0
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._next = 0
        self.hits = 0  # restores the engine made from an entry

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: list[int], limit: int) -> tuple[Entry | None, int]:
        """The entry sharing the longest token prefix with `tokens`, and that prefix's length
        capped at `limit`; (None, 0) when nothing is shared."""
        if not self._entries or limit <= 0:
            return None, 0
        want = np.asarray(tokens[:limit], dtype=np.int64)
        best, best_n, best_key = None, 0, None
        for key, e in self._entries.items():
            n = min(len(e.tokens), len(want))
            if n <= best_n:
                continue
            diff = np.flatnonzero(e.tokens[:n] != want[:n])
            m = int(diff[0]) if len(diff) else n
            if m > best_n:
                best, best_n, best_key = e, m, key
        if best_key is not None:
            self._entries.move_to_end(best_key)
        return best, best_n

    def covers(self, tokens: list[int]) -> bool:
        """Whether an entry already holds exactly these tokens (or a longer run starting with
        them), so saving them again would add nothing."""
        _, m = self.lookup(tokens, len(tokens))
        return m == len(tokens)

    def clear(self) -> None:
        """Drop every entry (the context they were saved from had another stream count)."""
        self._entries.clear()
        self.used = 0

    def add(self, tokens: list[int], state: bytes) -> None:
        size = len(state)
        if size > self.budget:
            return
        while self._entries and self.used + size > self.budget:
            _, old = self._entries.popitem(last=False)
            self.used -= len(old.state)
        self._entries[self._next] = Entry(np.asarray(tokens, dtype=np.int64), state)
        self._next += 1
        self.used += size
