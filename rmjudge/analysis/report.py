"""`rmjudge report`: the judge's biases and calibration on a judged table, as a terminal summary
and one self-contained HTML page (plots embedded as base64 PNGs; no external JS, CSS or fonts).

Sections: position bias (how often slot 1 wins, per order and pooled, for verdicts and single
rollouts; how often the two orders flip), length bias (the judge's and the labels' preference for
A against the binned length difference len(A) - len(B)), parse failures and forced verdicts (from
`samples.verdict_source`, per stage and order), vote entropy of the rollout predictions per pair
and order, confidence calibration against labels (reliability diagram of the winning side's vote
share max(p_a, 1 - p_a), with ECE; accuracy by the per-order log-probability confidence), and
the same headline figures per group (`source`/`subset`). matplotlib (the `[report]` extra) is
imported only to draw.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
from dataclasses import dataclass, field

from rmjudge.core.counts import (ACCURACY, AGREEMENT, CONSISTENCY, METRIC_HELP, ORDER_AGREEMENT,
                                 TIES_HALF, agreement_text, metrics, metrics_lines, pair_counts,
                                 rollout_counts_line, sample_counts)
from rmjudge.analysis.tables import JudgedTable
from rmjudge.core.extras import install_hint
from rmjudge.core.sql import quote_ident
from rmjudge.files import file_head

MAX_GROUPS_HTML = 25
CAL_EDGES = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


@dataclass
class ReportData:
    path: str
    overview: dict
    position: dict
    length: list[dict]
    length_summary: dict
    parse: list[dict]
    entropy: dict
    calibration: dict
    groups: list[dict]
    group_columns: list[str]
    hidden_groups: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "path", "overview", "position", "length", "length_summary", "parse", "entropy",
            "calibration", "groups", "group_columns", "hidden_groups", "notes")}


def _ratio(a, b) -> float | None:
    return None if not b else a / b


# the rollouts' verdicts' entropy in bits, over 1, 2 and (formats with ties) a tie
ENTROPY_CTE = """
ent AS (
  SELECT pair_id, "order", n1, n2,
         CASE WHEN (n1 > 0)::INT + (n2 > 0)::INT + (n0 > 0)::INT < 2 THEN 0.0 ELSE
           -(CASE WHEN n1 = 0 THEN 0.0 ELSE (n1 / (n1 + n2 + n0)) * log2(n1 / (n1 + n2 + n0)) END
             + CASE WHEN n2 = 0 THEN 0.0 ELSE (n2 / (n1 + n2 + n0)) * log2(n2 / (n1 + n2 + n0)) END
             + CASE WHEN n0 = 0 THEN 0.0 ELSE (n0 / (n1 + n2 + n0)) * log2(n0 / (n1 + n2 + n0)) END)
         END AS h
  FROM (SELECT pair_id, "order", count(*) FILTER (WHERE prediction = 1)::DOUBLE AS n1,
               count(*) FILTER (WHERE prediction = 2)::DOUBLE AS n2,
               count(*) FILTER (WHERE prediction = 0)::DOUBLE AS n0
        FROM samples WHERE stage = 'rollout' GROUP BY ALL)
  WHERE n1 + n2 + n0 > 0)"""


def headline(t: JudgedTable, where: str = "TRUE", params: list | None = None) -> dict:
    """The per-group figures: the named metrics (core/counts.py), slot-1 rate, flips,
    parse failures and rollout counts, entropy, ECE, on the pairs matching `where`."""
    p = params or []
    c = pair_counts(t.one, where, p)
    m = metrics(c)
    ab_dec, ab_1, ba_dec, ba_1 = t.one(f"""
        SELECT count(*) FILTER (WHERE verdict_ab IN ('A','B')),
               count(*) FILTER (WHERE verdict_ab = 'A'),
               count(*) FILTER (WHERE verdict_ba IN ('A','B')),
               count(*) FILTER (WHERE verdict_ba = 'B')
        FROM pairs WHERE {where}""", p)
    out = {
        "pairs": c["pairs"], "labelled": c["labelled"],
        "accuracy": m["accuracy"], "consistency": m["positional_consistency"],
        "agreement": m["agreement"], "accuracy_ties_half": m["accuracy_ties_half"], "metrics": m,
        "rollout_counts": None,
        "slot1_ab": _ratio(ab_1, ab_dec),
        "slot1_ba": _ratio(ba_1, ba_dec), "slot1": _ratio(ab_1 + ba_1, ab_dec + ba_dec),
        "flip_rate": _ratio(c["inconsistent"], c["both_orders"]),
        "order_agreement": _ratio(c["consistent"], c["both_orders"]),
        "parse_failure": None, "forced": None,
        "entropy": None, "ece": None,
    }
    if t.has_samples:
        gens, failed, forced = t.one(f"""
            SELECT count(*), count(*) FILTER (WHERE verdict_source IS DISTINCT FROM 'generated'),
                   count(*) FILTER (WHERE verdict_source = 'forced')
            FROM samples WHERE pair_id IN (SELECT id FROM pairs WHERE {where})""", p)
        out["parse_failure"] = _ratio(failed, gens)
        out["forced"] = _ratio(forced, gens)
        out["rollout_counts"] = sample_counts(t.one, where, p)
        out["entropy"] = t.one(f"""WITH {ENTROPY_CTE} SELECT avg(h) FROM ent
                                   WHERE pair_id IN (SELECT id FROM pairs WHERE {where})""", p)[0]
    out["ece"] = calibration(t, where, p)["ece"]
    return out


def calibration(t: JudgedTable, where: str = "TRUE", params: list | None = None) -> dict:
    """Reliability of the winning side's vote share against labels, and ECE."""
    rows = t.sql(f"""
        WITH c AS (
          SELECT greatest(p_a, 1 - p_a) AS conf,
                 CASE WHEN p_a > 0.5 THEN 'A' WHEN p_a < 0.5 THEN 'B' ELSE verdict END AS side,
                 label
          FROM pairs WHERE {where} AND label IN ('A','B') AND p_a IS NOT NULL)
        SELECT least(floor((conf - 0.5) * 10), 4)::INTEGER AS b, count(*), avg(conf),
               avg(CASE WHEN side = label THEN 1.0 ELSE 0.0 END)
        FROM c WHERE side IN ('A','B') GROUP BY 1 ORDER BY 1""", params or [])
    bins = [{"lo": CAL_EDGES[b], "hi": CAL_EDGES[b + 1], "n": n, "confidence": conf,
             "accuracy": acc} for b, n, conf, acc in rows]
    total = sum(b["n"] for b in bins)
    ece = (sum(b["n"] * abs(b["confidence"] - b["accuracy"]) for b in bins) / total
           if total else None)
    return {"bins": bins, "ece": ece, "n": total}


