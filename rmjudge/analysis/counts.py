"""The pair counts behind accuracy and positional consistency, defined once in SQL over a
`pairs` table (the run store's or a judged export's view), for the score summary and the report.

- accuracy: `correct` (final verdict = gold label) over labelled pairs;
- positional consistency: labelled pairs judged correctly in both orders over labelled pairs
  judged in both orders (the paper's definition);
- flips: pairs whose two orders disagree, over pairs judged in both orders.
"""

from __future__ import annotations

from typing import Callable

PAIR_COUNTS = {
    "pairs": "count(*)",
    "labelled": "count(*) FILTER (WHERE label IN ('A','B'))",
    "correct": "count(*) FILTER (WHERE correct)",
    "both_orders_labelled": "count(*) FILTER (WHERE label IN ('A','B') AND verdict_ba IS NOT NULL)",
    "consistent_correct": ("count(*) FILTER (WHERE label IN ('A','B') AND verdict_ab = label "
                           "AND verdict_ba = label)"),
    "consistent": "count(*) FILTER (WHERE consistent)",
    "inconsistent": "count(*) FILTER (WHERE consistent = false)",
    "both_orders": "count(*) FILTER (WHERE consistent IS NOT NULL)",
}


def pair_counts(one: Callable[[str, list], tuple], where: str = "TRUE",
                params: list | None = None) -> dict[str, int]:
    """The counts of `PAIR_COUNTS` over `pairs` rows matching `where`; `one(sql, params)` runs
    a query and returns its single row."""
    names = list(PAIR_COUNTS)
    row = one(f"SELECT {', '.join(PAIR_COUNTS[n] for n in names)} FROM pairs WHERE {where}",
              params or [])
    return dict(zip(names, row))


def ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def item_accuracy(ok_ab, ok_ba):
    """Per item: the share of its two orders judged correctly (0, 0.5 or 1); the mean over
    items is the accuracy with both orders pooled. Works on NumPy arrays and on scalars."""
    return (ok_ab + ok_ba) / 2


def item_consistency(ok_ab, ok_ba):
    """Per item: 1 when judged correctly in both orders; the mean over items judged in both
    orders is the positional consistency."""
    return ok_ab * ok_ba
