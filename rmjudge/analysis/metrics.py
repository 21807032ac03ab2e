"""`rmjudge eval`: accuracy and positional consistency of a judged table against gold labels.

For every system, overall and per group (`source`/`subset` passthrough columns when present):
accuracy in order (A, B) (`verdict_ab == label`), in order (B, A), accuracy (both orders pooled,
the paper's), and positional consistency (correct in both orders: the paper's strict rule); for
the combined verdict, the combined-verdict agreement (agree / tie / disagree) and the accuracy
with ties = 0.5. The names and definitions are core/counts.py's. Each figure carries a
seeded bootstrap 95% interval over pairs.

Systems, all from the same run where the stored samples allow it:
- `first`: the first rollout of each order (one temperature-T sample; a cut one has no
  verdict, a forced one counts);
- `majority`: plain majority vote of the rollouts, by the protocol's rule (ties go to the
  anchor, as `--no-reflect`: the usable rollouts vote, forced verdicts only when none is);
- `reflectrm`: the two-stage verdict of each order (`verdict_ab`/`verdict_ba`); when a pair
  took the unanimity shortcut, the three agree by construction;
- `final`: the verdict combining both orders (with the run's `--on-inconsistent` policy),
  scored as combined-verdict agreement, not as accuracy;
- `greedy`: one greedy rollout per order, when `--greedy-baseline` stored one (`greedy.py`).
Pairs whose verdict is missing (parse failure, error, dropped) count as wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmjudge.core.counts import (ACCURACY, AGREEMENT, CONSISTENCY, TIES_HALF, item_accuracy,
                                 item_consistency, rollout_counts_line, sample_counts)
from rmjudge.analysis.stats import MAX_RESAMPLES, resampled_means
from rmjudge.analysis.tables import JudgedTable, TableError
from rmjudge.core.settings import SettingsError, setting
from rmjudge.core.sql import quote_ident

SYSTEMS = {
    "greedy": "base model, greedy (1 rollout)",
    "first": "first rollout (T=1)",
    "majority": "majority vote of rollouts",
    "reflectrm": "ReflectRM two-stage",
    "final": "ReflectRM, both orders combined",
}
METRICS = ("acc", "acc_ab", "acc_ba", "consistency")  # per-order systems
FINAL_METRICS = ("agree", "tie", "disagree", "ties_half")  # the combined verdict


@dataclass(frozen=True)
class EvalSettings:
    """How `rmjudge eval` computes its figures; `resamples`, `seed` (`--bootstrap-seed`) and
    `group_by` (`--by`) are its options."""

    resamples: int = setting(1000, "Bootstrap resamples for the 95% intervals (0: none).")
    seed: int = setting(0, option="--bootstrap-seed", dest="bootstrap_seed")  # bootstrap seed
    level: float = setting(0.95, "Interval coverage.", cli=False)
    group_by: tuple[str, ...] | None = setting(
        None, "Break results down by this passthrough column (repeatable; default: source and "
        "subset when present).", option="--by", multiple=True, metavar="COLUMN",
        parse=lambda columns: tuple(columns) or None)

    def __post_init__(self) -> None:
        if self.resamples < 0:
            raise SettingsError("--resamples must be 0 (no intervals) or more")
        if self.resamples > MAX_RESAMPLES:
            raise SettingsError(f"--resamples must be at most {MAX_RESAMPLES:,}")
        if not 0.5 <= self.level < 1.0:
            raise SettingsError("--level must be in [0.5, 1)")


@dataclass
class Stat:
    value: float | None
    lo: float | None
    hi: float | None
    n: int

    def as_dict(self) -> dict:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "n": self.n}


def bootstrap_ci(values: np.ndarray, resamples: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the mean of `values` (resampling items).

    0/1 values use the exact equivalent: the number of ones in a resample of n items is
    Binomial(n, mean). Other values are resampled as `stats.bootstrap_mean` does
    (`stats.resampled_means`).
    """
    v = np.asarray(values, dtype=float)
    n = v.size
    if n == 0 or resamples == 0:
        return None, None
    rng = np.random.default_rng(seed)
    if np.all((v == 0) | (v == 1)):
        means = rng.binomial(n, v.mean(), size=resamples) / n
    else:
        means = resampled_means(v, resamples, rng)
    a = (1.0 - level) / 2
    lo, hi = np.quantile(means, [a, 1.0 - a])
    return float(lo), float(hi)