def order_confidence(t: JudgedTable, nbins: int = 5) -> list[dict]:
    """Accuracy of each order's verdict by quantile bin of its log-probability confidence."""
    return [{"order": o, "bin": b, "n": n, "lo": lo, "hi": hi, "accuracy": acc}
            for o, b, n, lo, hi, acc in t.sql(f"""
        WITH x AS (
          SELECT 'ab' AS "order", confidence_ab AS conf, verdict_ab = label AS ok FROM pairs
          WHERE label IN ('A','B') AND confidence_ab IS NOT NULL
          UNION ALL
          SELECT 'ba', confidence_ba, verdict_ba = label FROM pairs
          WHERE label IN ('A','B') AND confidence_ba IS NOT NULL),
        q AS (SELECT *, ntile({nbins}) OVER (PARTITION BY "order" ORDER BY conf) AS b FROM x)
        SELECT "order", b, count(*), min(conf), max(conf), avg(ok::INTEGER::DOUBLE)
        FROM q GROUP BY ALL ORDER BY 1, 2""")]


def length_bias(t: JudgedTable, nbins: int = 6) -> tuple[list[dict], dict]:
    """P(judge picks A) and P(label is A) by bins of len(A) - len(B) with about equal counts
    (equal differences always share a bin)."""
    import numpy as np

    rows = t.sql("""SELECT length(response_a) - length(response_b), verdict, label FROM pairs
                    WHERE response_a IS NOT NULL AND response_b IS NOT NULL""")
    bins = []
    if rows:
        d = np.array([r[0] for r in rows], dtype=float)
        ja = np.array([{"A": 1.0, "B": 0.0}.get(r[1], np.nan) for r in rows])
        la = np.array([{"A": 1.0, "B": 0.0}.get(r[2], np.nan) for r in rows])
        edges = np.unique(np.quantile(d, np.linspace(0, 1, nbins + 1)[1:-1]))
        idx = np.searchsorted(edges, d, side="left")
        for b in np.unique(idx):
            m = idx == b
            jm, lm = ja[m][~np.isnan(ja[m])], la[m][~np.isnan(la[m])]
            bins.append({"bin": int(b), "n": int(m.sum()), "lo": int(d[m].min()),
                         "hi": int(d[m].max()), "mean_diff": float(d[m].mean()),
                         "judge_a": float(jm.mean()) if jm.size else None, "judge_n": int(jm.size),
                         "label_a": float(lm.mean()) if lm.size else None, "label_n": int(lm.size)})
    jl, jn, ll, ln = t.one("""
        WITH x AS (SELECT CASE WHEN length(response_a) > length(response_b) THEN 'A'
                               WHEN length(response_a) < length(response_b) THEN 'B' END AS longer,
                          verdict, label FROM pairs)
        SELECT count(*) FILTER (WHERE verdict = longer),
               count(*) FILTER (WHERE verdict IN ('A','B') AND longer IS NOT NULL),
               count(*) FILTER (WHERE label = longer),
               count(*) FILTER (WHERE label IN ('A','B') AND longer IS NOT NULL)
        FROM x""")
    return bins, {"judge_longer": _ratio(jl, jn), "judge_n": jn,
                  "label_longer": _ratio(ll, ln), "label_n": ln}


