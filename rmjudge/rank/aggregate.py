"""A prompt's comparisons -> its ranking: Bradley-Terry scores, win counts and a confidence per
rank.

Each order of a comparison is one game (its verdict letter names the winner; an order without a
verdict is no game), so a comparison whose two orders disagree is one win each way: a tie. An
order a judge format called a tie (docs/judges.md) is half a win each way: one win each way
in the Bradley-Terry data, 0.5 in the comparison's score.
Bradley-Terry strengths are fitted with `choix.ilsr_pairwise` (the maintained implementation of
Luce's spectral ranking; `BT_ALPHA` is its regularization, which keeps the strengths finite when
a candidate wins or loses every game and when the comparisons leave the candidates in separate
groups). The fit is deterministic (a fixed-point iteration from zero, no randomness); scores are
rounded to `DIGITS` decimals so that equal inputs give equal bytes on any machine.

A candidate whose text repeats an earlier candidate's is in no comparison (rank compares
each text once): the scores are fitted over the distinct candidates, and the repeat shares its
first's score, wins, losses, ties and unjudged comparisons.

Ranks: by score, then comparison wins, then a hash of (seed, prompt id, candidate): never the
published order. `confidence` of a rank is the Bradley-Terry probability that the candidate
beats the one ranked just below it (for the last rank: that the one above beats it), so the
top rank's confidence says how sure the best-vs-worst pair is at its top.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

BT_ALPHA = 0.1
DIGITS = 9


@dataclass(frozen=True)
class Game:
    """One compared pair of a prompt with its per-order verdict letters."""

    a: int  # candidate in slot A
    b: int
    letters: tuple[str | None, ...]  # per order: 'A' | 'B' | 'tie' | None (no verdict)

    def score(self) -> float | None:
        """The comparison's score for `a`: 1 won, 0 lost, 0.5 a tie (the orders disagreed, or
        said tie); None without any verdict."""
        value = {"A": 1.0, "B": 0.0, "tie": 0.5}
        got = [value[x] for x in self.letters if x in value]
        return sum(got) / len(got) if got else None


@dataclass(frozen=True)
class Ranked:
    candidate: int
    rank: int  # 1 = best
    score: float  # Bradley-Terry log-strength (0 for all when nothing was decided)
    wins: int  # comparisons won
    losses: int
    ties: int  # comparisons whose orders disagreed
    unjudged: int  # comparisons of this candidate without a verdict
    confidence: float | None  # see the module doc; None with a single candidate


def bradley_terry(k: int, games: Iterable[Game]) -> list[float]:
    import choix

    data = []
    for g in games:
        for x in g.letters:
            if x == "A":
                data.append((g.a, g.b))
            elif x == "B":
                data.append((g.b, g.a))
            elif x == "tie":
                data += [(g.a, g.b), (g.b, g.a)]
    if not data:
        return [0.0] * k
    params = choix.ilsr_pairwise(k, data, alpha=BT_ALPHA)
    return [round(float(v), DIGITS) + 0.0 for v in params]


def rank(k: int, games: list[Game], tiebreak: list[int],
         same_as: list[int] | None = None) -> list[Ranked]:
    """The ranking of K candidates from their games (one Ranked per candidate, by rank).
    `same_as`: per candidate, the candidate whose text it repeats (itself when none): the
    scores are fitted over the distinct candidates alone, as for a prompt of only those, and a
    repeated one shares its first's score and counts (it is in no comparison of its own)."""
    if same_as is not None and any(s != c for c, s in enumerate(same_as)):
        return _rank_repeated(k, games, tiebreak, same_as)
    scores = bradley_terry(k, games)
    wins, losses, ties, unjudged = _counts(k, games)
    return _ordered(k, scores, wins, losses, ties, unjudged, tiebreak)


def _rank_repeated(k: int, games: list[Game], tiebreak: list[int],
                   same_as: list[int]) -> list[Ranked]:
    among = sorted(set(same_as))
    pos = {c: n for n, c in enumerate(among)}
    local = [Game(pos[g.a], pos[g.b], g.letters) for g in games if g.a in pos and g.b in pos]
    scores = bradley_terry(len(among), local)
    counts = _counts(len(among), local)
    spread = [[xs[pos[same_as[c]]] for c in range(k)] for xs in counts]
    return _ordered(k, [scores[pos[same_as[c]]] for c in range(k)], *spread, tiebreak)


def _counts(k: int, games: list[Game]) -> tuple[list[int], list[int], list[int], list[int]]:
    """Per candidate: comparisons won, lost, tied (orders disagreeing), without a verdict."""
    wins, losses, ties, unjudged = [0] * k, [0] * k, [0] * k, [0] * k
    for g in games:
        s = g.score()
        if s is None:
            unjudged[g.a] += 1
            unjudged[g.b] += 1
        elif s == 0.5:
            ties[g.a] += 1
            ties[g.b] += 1
        else:
            w, lo = (g.a, g.b) if s > 0.5 else (g.b, g.a)
            wins[w] += 1
            losses[lo] += 1
    return wins, losses, ties, unjudged


def _ordered(k: int, scores: list[float], wins: list[int], losses: list[int], ties: list[int],
             unjudged: list[int], tiebreak: list[int]) -> list[Ranked]:
    order = sorted(range(k), key=lambda c: (-scores[c], -wins[c], tiebreak[c]))
    out = []
    for pos, c in enumerate(order):
        if k < 2:
            conf = None
        elif pos + 1 < k:
            conf = _beats(scores[c], scores[order[pos + 1]])
        else:
            conf = _beats(scores[order[pos - 1]], scores[c])
        out.append(Ranked(c, pos + 1, scores[c], wins[c], losses[c], ties[c], unjudged[c],
                          None if conf is None else round(conf, DIGITS)))
    return out


def _beats(si: float, sj: float) -> float:
    return 1.0 / (1.0 + math.exp(sj - si))
