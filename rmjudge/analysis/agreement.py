"""Judge-vs-human agreement, from a store's `human_labels` table (`rmjudge review import`).

A pair's human label is the label most of its reviewers gave (more than half); when no label
has a majority (reviewers split) it is `tie`. Figures, on the human-labelled pairs of the table
(docs/review.md):
- `accuracy`: pairs labelled A or B; the share of the judge's orders whose verdict is the
  human label, averaged over pairs (both orders pooled, as against gold; `stats.pair_correct`);
- `agreement`: all human-labelled pairs; the judge's combined verdict equals the human label
  (a human tie agrees only with a judge tie);
- `kappa_orders`: Cohen's kappa per order (A/B items; human ties and orders without a verdict
  left out), as `rmjudge compare` counts it; `kappa_verdict`: Cohen's kappa of the combined
  verdict over A, B and tie (pairs whose verdict is error/dropped left out);
- beside them, on the same pairs: the judge's accuracy against gold, and the share of pairs
  where the human agrees with gold (both A or B).
Intervals are percentile bootstraps over pairs (`stats.bootstrap_mean`).
"""

from __future__ import annotations

from rmjudge.analysis.stats import bootstrap_mean, cohen_kappa, order_items, pair_correct
from rmjudge.analysis.tables import JudgedTable

LETTERS = ("A", "B")


def _database(table: JudgedTable) -> str | None:
    """The attached database of the run store behind `table`, when it has human labels."""
    db = "judged" if table.fmt == "duckdb" else "work"
    n = table.one("SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND "
                  "table_name = 'human_labels'", [db])[0]
    return db if n else None


def human_sql(table: JudgedTable) -> str | None:
    """A query of (pair_id, label, reviewers): each pair's human label; None without any."""
    db = _database(table)
    if db is None:
        return None
    return f"""SELECT pair_id,
        CASE WHEN count(*) FILTER (WHERE label = 'A') * 2 > count(*) THEN 'A'
             WHEN count(*) FILTER (WHERE label = 'B') * 2 > count(*) THEN 'B'
             ELSE 'tie' END AS label,
        count(*) AS reviewers
      FROM {db}.human_labels WHERE label IN ('A', 'B', 'tie') GROUP BY pair_id"""


def human_labels(table: JudgedTable) -> dict[str, str]:
    """pair id -> its human label (A, B or tie); empty without human labels."""
    q = human_sql(table)
    return {} if q is None else {r[0]: r[1] for r in table.sql(q)}


def reviewer_count(table: JudgedTable) -> int:
    db = _database(table)
    return 0 if db is None else table.one(
        f"SELECT count(DISTINCT reviewer) FROM {db}.human_labels")[0]


def _interval(values: list[float], resamples: int, seed: int, level: float) -> dict:
    n = len(values)
    if n == 0:
        return {"value": None, "lo": None, "hi": None, "n": 0}
    if resamples < 1:
        return {"value": sum(values) / n, "lo": None, "hi": None, "n": n}
    v, lo, hi = bootstrap_mean(values, resamples, seed, level)
    return {"value": v, "lo": lo, "hi": hi, "n": n}


def figures(items: list[tuple], resamples: int = 1000, seed: int = 0,
            level: float = 0.95) -> dict:
    """Items are (human, verdict, verdict_ab, verdict_ba, gold) per human-labelled pair."""
    ab_pairs = [x for x in items if x[0] in LETTERS]
    acc = [pair_correct(h, ab, ba) for h, _, ab, ba, _ in ab_pairs]
    agree = [float(v == h) for h, v, _, _, _ in items]
    mine = [(ab, ba) for h, _, ab, ba, _ in ab_pairs]
    human = [tuple(None if v is None else h for v in (ab, ba)) for h, _, ab, ba, _ in ab_pairs]
    xa, xh, left = order_items(mine, human)
    decided = [(v, h) for h, v, _, _, _ in items if v in ("A", "B", "tie")]
    gold = [x for x in ab_pairs if x[4] in LETTERS]
    return {
        "pairs": len(items),
        "human": {k: sum(1 for x in items if x[0] == k) for k in ("A", "B", "tie")},
        "accuracy": _interval(acc, resamples, seed, level),
        "agreement": _interval(agree, resamples, seed, level),
        "kappa_orders": {"value": cohen_kappa(xa, xh), "n": len(xa), "left_out": left},
        "kappa_verdict": {"value": cohen_kappa([d[0] for d in decided], [d[1] for d in decided]),
                          "n": len(decided)},
        "gold_accuracy": _interval([pair_correct(g, ab, ba) for _, _, ab, ba, g in gold],
                                   resamples, seed, level),
        "human_vs_gold": _interval([float(h == g) for h, _, _, _, g in gold], 0, seed, level),
    }