def parse_stats(t: JudgedTable) -> list[dict]:
    if not t.has_samples:
        return []
    return [{"stage": s, "order": o, "n": n, "generated": g, "forced": f, "none": x,
             "truncated": tr}
            for s, o, n, g, f, x, tr in t.sql("""
        SELECT stage, "order", count(*),
               count(*) FILTER (WHERE verdict_source = 'generated'),
               count(*) FILTER (WHERE verdict_source = 'forced'),
               count(*) FILTER (WHERE verdict_source IS NULL),
               count(*) FILTER (WHERE finish_reason = 'length')
        FROM samples GROUP BY ALL ORDER BY 1 DESC, 2""")]


def entropy_stats(t: JudgedTable) -> dict:
    if not t.has_samples:
        return {"hist": [], "by_bin": [], "mean": None}
    hist = t.sql(f"""WITH {ENTROPY_CTE}
        SELECT round(h, 2) AS h, count(*) FROM ent GROUP BY 1 ORDER BY 1""")
    by_bin = t.sql(f"""WITH {ENTROPY_CTE},
        j AS (SELECT e.h, CASE e."order" WHEN 'ab' THEN p.verdict_ab ELSE p.verdict_ba END = p.label AS ok
              FROM ent e JOIN pairs p ON p.id = e.pair_id WHERE p.label IN ('A','B'))
        SELECT CASE WHEN h = 0 THEN '0 (unanimous)' WHEN h < 0.5 THEN '(0, 0.5)'
                    WHEN h < 0.9 THEN '[0.5, 0.9)' ELSE '[0.9, 1]' END AS b,
               count(*), avg(ok::INTEGER::DOUBLE), min(h)
        FROM j GROUP BY 1 ORDER BY 4""")
    mean = t.one(f"WITH {ENTROPY_CTE} SELECT avg(h) FROM ent")[0]
    return {"hist": [{"h": h, "n": n} for h, n in hist],
            "by_bin": [{"bin": b, "n": n, "accuracy": a} for b, n, a, _ in by_bin],
            "mean": mean}