def stat(values: np.ndarray, es: EvalSettings, key: str) -> Stat:
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return Stat(None, None, None, 0)
    from rmjudge.core.seeds import derive_seed

    lo, hi = bootstrap_ci(v, es.resamples, derive_seed(es.seed, key), es.level)
    return Stat(float(v.mean()), lo, hi, int(v.size))


# a generation's own verdict, not cut at the token limit; a forced verdict (protocol.py)
OWN_VERDICT = "(verdict_source = 'generated' AND finish_reason IS DISTINCT FROM 'length')"
FORCED_VERDICT = "(verdict_source = 'forced')"


def letters_sql(table: JudgedTable) -> str:
    """Per pair: the letter each baseline gives in each order, from `samples` (and `greedy`),
    with the protocol's rule: the usable rollouts vote, the forced ones only when none is
    usable (a single rollout: its own verdict, else its forced one)."""
    parts = []
    if table.has_samples:
        parts.append("""
        roll AS (
          SELECT pair_id, "order",
                 max(prediction) FILTER (WHERE idx = 0 AND ({OWN} OR {FORCED})) AS first_pred,
                 count(*) FILTER (WHERE {OWN}) AS n_own,
                 count(*) FILTER (WHERE {OWN} AND prediction = 1) AS o1,
                 count(*) FILTER (WHERE {OWN} AND prediction = 2) AS o2,
                 count(*) FILTER (WHERE {OWN} AND prediction = 0) AS o0,
                 count(*) FILTER (WHERE {FORCED} AND prediction = 1) AS f1,
                 count(*) FILTER (WHERE {FORCED} AND prediction = 2) AS f2,
                 max(prediction) FILTER (WHERE is_anchor) AS anchor_pred
          FROM samples WHERE stage = 'rollout' GROUP BY ALL),
        pool AS (
          SELECT pair_id, "order", first_pred, anchor_pred,
                 CASE WHEN n_own > 0 THEN o1 ELSE f1 END AS n1,
                 CASE WHEN n_own > 0 THEN o2 ELSE f2 END AS n2,
                 CASE WHEN n_own > 0 THEN o0 ELSE 0 END AS n0
          FROM roll),
        base AS (
          SELECT pair_id, "order", first_pred,
                 CASE WHEN n1 > n2 AND n1 > n0 THEN 1 WHEN n2 > n1 AND n2 > n0 THEN 2
                      WHEN n0 > n1 AND n0 > n2 THEN 0 ELSE anchor_pred END AS maj_pred
          FROM pool)""".format(OWN=OWN_VERDICT, FORCED=FORCED_VERDICT))
    if table.has_greedy:
        parts.append(f"""g AS (SELECT pair_id, "order", any_value(prediction) FILTER (WHERE
                         {OWN_VERDICT} OR {FORCED_VERDICT}) AS greedy_pred
                       FROM greedy GROUP BY ALL)""")
    return ("WITH " + ",".join(parts)) if parts else ""


def _letter(col: str, order: str) -> str:
    one, two = ("A", "B") if order == "ab" else ("B", "A")
    return f"CASE {col} WHEN 1 THEN '{one}' WHEN 2 THEN '{two}' WHEN 0 THEN 'tie' END"


