"""Which pairs of a prompt's candidates are compared, round by round.

- `round-robin`: every pair, in one round: K(K-1)/2 comparisons. Exact and order-free; for
  small K (the default up to `ROUND_ROBIN_MAX` candidates).
- `swiss`: Swiss rounds (the Monrad pairing): each round sorts the candidates by their points so
  far (a comparison is worth 1 to its winner, 0.5 each when its two orders disagree) and pairs
  each candidate with the next one below it that it has not met; an odd one out sits the round
  out. `swiss_rounds(K)` = ceil(log2 K) + 1 rounds of floor(K/2) comparisons, about
  (K/2)(log2 K + 1): 16 comparisons for K = 8 (round-robin: 28), 40 for K = 16 (120), 96 for
  K = 32 (496). The rounds bring the strong candidates together, so the top of the ranking is
  decided by direct comparisons while the bottom is sorted more coarsely.

Every comparison is judged in both orders by the normal protocol (so a flip is a tie), and the
pairing depends only on the verdicts before it and the seed: a resumed run plays the same
rounds. Ties in the standings are broken by a hash of (seed, prompt id, candidate), never by the
published order (in which the gold best often comes first).
"""

from __future__ import annotations

import math
from typing import Iterable

STRATEGIES = ("auto", "round-robin", "swiss")
ROUND_ROBIN_MAX = 8  # `auto`: round-robin up to this many candidates, Swiss above
SEARCH_STEPS = 20_000  # pairing attempts of one Swiss round before it falls back to greedy


def pair_number(i: int, j: int, k: int) -> int:
    """The position of the pair (i, j), i < j, among the K(K-1)/2 pairs in the order
    (0,1), (0,2), ..., (1,2), ...: 0-based."""
    return i * k - i * (i + 1) // 2 + (j - i - 1)


def resolve(strategy: str, k: int) -> str:
    if strategy == "auto":
        return "round-robin" if k <= ROUND_ROBIN_MAX else "swiss"
    if strategy not in STRATEGIES:
        raise ValueError(strategy)
    return strategy


def swiss_rounds(k: int) -> int:
    return math.ceil(math.log2(k)) + 1 if k > 2 else 1


def round_robin(k: int) -> list[tuple[int, int]]:
    """Every pair, candidate by candidate: consecutive comparisons share their first response,
    so the prompt and that response are one cached prefix for the engine."""
    return [(i, j) for i in range(k) for j in range(i + 1, k)]


def tiebreak(seed: int, prompt_id: str, candidate: int) -> int:
    from rmjudge.core.seeds import derive_seed

    return derive_seed(seed, prompt_id, "rank", candidate)


def points(k: int, outcomes: Iterable[tuple[int, int, float | None]]) -> list[float]:
    """Each candidate's points: a comparison's score for its first candidate (1 won, 0 lost,
    0.5 the orders disagreed) and one minus it for the second; a comparison without a verdict
    gives nothing."""
    pts = [0.0] * k
    for i, j, s in outcomes:
        if s is None:
            continue
        pts[i] += s
        pts[j] += 1.0 - s
    return pts


def swiss_pairs(k: int, played: set[tuple[int, int]], pts: list[float],
                order_key: list[int]) -> list[tuple[int, int]]:
    """One Swiss round: candidates sorted by points (then `order_key`), each paired with the
    nearest unpaired one below it that it has not met, backtracking (within `SEARCH_STEPS`)
    so that the round pairs everyone it can; whoever cannot be paired sits the round out.
    Pairs are (lower index, higher index), never one already played."""
    standing = sorted(range(k), key=lambda c: (-pts[c], order_key[c]))
    steps = [0]

    def met(a: int, b: int) -> bool:
        return (min(a, b), max(a, b)) in played

    def match(free: list[int]) -> list[tuple[int, int]] | None:
        if len(free) < 2:
            return []
        steps[0] += 1
        if steps[0] > SEARCH_STEPS:
            return None
        a, rest = free[0], free[1:]
        for x, b in enumerate(rest):
            if met(a, b):
                continue
            tail = match(rest[:x] + rest[x + 1:])
            if tail is not None:
                return [(min(a, b), max(a, b))] + tail
        if len(free) % 2:  # an odd one out may sit this round out
            return match(rest)
        return None

    full = match(standing)
    if full is not None:
        return full
    free = list(standing)  # no full pairing found: greedy, the unpaired sit out
    out = []
    while len(free) >= 2:
        a = free.pop(0)
        b = next((c for c in free if not met(a, c)), None)
        if b is None:
            continue
        free.remove(b)
        out.append((min(a, b), max(a, b)))
    return out


def next_round(strategy: str, k: int, seed: int, prompt_id: str, round_no: int,
               outcomes: list[tuple[int, int, float | None]]) -> list[tuple[int, int]]:
    """The pairs of round `round_no` (1-based) given the outcomes of the rounds before; [] when
    the prompt is done."""
    if strategy == "round-robin":
        return round_robin(k) if round_no == 1 else []
    if round_no > swiss_rounds(k):
        return []
    played = {(min(i, j), max(i, j)) for i, j, _ in outcomes}
    key = [tiebreak(seed, prompt_id, c) for c in range(k)]
    return swiss_pairs(k, played, points(k, outcomes), key)


def next_round_among(strategy: str, among: tuple[int, ...], seed: int, prompt_id: str,
                     round_no: int, outcomes: list[tuple[int, int, float | None]]
                     ) -> list[tuple[int, int]]:
    """`next_round` over the candidates `among` only (a prompt's distinct candidates, by index:
    a repeated text is compared once): the pairs a prompt of len(among) candidates gets, named
    by their indices. With every candidate in `among` it is `next_round` itself."""
    pos = {c: n for n, c in enumerate(among)}
    local = [(pos[a], pos[b], s) for a, b, s in outcomes if a in pos and b in pos]
    return [(among[a], among[b])
            for a, b in next_round(strategy, len(among), seed, prompt_id, round_no, local)]


def comparison_count(strategy: str, k: int) -> int:
    """Comparisons a prompt of K candidates takes (Swiss: at most)."""
    if strategy == "round-robin":
        return k * (k - 1) // 2
    return min(k * (k - 1) // 2, (k // 2) * swiss_rounds(k))