def build_report(t: JudgedTable, group_by: list[str] | None = None,
                 max_groups: int = MAX_GROUPS_HTML) -> ReportData:
    overview = headline(t)
    overview["verdicts"] = dict(t.sql("SELECT verdict, count(*) FROM pairs GROUP BY 1 ORDER BY 2 DESC"))
    overview["settings"] = t.meta.get("settings")
    position = {k: overview[k] for k in ("slot1_ab", "slot1_ba", "slot1", "flip_rate",
                                         "order_agreement")}
    position["label_a"] = t.one("""SELECT avg(CASE label WHEN 'A' THEN 1.0 ELSE 0.0 END)
                                   FROM pairs WHERE label IN ('A','B')""")[0]
    if t.has_samples:
        for o in ("ab", "ba"):
            position[f"rollout_slot1_{o}"] = t.one("""
                SELECT avg(CASE prediction WHEN 1 THEN 1.0 ELSE 0.0 END) FROM samples
                WHERE stage = 'rollout' AND prediction IS NOT NULL AND "order" = ?""", [o])[0]
    length, length_summary = length_bias(t)
    cal = calibration(t)
    cal["orders"] = order_confidence(t)
    groups_cols = t.group_columns(group_by)
    groups, hidden = [], 0
    for g in groups_cols:
        vals = t.sql(f"""SELECT CAST({quote_ident(g)} AS VARCHAR) AS v, count(*) FROM pairs
                         GROUP BY 1 ORDER BY 2 DESC, 1""")
        hidden += max(0, len(vals) - max_groups)
        for v, _ in vals[:max_groups]:
            cond = (f"CAST({quote_ident(g)} AS VARCHAR) = ?" if v is not None
                    else f"{quote_ident(g)} IS NULL")
            row = headline(t, cond, [v] if v is not None else [])
            row.update(column=g, value=v)
            groups.append(row)
    notes = []
    if not t.has_samples:
        notes.append("no samples table: parse failures, rollout position bias and vote entropy "
                     "need it (keep x.samples.parquet next to the export)")
    if overview["labelled"] == 0:
        notes.append("no gold labels: accuracy, positional consistency, combined-verdict "
                     "agreement and calibration are not available")
    return ReportData(t.path, overview, position, length, length_summary, parse_stats(t),
                      entropy_stats(t), cal, groups, groups_cols, hidden, notes)


# -- terminal ------------------------------------------------------------------------------------
def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def render_text(r: ReportData, html_path: str | None = None) -> str:
    o, p, ls = r.overview, r.position, r.length_summary
    lines = [f"{r.path}: {o['pairs']} pairs, {o['labelled']} labelled; verdicts "
             + ", ".join(f"{k} {v}" for k, v in o["verdicts"].items())]
    lines += [f"  {line}" for line in metrics_lines(o["metrics"])]
    if o["labelled"]:
        lines.append(f"  ECE {_f(r.calibration['ece'])}")
    lines.append(f"  position: slot 1 wins {pct(p['slot1_ab'])} in (A,B), {pct(p['slot1_ba'])} in "
                 f"(B,A), {pct(p['slot1'])} pooled (labels: A better in {pct(p['label_a'])}); "
                 f"{ORDER_AGREEMENT} {pct(p['order_agreement'])} (the two orders name the same "
                 "winner)")
    lines.append(f"  length: the longer response wins {pct(ls['judge_longer'])} of "
                 f"{ls['judge_n']} decided pairs (labels prefer it in {pct(ls['label_longer'])})")
    if r.parse:
        n = sum(x["n"] for x in r.parse)
        forced = sum(x["forced"] for x in r.parse)
        none = sum(x["none"] for x in r.parse)
        lines.append(f"  generations {n}: {pct((forced + none) / n)} did not parse "
                     f"({forced} forced verdicts, {none} without a verdict)")
    counts = rollout_counts_line(o["rollout_counts"] or {})
    if counts:
        lines.append(f"  {counts}")
    if r.entropy["mean"] is not None:
        lines.append(f"  mean vote entropy of rollouts {r.entropy['mean']:.2f} bits")
    if r.groups:
        lines.append(f"  per {'/'.join(r.group_columns)}: {len(r.groups)} groups in the report"
                     + (f" ({r.hidden_groups} smaller not shown)" if r.hidden_groups else ""))
    for n in r.notes:
        lines.append(f"note: {n}")
    if html_path:
        lines.append(f"report -> {html_path}")
    return "\n".join(lines)


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def _f(x: float | None, d: int = 3) -> str:
    return "-" if x is None else f"{x:.{d}f}"