def table_agreement(table: JudgedTable, resamples: int = 1000, seed: int = 0,
                    level: float = 0.95) -> dict | None:
    """Judge-vs-human figures of one judged table; None when it has no human labels."""
    q = human_sql(table)
    if q is None:
        return None
    items = table.sql(f"""SELECT h.label, p.verdict, p.verdict_ab, p.verdict_ba, p.label
                          FROM pairs p JOIN ({q}) h ON h.pair_id = p.id ORDER BY p.id""")
    if not items:
        return None
    out = figures([tuple(r) for r in items], resamples, seed, level)
    out["reviewers"] = reviewer_count(table)
    out["unmatched"] = table.one(f"SELECT count(*) FROM ({q}) h WHERE h.pair_id NOT IN "
                                 "(SELECT id FROM pairs)")[0]
    return out


def _pct(s: dict) -> str:
    if s["value"] is None:
        return "-"
    if s.get("lo") is None:
        return f"{100 * s['value']:.1f}"
    return f"{100 * s['value']:.1f} [{100 * s['lo']:.1f}, {100 * s['hi']:.1f}]"


def _k(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def render(h: dict, level: float = 0.95) -> str:
    lv = round(100 * level)
    c = h["human"]
    lines = [(f"Judge vs human labels: {h['pairs']} pairs reviewed (A {c['A']}, B {c['B']}, "
              f"tie {c['tie']}) by {h.get('reviewers', '?')} reviewer(s); {lv}% bootstrap "
              "intervals"),
             (f"  accuracy vs human, both orders pooled: {_pct(h['accuracy'])} "
              f"({h['accuracy']['n']} pairs labelled A/B)"),
             (f"  combined verdict agrees with human:   {_pct(h['agreement'])} "
              f"({h['agreement']['n']} pairs, tie = tie)"),
             (f"  Cohen's kappa vs human: per order {_k(h['kappa_orders']['value'])} "
              f"({h['kappa_orders']['n']} orders), combined verdict "
              f"{_k(h['kappa_verdict']['value'])} ({h['kappa_verdict']['n']} pairs)")]
    if h["gold_accuracy"]["n"]:
        lines.append(f"  on the same pairs vs gold: accuracy {_pct(h['gold_accuracy'])}; human "
                     f"agrees with gold on {_pct(h['human_vs_gold'])}% "
                     f"({h['human_vs_gold']['n']} pairs)")
    if h.get("unmatched"):
        lines.append(f"  note: {h['unmatched']} human-labelled pair ids are not in this table")
    return "\n".join(lines)


def judges_vs_human(first: JudgedTable, rows: list[dict], cs) -> list[dict] | None:
    """For `rmjudge compare`: per judge, the figures against the first table's human labels.
    `rows` are per judge {id: (verdict, verdict_ab, verdict_ba, gold)} over the common pairs,
    in the first table's slots."""
    labels = human_labels(first)
    if not labels:
        return None
    out = []
    for r in rows:
        items = [(labels[i], *r[i]) for i in sorted(r) if i in labels]
        out.append(figures(items, cs.resamples, cs.seed, cs.level))
    return out


def render_compare(hs: list[dict], level: float, width: int | None = None) -> str:
    """Per judge, the figures against the human labels: a table at most `width` wide
    (stacked, one block per judge, where it does not fit)."""
    from rmjudge.core.layout import fit_table, wrap_line

    lv = round(100 * level)
    n = hs[0]["pairs"] if hs else 0
    head = ["judge", f"accuracy vs human [{lv}% CI]", f"agreement (verdict) [{lv}% CI]",
            "kappa (orders)", "kappa (verdict)"]
    rows = [[str(k), _pct(h["accuracy"]), _pct(h["agreement"]),
             _k(h["kappa_orders"]["value"]), _k(h["kappa_verdict"]["value"])]
            for k, h in enumerate(hs, 1)]
    lines = wrap_line(f"vs human labels (first table's human_labels; {n} common pairs "
                      "reviewed):", width or 10**9)
    return "\n".join(lines + fit_table(head, rows, width or 10**9, right=(0,)))