def load_frame(table: JudgedTable, groups: list[str]) -> dict[str, np.ndarray]:
    """The labelled pairs as numpy columns: label, verdicts per system and order, groups."""
    cols = ["p.id", "p.label", "p.verdict", "p.verdict_ab", "p.verdict_ba",
            "coalesce(p.shortcut_ab, false) AS shortcut_ab",
            "coalesce(p.shortcut_ba, false) AS shortcut_ba"]
    joins = []
    for o in ("ab", "ba"):
        if table.has_samples:
            joins.append(f"LEFT JOIN base b_{o} ON b_{o}.pair_id = p.id AND b_{o}.\"order\" = '{o}'")
            cols += [f"{_letter(f'b_{o}.first_pred', o)} AS first_{o}",
                     f"{_letter(f'b_{o}.maj_pred', o)} AS majority_{o}"]
        if table.has_greedy:
            joins.append(f"LEFT JOIN g g_{o} ON g_{o}.pair_id = p.id AND g_{o}.\"order\" = '{o}'")
            cols.append(f"{_letter(f'g_{o}.greedy_pred', o)} AS greedy_{o}")
    cols += [f"CAST(p.{quote_ident(g)} AS VARCHAR) AS {quote_ident('group:' + g)}" for g in groups]
    q = (f"{letters_sql(table)} SELECT {', '.join(cols)} FROM pairs p {' '.join(joins)} "
         "WHERE p.label IN ('A', 'B') ORDER BY p.id")
    cur = table.con.execute(q)
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    return {n: np.array([r[i] for r in rows], dtype=object) for i, n in enumerate(names)}


@dataclass
class EvalResult:
    path: str
    n_pairs: int
    n_labelled: int
    both_orders: bool
    groups: list[tuple[str, str, int]]  # (key, title, n)
    systems: list[str]
    metrics: dict[str, dict[str, dict[str, Stat]]]  # system -> group key -> metric -> Stat
    notes: list[str]
    settings: dict
    rollout_counts: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "table": self.path, "pairs": self.n_pairs, "labelled": self.n_labelled,
            "both_orders": self.both_orders, "rollout_counts": self.rollout_counts,
            "groups": [{"key": k, "title": t, "n": n} for k, t, n in self.groups],
            "systems": [{"key": s, "name": SYSTEMS[s], "metrics": {
                g: {m: st.as_dict() for m, st in ms.items()} for g, ms in self.metrics[s].items()}}
                for s in self.systems],
            "notes": self.notes, "settings": self.settings,
        }


def evaluate(table: JudgedTable, es: EvalSettings | None = None) -> EvalResult:
    es = es or EvalSettings()
    n_pairs = table.one("SELECT count(*) FROM pairs")[0]
    n_lab = table.count_labelled()
    if n_lab == 0:
        raise TableError(
            f"{table.path} has no gold labels (label is empty in all {n_pairs} pairs), so there "
            "is nothing to evaluate against: give labelled input (chosen/rejected, or a label "
            "column; --map label=COL), or use `rmjudge report` / `rmjudge filter` instead")
    groups = table.group_columns(list(es.group_by) if es.group_by else None)
    f = load_frame(table, groups)
    both = bool(np.any(f["verdict_ba"] != None))  # noqa: E711 (elementwise on object arrays)
    systems = _systems(table)
    masks = _group_masks(f, groups)
    metrics = {s: (_final_metrics(f, masks, es) if s == "final"
                   else _order_metrics(s, f, masks, es)) for s in systems}
    notes, counts = _notes(table, both)
    n_groups = {g: sum(1 for k, _, _ in masks if k.startswith(g + "=")) for g in groups}
    return EvalResult(
        path=table.path, n_pairs=n_pairs, n_labelled=n_lab, both_orders=both,
        groups=[(k, t, int(m.sum())) for k, t, m in masks], systems=systems, metrics=metrics,
        notes=notes, settings={"resamples": es.resamples, "seed": es.seed, "level": es.level,
                               "group_by": groups, "groups_per_column": n_groups,
                               "judge": table.meta.get("settings")},
        rollout_counts=counts,
    )


def _systems(table: JudgedTable) -> list[str]:
    """The rows of the tables: the baselines the table can give, then ReflectRM and the final
    verdict."""
    systems = []
    if table.has_greedy:
        systems.append("greedy")
    if table.has_samples:
        systems += ["first", "majority"]
    return systems + ["reflectrm", "final"]


def _group_masks(f: dict, groups: list[str]) -> list[tuple[str, str, np.ndarray]]:
    """(key, title, mask) per group: overall, then every value of every group column (largest
    first)."""
    masks: list[tuple[str, str, np.ndarray]] = [
        ("overall", "overall", np.ones(len(f["label"]), bool))]
    for g in groups:
        vals = f[f"group:{g}"]
        uniq, counts = np.unique(vals.astype(str), return_counts=True)
        for u, _ in sorted(zip(uniq, counts), key=lambda x: (-x[1], x[0])):
            masks.append((f"{g}={u}", u, vals.astype(str) == u))
    return masks