# -- figures -------------------------------------------------------------------------------------
def make_figures(r: ReportData) -> dict[str, bytes]:
    """PNG bytes of every plot (matplotlib, Agg backend, imported here only)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("the HTML report draws with matplotlib: "
                          f"{install_hint('report')}") from None
    figs: dict[str, bytes] = {}
    for name, draw in (("position", _position_figure), ("length", _length_figure),
                       ("parse", _parse_figure), ("entropy", _entropy_figure),
                       ("calibration", _calibration_figure)):
        fig = draw(plt, r)
        if fig is not None:
            buf = io.BytesIO()
            fig.tight_layout()
            fig.savefig(buf, format="png", dpi=100)
            plt.close(fig)
            figs[name] = buf.getvalue()
    return figs


def _position_figure(plt, r: ReportData):
    """How often slot 1 wins, per order and pooled, for verdicts and rollouts."""
    p = r.position
    fig, ax = plt.subplots(figsize=(7, 3.4))
    names, vals = [], []
    for key, lab in (("slot1_ab", "verdict (A,B)"), ("slot1_ba", "verdict (B,A)"),
                     ("slot1", "verdict pooled"), ("rollout_slot1_ab", "rollouts (A,B)"),
                     ("rollout_slot1_ba", "rollouts (B,A)")):
        if p.get(key) is not None:
            names.append(lab)
            vals.append(100 * p[key])
    ax.bar(names, vals, color=["#4c72b0", "#4c72b0", "#2a4d7f", "#dd8452", "#dd8452"][:len(vals)])
    ax.axhline(50, color="grey", ls="--", lw=1, label="no position bias")
    ax.set_ylim(0, 112)  # room for the value labels above 100
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("slot 1 wins, %")
    ax.set_title("Position bias")
    ax.legend(loc="lower right", fontsize=8)
    for i, v in enumerate(vals):
        ax.text(i, v + 1.5, f"{v:.0f}", ha="center", fontsize=8)
    return fig


def _length_figure(plt, r: ReportData):
    """The judge's and the labels' preference for A by length difference (None: no bins)."""
    if not r.length:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.4))
    x = list(range(len(r.length)))
    labels = [f"{b['lo']}..{b['hi']}" for b in r.length]
    ja = [None if b["judge_a"] is None else 100 * b["judge_a"] for b in r.length]
    la = [None if b["label_a"] is None else 100 * b["label_a"] for b in r.length]
    ax.plot(x, [math.nan if v is None else v for v in ja], "o-", label="judge picks A")
    if any(v is not None for v in la):
        ax.plot(x, [math.nan if v is None else v for v in la], "s--", label="label is A")
    ax.axhline(50, color="grey", ls=":", lw=1)
    ax.set_xticks(x, labels, rotation=20, fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_xlabel("len(A) - len(B), characters (bins of about equal size)")
    ax.set_ylabel("% of pairs")
    ax.set_title("Length bias")
    ax.legend(fontsize=8)
    return fig


def _parse_figure(plt, r: ReportData):
    """Parsed, forced and verdict-less generations per stage and order (None: no samples)."""
    if not r.parse:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.4))
    names = [f"{x['stage']} ({x['order'][0].upper()},{x['order'][1].upper()})" for x in r.parse]
    gen = [100 * x["generated"] / x["n"] for x in r.parse]
    forced = [100 * x["forced"] / x["n"] for x in r.parse]
    none = [100 * x["none"] / x["n"] for x in r.parse]
    ax.bar(names, gen, label="parsed", color="#55a868")
    ax.bar(names, forced, bottom=gen, label="forced verdict", color="#dd8452")
    ax.bar(names, none, bottom=[a + b for a, b in zip(gen, forced)], label="no verdict",
           color="#c44e52")
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of generations")
    ax.set_title("Parse failures and forced verdicts")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _entropy_figure(plt, r: ReportData):
    """The vote entropy histogram and per-order accuracy by entropy (None: no rollouts)."""
    if not r.entropy["hist"]:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    hs = [h["h"] for h in r.entropy["hist"]]
    ns = [h["n"] for h in r.entropy["hist"]]
    axes[0].bar([f"{h:.2f}" for h in hs], ns, color="#8172b2")
    axes[0].set_xlabel("entropy of rollout predictions, bits")
    axes[0].set_ylabel("pair-orders")
    axes[0].set_title("Vote entropy")
    axes[0].tick_params(axis="x", labelsize=7, rotation=45)
    bb = r.entropy["by_bin"]
    if bb:
        axes[1].bar([b["bin"] for b in bb], [100 * b["accuracy"] for b in bb], color="#64b5cd")
        for i, b in enumerate(bb):
            axes[1].text(i, 100 * b["accuracy"] + 1.5, f"n={b['n']}", ha="center", fontsize=7)
        axes[1].set_ylim(0, 105)
        axes[1].set_ylabel("accuracy of the order's verdict, %")
        axes[1].set_title("Per-order accuracy by vote entropy")
        axes[1].tick_params(axis="x", labelsize=8)
    else:
        axes[1].axis("off")
    return fig


def _calibration_figure(plt, r: ReportData):
    """The reliability diagram and per-order accuracy by confidence (None: no labelled bins)."""
    cal = r.calibration
    if not cal["bins"]:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    _reliability_plot(axes[0], cal)
    _order_confidence_plot(axes[1], cal)
    return fig


def _reliability_plot(ax, cal: dict) -> None:
    ax.plot([0.5, 1], [0.5, 1], color="grey", ls="--", lw=1, label="perfect calibration")
    xs = [b["confidence"] for b in cal["bins"]]
    ys = [b["accuracy"] for b in cal["bins"]]
    ax.plot(xs, ys, "o-", color="#c44e52", label=f"judge (ECE {cal['ece']:.3f})")
    for b in cal["bins"]:
        ax.annotate(f"n={b['n']}", (b["confidence"], b["accuracy"]), fontsize=7,
                    textcoords="offset points", xytext=(3, -10))
    ax.set_xlim(0.48, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("winner's vote share max(p_a, 1 - p_a)")
    ax.set_ylabel("winner is the gold label, share")
    ax.set_title("Reliability diagram")
    ax.legend(fontsize=8, loc="lower right")


def _order_confidence_plot(ax, cal: dict) -> None:
    for o, mark in (("ab", "o-"), ("ba", "s--")):
        rows = [x for x in cal["orders"] if x["order"] == o]
        if rows:
            ax.plot([(x["lo"] + x["hi"]) / 2 for x in rows], [x["accuracy"] for x in rows],
                    mark, label=f"order ({o[0].upper()},{o[1].upper()})")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("per-order confidence (lowest-10% token log-prob)")
    ax.set_ylabel("accuracy of the order's verdict")
    ax.set_title("Per-order accuracy by confidence")
    if cal["orders"]:
        ax.legend(fontsize=8)


# -- HTML ----------------------------------------------------------------------------------------
CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1100px;color:#222;line-height:1.4;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd;
padding-bottom:4px}.sub{color:#666;font-size:13px;word-break:break-all}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}
.kpi{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.kpi div{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:6px;padding:8px 14px;min-width:130px}
.kpi b{display:block;font-size:20px}.kpi span{font-size:12px;color:#555}
.kv td,.kv th{text-align:left}img{max-width:100%;height:auto;display:block;margin:8px 0}.note{color:#8a5300;font-size:13px}
"""


