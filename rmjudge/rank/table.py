"""A ranked store read back: each prompt's comparisons from the `pairs` table -> its ranking
(`read_rankings`), the one computation behind the store's `rankings` table, `rmjudge eval` and
`rmjudge filter` on a ranked store and the best-of-N benchmarks.

A ranked store is a run store whose settings carry `rank` (what `rmjudge rank` ran: strategy,
layout, seed) and whose pairs are comparisons: `prompt_id`, `cand_a`, `cand_b` (candidate
indices), `n_candidates`, `gold_a`/`gold_b` (gold ranks, 1 = best; NULL without gold) and the
prompt's passthrough columns. Row numbers are `input row * ROW_STRIDE + comparison number`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from rmjudge.core.errors import UserError
from rmjudge.rank.aggregate import Game, Ranked, rank
from rmjudge.rank.layouts import RESERVED, ROW_STRIDE
from rmjudge.rank.strategies import tiebreak


class NotRanked(UserError):
    """A judged table that `rmjudge rank` did not write."""


@dataclass
class PromptRanking:
    prompt_id: str
    input_row: int
    k: int
    ranked: list[Ranked]  # by rank
    gold: list[int | None]  # gold rank per candidate (None: no gold)
    texts: list[str | None]  # candidate texts (None: in no stored comparison)
    messages: list[dict]
    fields: dict[str, Any] = field(default_factory=dict)  # the prompt's passthrough columns
    games: list[Game] = field(default_factory=list)

    @property
    def has_gold(self) -> bool:
        return all(g is not None for g in self.gold)

    def by_candidate(self) -> dict[int, Ranked]:
        return {r.candidate: r for r in self.ranked}


def rank_settings(table) -> dict:
    """The `rank` settings of a ranked store; NotRanked for any other judged table."""
    got = (table.meta.get("settings") or {}).get("rank")
    if not got:
        raise NotRanked(f"{table.path} was not written by `rmjudge rank` (its settings hold no "
                        "ranking); rank candidates with `rmjudge rank INPUT -o STORE`")
    return got


def is_ranked(table) -> bool:
    return bool((table.meta.get("settings") or {}).get("rank"))


def _int(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def read_rankings(table) -> list[PromptRanking]:
    """Every prompt of a ranked store with its ranking, in input order (none before a
    comparison was stored: the pairs table gets rank's columns with its first comparison)."""
    if "prompt_id" not in table.passthrough:
        return []
    settings = rank_settings(table)
    seed = int(settings.get("seed", 0))
    extra = [c for c in table.passthrough if c not in RESERVED]
    cols = ", ".join(f'"{c}"' for c in extra)
    repeats = ", ".join(f"CAST({c} AS VARCHAR)" if c in table.passthrough else "NULL"
                        for c in ("same_as", "gold_ranks"))
    rows = table.sql(
        "SELECT CAST(prompt_id AS VARCHAR), row_number, cand_a, cand_b, n_candidates, gold_a, "
        f"gold_b, verdict_ab, verdict_ba, response_a, response_b, CAST(messages AS VARCHAR), "
        f"{repeats}" + (f", {cols}" if cols else "") + " FROM pairs ORDER BY row_number")
    prompts: dict[str, dict] = {}
    for r in rows:
        pid, rn, a, b, k = r[0], r[1], _int(r[2]), _int(r[3]), _int(r[4])
        if a is None or b is None or k is None:
            continue
        p = prompts.setdefault(pid, {
            "row": rn // ROW_STRIDE, "k": k, "gold": [None] * k, "texts": [None] * k,
            "messages": orjson.loads(r[11]) if r[11] else [], "games": [],
            "same_as": _ints(r[12], k), "fields": dict(zip(extra, r[14:]))})
        p["row"] = min(p["row"], rn // ROW_STRIDE)
        golds = orjson.loads(r[13]) if p["same_as"] is not None and r[13] else None
        if isinstance(golds, list) and len(golds) == k:  # the repeats' gold too
            p["gold"] = [_int(g) for g in golds]
        for c, g, t in ((a, _int(r[5]), r[9]), (b, _int(r[6]), r[10])):
            if 0 <= c < k:
                p["gold"][c] = g
                p["texts"][c] = t
        p["games"].append(Game(a, b, (r[7], r[8])))
    return sorted((_ranking(pid, p, seed) for pid, p in prompts.items()),
                  key=lambda p: (p.input_row, p.prompt_id))


def _ints(value: Any, k: int) -> list[int] | None:
    """A stored `same_as` list (JSON text) when it names K candidates, each an earlier or the
    same one; None otherwise (no repeated candidates)."""
    if value is None:
        return None
    try:
        got = [_int(v) for v in orjson.loads(value)]
    except (orjson.JSONDecodeError, TypeError):
        return None
    if len(got) != k or any(v is None or not 0 <= v <= c for c, v in enumerate(got)):
        return None
    return got  # type: ignore[return-value]


def _ranking(pid: str, p: dict, seed: int) -> PromptRanking:
    """One prompt's ranking from its stored comparisons; a repeated candidate shares the
    ranking and the text of the candidate it repeats."""
    k, same = p["k"], p["same_as"]
    games = sorted(p["games"], key=lambda g: (g.a, g.b))
    ranked = rank(k, games, [tiebreak(seed, pid, c) for c in range(k)], same)
    texts = p["texts"] if same is None else [p["texts"][same[c]] for c in range(k)]
    return PromptRanking(pid, p["row"], k, ranked, p["gold"], texts, p["messages"],
                         p["fields"], games)


def ranking_rows(prompts: list[PromptRanking]) -> list[list[Any]]:
    """The `rankings` table's rows (RANKING_COLUMNS) of these prompts."""
    out = []
    for p in prompts:
        for r in p.ranked:
            out.append([p.prompt_id, p.input_row, r.candidate, r.rank, r.score, r.wins,
                        r.losses, r.ties, r.unjudged, r.confidence, p.gold[r.candidate], p.k,
                        p.texts[r.candidate]])
    return out