def _final_metrics(f: dict, masks, es: EvalSettings) -> dict[str, dict[str, Stat]]:
    """The final verdict against the label, per group: agree, tie, disagree, ties as half."""
    s, label = "final", f["label"]
    agree = (f["verdict"] == label).astype(float)
    tie = (f["verdict"] == "tie").astype(float)
    disagree = (np.isin(f["verdict"], ["A", "B"]) & (f["verdict"] != label)).astype(float)
    return {key: {"agree": stat(agree[m], es, f"{s}/{key}/acc"),
                  "tie": stat(tie[m], es, f"{s}/{key}/tie"),
                  "disagree": stat(disagree[m], es, f"{s}/{key}/disagree"),
                  "ties_half": stat(agree[m] + 0.5 * tie[m], es, f"{s}/{key}/ties_half")}
            for key, _, m in masks}


def _order_metrics(s: str, f: dict, masks, es: EvalSettings) -> dict[str, dict[str, Stat]]:
    """One system's per-order verdicts against the label, per group: accuracy per order and
    pooled, positional consistency."""
    label = f["label"]
    col = {"reflectrm": "verdict_{}"}.get(s, s + "_{}")
    c_ab = (f[col.format("ab")] == label).astype(float)
    c_ba = (f[col.format("ba")] == label).astype(float)
    out = {}
    for key, _, m in masks:
        has_ba = m & (f["verdict_ba"] != None)  # noqa: E711
        out[key] = {
            "acc_ab": stat(c_ab[m], es, f"{s}/{key}/ab"),
            "acc_ba": stat(c_ba[has_ba], es, f"{s}/{key}/ba"),
            "acc": stat(np.where(f["verdict_ba"][m] != None,  # noqa: E711
                                 item_accuracy(c_ab[m], c_ba[m]), c_ab[m]), es,
                        f"{s}/{key}/acc"),
            "consistency": stat(item_consistency(c_ab[has_ba], c_ba[has_ba]), es,
                                f"{s}/{key}/cons"),
        }
    return out


def _notes(table: JudgedTable, both: bool) -> tuple[list[str], dict]:
    """What the reader should know about the figures, and the rollout counts."""
    notes = []
    counts: dict = {}
    if table.has_samples:
        counts = sample_counts(table.one)
        sc = table.one("""SELECT count(*) FILTER (WHERE shortcut_ab) + count(*) FILTER (WHERE shortcut_ba),
                          count(verdict_ab) + count(verdict_ba) FROM pairs WHERE label IN ('A','B')""")
        if sc[1]:
            notes.append(
                f"{sc[0]}/{sc[1]} pair-orders ({sc[0] / sc[1]:.0%}) took the unanimity shortcut: "
                "every rollout agreed, so first rollout, majority and ReflectRM coincide there")
    else:
        notes.append("no samples table: the first-rollout and majority baselines need it "
                     "(keep x.samples.parquet next to the export)")
    if not table.has_greedy:
        notes.append("add --greedy-baseline for the base model's greedy row (runs the model once)")
    if not both:
        notes.append("judged in order (A, B) only: no positional consistency")
    missing = table.one("""SELECT count(*) FROM pairs WHERE label IN ('A','B')
                           AND verdict NOT IN ('A','B','tie')""")[0]
    if missing:
        notes.append(f"{missing} labelled pairs have no final verdict (error/dropped) and count "
                     "as wrong")
    return notes, counts


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def render(res: EvalResult, max_groups: int = 8, width: int | None = None,
           fit: bool = True) -> str:
    """Terminal tables shaped like the paper's Tables 1 (accuracy) and 5 (consistency), and
    the figures and notes around them, every line at most `width` wide (None: no limit).

    Columns are the overall figures and the `max_groups` largest groups, each headed by its
    whole name (a header wraps at its spaces, never inside a name); with `fit`, fewer groups
    (largest first, overall always shown) so that the tables fit `width`. A table that does
    not fit even so (or, without `fit`, with every group asked for) is stacked: one block per
    system, one line per group."""
    by_size = sorted(res.groups[1:], key=lambda g: -g[2])
    k = max(0, max_groups)
    limit = width or 10**9
    while True:
        text = _render(res, [res.groups[0]] + by_size[:k], limit, stack=False)
        if text is not None:
            return text
        if not fit or k == 0:
            return _render(res, [res.groups[0]] + by_size[:k], limit, stack=True)
        k -= 1