def _img(figs: dict[str, bytes], name: str, alt: str) -> str:
    if name not in figs:
        return ""
    data = base64.b64encode(figs[name]).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _table(headers: list[str], rows: list[list], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    attr = f" class='{cls}'" if cls else ""
    return f"<table{attr}><tr>{head}</tr>{body}</table>"


def render_html(r: ReportData, figs: dict[str, bytes], view_href: str | None = None) -> str:
    """The page; `view_href`: a relative link to the table's explorer (`rmjudge view`)."""
    parts = (_head_html(r, view_href) + _bias_html(r, figs) + _generations_html(r, figs)
             + _calibration_html(r, figs) + _groups_html(r) + _settings_html(r.overview))
    parts.append("</body></html>")
    return "\n".join(x for x in parts if x)


def _head_html(r: ReportData, view_href: str | None) -> list[str]:
    """The page head, the headline figures, the verdicts and the notes."""
    o, p = r.overview, r.position
    kpis = [("pairs", str(o["pairs"])), ("labelled", str(o["labelled"])),
            (ACCURACY, pct(o["accuracy"])), (CONSISTENCY, pct(o["consistency"])),
            (TIES_HALF, pct(o["accuracy_ties_half"])),
            ("slot 1 wins (pooled)", pct(p["slot1"])),
            (ORDER_AGREEMENT, pct(p["order_agreement"])),
            ("did not parse", pct(o["parse_failure"])), ("ECE", _f(r.calibration["ece"]))]
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        GENERATOR,
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>rmjudge report: {html.escape(r.path)}</title><style>{CSS}</style></head><body>",
        "<h1>rmjudge report</h1>",
        f"<div class='sub'>{html.escape(r.path)}</div>",
        (f"<p><a href=\"{html.escape(view_href)}\">Every pair, with its rollouts and "
         "reflections, in the explorer</a> (rmjudge view)</p>" if view_href else ""),
        "<div class='kpi'>" + "".join(f"<div><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>"
                                      for k, v in kpis) + "</div>",
        "<p>Verdicts: " + html.escape(", ".join(f"{k} {v}" for k, v in o["verdicts"].items())) + "</p>",
    ]
    if o["labelled"]:
        parts.append(f"<p>{html.escape(AGREEMENT)}: {html.escape(agreement_text(o['agreement']))}"
                     "</p>")
        parts.append(_table(["metric", "definition"],
                            [[k, METRIC_HELP[k]] for k in (ACCURACY, CONSISTENCY, AGREEMENT,
                                                           TIES_HALF, ORDER_AGREEMENT)], "kv"))
    counts = rollout_counts_line(o["rollout_counts"] or {})
    if counts:
        parts.append(f"<p>{html.escape(_upper(counts))}.</p>")
    for n in r.notes:
        parts.append(f"<p class='note'>{html.escape(n)}</p>")
    return parts


