"""The judge's metrics and the rollout counts, defined once here and shown under the same names
by every surface (the `score` summary, `report`, `eval`, the dataset card, `filter`).

Metrics, over the labelled pairs (gold label A or B):

- **accuracy**: both orders pooled, the paper's. Per pair, the share of its judged orders whose
  verdict is the gold label (0, 0.5 or 1 with both orders), averaged over pairs. For a run in
  order (A, B) only it is that order's accuracy.
- **positional consistency**: the paper's. Pairs judged correctly in both orders over the pairs
  judged in both orders.
- **order agreement**: pairs whose two orders name the same winner, right or wrong (no gold
  label needed: the `consistent` column), over the pairs with a verdict in both orders. A pair
  whose orders name different winners is a flip (the progress line counts them).
- **combined-verdict agreement**: the verdict combining both orders (the `verdict` column, with
  the run's `--on-inconsistent` policy) against the gold label: agree, tie, disagree, and no
  verdict (error or dropped), each a share of the labelled pairs.
- **accuracy (ties = 0.5)**: the combined verdict scored as reward-bench scores a judge: 1 when it
  agrees, 0.5 for a tie, else 0.

The word "accuracy" alone names only the first. Rollout counts (from `samples`): rollouts cut
at the token limit, rollouts without a verdict of their own (unparsed), forced verdicts (read
from the logits, with `--forced` only) and the pair-orders they decided, and the pair-orders
whose usable rollouts all agree (unanimous: self-reflection is skipped there, since it could
not change the verdict).
"""

from __future__ import annotations

from typing import Callable

from rmjudge.core.words import count

# the metrics' names, as every surface prints them
ACCURACY = "accuracy"
CONSISTENCY = "positional consistency"
AGREEMENT = "combined-verdict agreement"
TIES_HALF = "accuracy (ties = 0.5)"
ORDER_AGREEMENT = "order agreement"

METRIC_HELP = {
    ACCURACY: "both orders pooled (the paper's): per pair, the share of its orders judged "
              "correctly, averaged",
    CONSISTENCY: "correct in both orders (the paper's)",
    AGREEMENT: "the verdict combining both orders against the gold label, ties shown apart",
    TIES_HALF: "the combined verdict with a tie counted as 0.5, as reward-bench scores",
    ORDER_AGREEMENT: "the two orders name the same winner, right or wrong (no gold label "
                     "needed); a pair whose orders disagree is a flip",
}

_LAB = "label IN ('A','B')"
PAIR_COUNTS = {
    "pairs": "count(*)",
    "labelled": f"count(*) FILTER (WHERE {_LAB})",
    # per labelled pair: the share of its judged orders that are right (pooled accuracy's sum)
    "pooled_correct": ("coalesce(sum(CASE WHEN verdict_ba IS NULL "
                       "THEN (verdict_ab = label)::INTEGER::DOUBLE "
                       "ELSE ((verdict_ab = label)::INTEGER + (verdict_ba = label)::INTEGER) / 2.0"
                       f" END) FILTER (WHERE {_LAB}), 0)"),
    "both_orders_labelled": f"count(*) FILTER (WHERE {_LAB} AND verdict_ba IS NOT NULL)",
    "consistent_correct": (f"count(*) FILTER (WHERE {_LAB} AND verdict_ab = label "
                           "AND verdict_ba = label)"),
    "agree": f"count(*) FILTER (WHERE {_LAB} AND verdict = label)",
    "tie": f"count(*) FILTER (WHERE {_LAB} AND verdict = 'tie')",
    "disagree": f"count(*) FILTER (WHERE {_LAB} AND verdict IN ('A','B') AND verdict <> label)",
    "consistent": "count(*) FILTER (WHERE consistent)",
    "inconsistent": "count(*) FILTER (WHERE consistent = false)",
    "both_orders": "count(*) FILTER (WHERE consistent IS NOT NULL)",
}

SAMPLE_COUNTS = {
    "generations": "count(*)",
    "rollouts": "count(*) FILTER (WHERE stage = 'rollout')",
    "truncated": "count(*) FILTER (WHERE stage = 'rollout' AND finish_reason = 'length')",
    "unparsed": ("count(*) FILTER (WHERE stage = 'rollout' AND verdict_source IS DISTINCT FROM "
                 "'generated')"),
    "forced": "count(*) FILTER (WHERE stage = 'rollout' AND verdict_source = 'forced')",
    "reflections": "count(*) FILTER (WHERE stage = 'reflection')",
    "reflections_unparsed": ("count(*) FILTER (WHERE stage = 'reflection' AND verdict_source IS "
                             "DISTINCT FROM 'generated')"),
    "reflections_truncated": ("count(*) FILTER (WHERE stage = 'reflection' AND finish_reason = "
                              "'length')"),
}
# A usable rollout: a verdict of its own, not cut at the token limit (judging/protocol.py).
_USABLE = "verdict_source = 'generated' AND finish_reason IS DISTINCT FROM 'length'"
# Per pair-order, in one pass over its rollouts: the pair-orders with no usable rollout that
# forced verdicts decided, and those whose usable rollouts (two or more) all agree, where the
# unanimity shortcut skips self-reflection since it could not change the verdict.
ORDER_COUNTS = f"""
SELECT count(*) FILTER (WHERE usable = 0 AND forced > 0),
       count(*) FILTER (WHERE usable >= 2 AND verdicts = 1)
FROM (SELECT count(*) FILTER (WHERE {_USABLE}) AS usable,
             count(*) FILTER (WHERE verdict_source = 'forced') AS forced,
             count(DISTINCT prediction) FILTER (WHERE {_USABLE}) AS verdicts
      FROM samples WHERE stage = 'rollout' {{and_where}} GROUP BY pair_id, "order")"""