def _grid(res: EvalResult, shown: list, metric: str, systems: list[str]) -> tuple[list, list]:
    """One table's header and rows: the systems' figures per shown group."""
    head = [""] + [f"{t} ({n})" for _, t, n in shown]
    rows = []
    for s in systems:
        row = [SYSTEMS[s]]
        for key, _, _ in shown:
            st = res.metrics[s].get(key, {}).get(metric)
            if st is None or st.value is None:
                row.append("-")
            elif key == "overall" and st.lo is not None:
                row.append(f"{_pct(st.value)} [{_pct(st.lo)}, {_pct(st.hi)}]")
            else:
                row.append(_pct(st.value))
        rows.append(row)
    return head, rows


def _render(res: EvalResult, shown: list, width: int, stack: bool) -> str | None:
    """The text with `shown` groups as columns at `width`; None when a table does not fit
    (with `stack`: that table stacked instead)."""
    from rmjudge.core.layout import stacked, table, wrap_line

    lines = [f"{res.path}: {res.n_labelled} labelled of {res.n_pairs} pairs", ""]
    level = int(round(100 * res.settings["level"]))
    per_order = [s for s in res.systems if s != "final"]
    pooled = ("both orders pooled" if res.both_orders
              else "order (A, B) only, so pooled = single-order accuracy")
    tables = [(f"{ACCURACY.capitalize()}, % ({pooled}; overall with {level}% bootstrap "
               "interval)", "acc")]
    if res.both_orders:
        tables.append((f"{CONSISTENCY.capitalize()}, % (correct in both orders)", "consistency"))
    for title, metric in tables:
        head, rows = _grid(res, shown, metric, per_order)
        right = tuple(range(1, len(head)))
        body = table(head, rows, width, right=right)
        if body is None:
            if not stack:
                return None
            body = stacked(head, rows, width)
        lines += [title, *body, ""]
    lines += _final_lines(res, level) + _per_order_lines(res, per_order, level)
    hidden = len(res.groups) - len(shown)
    if hidden > 0:
        lines.append(f"  ({hidden} smaller groups not shown; --max-groups N or --json for all)")
    counts = rollout_counts_line(res.rollout_counts)
    if counts:
        lines.append(counts)
    lines += [f"note: {n}" for n in res.notes]
    return "\n".join(out for line in lines for out in wrap_line(line, width))


def _final_lines(res: EvalResult, level: int) -> list[str]:
    """The combined verdict's agreement with the gold label, overall."""
    if "final" not in res.systems:
        return []
    fm = res.metrics["final"]["overall"]
    policy = (res.settings.get("judge") or {}).get("on_inconsistent")
    how = SYSTEMS["final"] + (f", --on-inconsistent {policy}" if policy else "")
    th = fm["ties_half"]
    return [f"{AGREEMENT.capitalize()}, overall ({how}; {level}% interval):",
            "  " + ", ".join(f"{k} {_pct(fm[k].value)} [{_pct(fm[k].lo)}, {_pct(fm[k].hi)}]"
                             for k in ("agree", "tie", "disagree")),
            f"  {TIES_HALF} {_pct(th.value)} [{_pct(th.lo)}, {_pct(th.hi)}] "
            "(comparable with reward-bench)", ""]


def _per_order_lines(res: EvalResult, per_order: list[str], level: int) -> list[str]:
    """Each system's accuracy in each order, overall."""
    lines = [f"Per order, overall ({level}% interval):"]
    for s in per_order:
        m = res.metrics[s]["overall"]
        bits = [f"{lab} {_pct(m[k].value)} [{_pct(m[k].lo)}, {_pct(m[k].hi)}]"
                for k, lab in (("acc_ab", "acc(A,B)"), ("acc_ba", "acc(B,A)"))
                if m[k].value is not None]
        lines.append(f"  {SYSTEMS[s]}: " + ", ".join(bits))
    return lines