def _bias_html(r: ReportData, figs: dict[str, bytes]) -> list[str]:
    """The position and length bias sections."""
    p, ls = r.position, r.length_summary
    return [
        "<h2>Position bias</h2>",
        f"<p>Slot 1 wins {pct(p['slot1_ab'])} of verdicts in order (A,B) and {pct(p['slot1_ba'])} "
        f"in order (B,A); an unbiased judge's two figures sum to 100%. Gold labels put the better "
        f"response in A in {pct(p['label_a'])} of pairs. {_upper(ORDER_AGREEMENT)}: the two "
        f"orders name the same winner on {pct(p['order_agreement'])} of the pairs judged in "
        f"both; they flip on {pct(p['flip_rate'])}.</p>",
        _img(figs, "position", "position bias"),
        "<h2>Length bias</h2>",
        f"<p>The longer response wins {pct(ls['judge_longer'])} of {ls['judge_n']} decided pairs "
        f"of unequal length; the gold labels prefer it in {pct(ls['label_longer'])} of "
        f"{ls['label_n']}.</p>",
        _img(figs, "length", "length bias"),
        _table(["len(A)-len(B)", "pairs", "judge picks A", "label is A"],
               [[f"{b['lo']}..{b['hi']}", b["n"], pct(b["judge_a"]), pct(b["label_a"])]
                for b in r.length]),
    ]


def _generations_html(r: ReportData, figs: dict[str, bytes]) -> list[str]:
    """The parse-failure and vote-entropy sections, where the table has samples."""
    parts = []
    if r.parse:
        parts += ["<h2>Parse failures and forced verdicts</h2>", _img(figs, "parse", "parse failures"),
                  _table(["stage", "order", "generations", "parsed", "forced", "no verdict",
                          "hit max tokens"],
                         [[x["stage"], x["order"], x["n"], x["generated"], x["forced"], x["none"],
                           x["truncated"]] for x in r.parse])]
    if r.entropy["hist"]:
        parts += ["<h2>Vote entropy</h2>",
                  f"<p>Entropy of the rollout predictions per pair and order (0: unanimous, 1 bit: "
                  f"an even split); mean {_f(r.entropy['mean'], 2)} bits.</p>",
                  _img(figs, "entropy", "vote entropy")]
    return parts