def pair_counts(one: Callable[[str, list], tuple], where: str = "TRUE",
                params: list | None = None) -> dict[str, int]:
    """The counts of `PAIR_COUNTS` over `pairs` rows matching `where`; `one(sql, params)` runs
    a query and returns its single row."""
    names = list(PAIR_COUNTS)
    row = one(f"SELECT {', '.join(PAIR_COUNTS[n] for n in names)} FROM pairs WHERE {where}",
              params or [])
    return dict(zip(names, row))


def sample_counts(one: Callable[[str, list], tuple], pair_where: str | None = None,
                  params: list | None = None) -> dict[str, int]:
    """The counts of `SAMPLE_COUNTS` (and `forced_orders`) over `samples`, for the pairs
    matching `pair_where` (all when None)."""
    names = list(SAMPLE_COUNTS)
    cond = "TRUE" if pair_where is None else f"pair_id IN (SELECT id FROM pairs WHERE {pair_where})"
    p = params or []
    row = one(f"SELECT {', '.join(SAMPLE_COUNTS[n] for n in names)} FROM samples WHERE {cond}", p)
    out = {n: int(v or 0) for n, v in zip(names, row)}
    forced, unanimous = one(ORDER_COUNTS.format(and_where=f"AND {cond}"), p)
    out["forced_orders"], out["unanimous_orders"] = int(forced or 0), int(unanimous or 0)
    return out


def ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def metrics(c: dict) -> dict:
    """The named metrics from `pair_counts`: values in [0, 1], None where undefined."""
    lab = c["labelled"]
    no_verdict = lab - c["agree"] - c["tie"] - c["disagree"]
    return {
        "accuracy": ratio(c["pooled_correct"], lab),
        "positional_consistency": ratio(c["consistent_correct"], c["both_orders_labelled"]),
        "agreement": {"agree": ratio(c["agree"], lab), "tie": ratio(c["tie"], lab),
                      "disagree": ratio(c["disagree"], lab),
                      "no_verdict": ratio(no_verdict, lab)},
        "accuracy_ties_half": ratio(c["agree"] + 0.5 * c["tie"], lab),
        "labelled": lab,
        "both_orders": c["both_orders_labelled"] > 0,
    }


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def agreement_text(agreement: dict) -> str:
    """'agree 61.0%, tie 12.0%, disagree 27.0%' (and 'no verdict' when some pair has none)."""
    parts = [f"{k} {pct(agreement[k])}" for k in ("agree", "tie", "disagree")]
    if agreement.get("no_verdict"):
        parts.append(f"no verdict {pct(agreement['no_verdict'])}")
    return ", ".join(parts)


def metrics_lines(m: dict) -> list[str]:
    """The metrics as text lines, the same words on every surface."""
    if not m["labelled"]:
        return []
    acc = f"{ACCURACY} {pct(m['accuracy'])} on {m['labelled']} labelled pairs"
    if m["both_orders"]:
        acc += (f" (both orders pooled); {CONSISTENCY} {pct(m['positional_consistency'])} "
                "(correct in both orders)")
    else:
        acc += " (order (A, B) only, so pooled = single-order accuracy)"
    return [acc, f"{AGREEMENT}: {agreement_text(m['agreement'])}; {TIES_HALF} "
                 f"{pct(m['accuracy_ties_half'])}"]


def order_agreement_line(agree: int, both_orders: int) -> str | None:
    """'order agreement 75.0% (3 of 4 pairs ...)' (None without a pair with a verdict in
    both orders)."""
    if not both_orders:
        return None
    return (f"{ORDER_AGREEMENT} {pct(agree / both_orders)} ({agree} of "
            f"{count(both_orders, 'pair')} with a verdict in both orders name the same winner, "
            "right or wrong)")


def rollout_counts_line(s: dict) -> str | None:
    """The rollout counts as one line (None without samples)."""
    if not s.get("rollouts"):
        return None
    line = (f"rollouts {s['rollouts']}: cut at the token limit {s['truncated']}, unparsed "
            f"{s['unparsed']}, forced verdicts {s['forced']}")
    if s["forced_orders"]:
        line += f" (deciding {s['forced_orders']} pair-orders where no rollout parsed)"
    if s["reflections"]:
        line += (f"; reflections {s['reflections']}: unparsed {s['reflections_unparsed']}, cut "
                 f"{s['reflections_truncated']}")
    if s.get("unanimous_orders"):
        line += (f"; {count(s['unanimous_orders'], 'pair-order')} unanimous (no reflection "
                 "needed)")
    return line


def item_accuracy(ok_ab, ok_ba):
    """Per item: the share of its two orders judged correctly (0, 0.5 or 1); the mean over
    items is the accuracy with both orders pooled. Works on NumPy arrays and on scalars."""
    return (ok_ab + ok_ba) / 2


def item_consistency(ok_ab, ok_ba):
    """Per item: 1 when judged correctly in both orders; the mean over items judged in both
    orders is the positional consistency."""
    return ok_ab * ok_ba