def _calibration_html(r: ReportData, figs: dict[str, bytes]) -> list[str]:
    """The confidence calibration section, where pairs are labelled."""
    if not r.calibration["bins"]:
        return []
    return ["<h2>Confidence calibration</h2>",
            f"<p>The winning side's share of the final votes (max(p_a, 1 - p_a)) against how "
            f"often that side is the gold label; ECE {_f(r.calibration['ece'])} over "
            f"{r.calibration['n']} pairs.</p>",
            _img(figs, "calibration", "calibration"),
            _table(["vote share", "pairs", "mean share", "winner is the gold label"],
                   [[f"{b['lo']:.1f}-{b['hi']:.1f}", b["n"], _f(b["confidence"]),
                     _f(b["accuracy"])] for b in r.calibration["bins"]])]


def _groups_html(r: ReportData) -> list[str]:
    """The headline figures per group, where the table has groups."""
    if not r.groups:
        return []
    parts = [f"<h2>Per {html.escape(' / '.join(r.group_columns))}</h2>"]
    if r.hidden_groups:
        parts.append(f"<p class='note'>{r.hidden_groups} smaller groups not shown.</p>")
    parts.append(_table(
        ["group", "pairs", ACCURACY, CONSISTENCY, AGREEMENT, "slot 1 wins", ORDER_AGREEMENT,
         "did not parse", "vote entropy", "ECE"],
        [[f"{g['column']}={g['value']}", g["pairs"], pct(g["accuracy"]), pct(g["consistency"]),
          agreement_text(g["agreement"]) if g["labelled"] else "-",
          pct(g["slot1"]), pct(g["order_agreement"]), pct(g["parse_failure"]),
          _f(g["entropy"], 2),
          _f(g["ece"])] for g in r.groups]))
    return parts


def _settings_html(overview: dict) -> list[str]:
    """The run's recorded settings, where the store holds them."""
    s = overview.get("settings")
    if not isinstance(s, dict):
        return []
    return ["<h2>Run settings</h2>",
            _table(["setting", "value"], [[k, v] for k, v in s.items()], "kv")]


GENERATOR = '<meta name="generator" content="rmjudge report">'


def explorer_link(table: str, output: str) -> str | None:
    """The relative link from the report at `output` to the table's explorer, when `rmjudge
    view` wrote one in its default place (NAME.view beside the table)."""
    from rmjudge.analysis.view_paths import PAGE, default_dir, is_view_dir, relative_link

    folder = default_dir(table)
    if not is_view_dir(folder):
        return None
    return relative_link(os.path.join(folder, PAGE), os.path.dirname(os.path.abspath(output)))


def is_report_file(path: str) -> bool:
    """True when `path` is a page `rmjudge report` wrote (its head carries GENERATOR)."""
    head = file_head(path, 4096)
    return head is not None and GENERATOR.encode() in head


def check_report_output(t: JudgedTable | str, output: str) -> None:
    """Refuse `output` unless it is new or an earlier report (rmjudge.files.outputs)."""
    from rmjudge.files import guard_output

    table = t if isinstance(t, str) else t.path
    guard_output(output, table, "report", is_report_file, f"its head has no {GENERATOR}")


def write_report(t: JudgedTable, output: str, group_by: list[str] | None = None) -> ReportData:
    """Build the report and write its page to `output`: only a new file or an earlier report
    is replaced, through a temporary file beside it moved into place."""
    check_report_output(t, output)
    data = build_report(t, group_by)
    page = render_html(data, make_figures(data), explorer_link(t.path, output))
    from rmjudge.files import make_dir, write_file

    make_dir(os.path.dirname(os.path.abspath(output)))
    write_file(output, page.encode("utf-8"), check=lambda: check_report_output(t, output))
    return data
