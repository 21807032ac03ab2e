"""`rmjudge compare`: several judges on the same input, side by side.

Inputs are judged tables (`open_judged`: run stores or their Parquet/JSONL exports) of one
input. They are checked to be of the same input: the recorded input fingerprints agree (when
both tables have one), they share pair ids, and every shared pair has the same prompt,
responses and gold label, or the same with A and B exchanged (with chosen/rejected input the
slot of the chosen response is drawn from the run's seed): such rows are aligned to the first
table's slots (`aligned`), and every figure is in the first table's terms. Pairs judged in only
some tables are counted per table and left out: every figure is computed on the pairs judged
in all of them (the common pairs).

Figures (see docs/evaluation.md, "Comparing judges"):
- accuracy, both orders pooled (the paper's): per labelled pair, the share of its orders whose
  verdict is the gold label (`counts.item_accuracy`; a pair judged in one order counts that
  order; a missing verdict counts as wrong), averaged over pairs, with a percentile bootstrap
  interval (pairs resampled);
- gain over the first judge: the mean per-pair difference of that accuracy, with a paired
  bootstrap interval (the same resampled pairs for both judges);
- Cohen's kappa per order: every (pair, order) judged by both raters with a verdict A or B is
  one item; categories A and B; between every two judges (all common pairs) and between each
  judge and the gold label (labelled common pairs). Orders without a verdict are left out and
  counted;
- flips: common pairs whose combined verdicts (A, B, tie, error, dropped) are not all the same,
  with each judge's share of final votes for A (`p_a`).

Both bootstraps draw with `numpy.random.default_rng(seed)`, one resample of all pairs per row,
so a figure is reproducible from the seed and equal to drawing all resamples at once.

The jury (`write_jury`) is a judged table over the common pairs, shaped like a judged export
so `rmjudge filter` reads it:
- `verdict`: the winner (A or B) named by more than half of the judges' combined verdicts;
  `tie` when no winner has more than half of the judges (a split, or judges that tied or
  failed); `error` when no judge has a verdict (A, B or tie) for the pair;
- `verdict_ab`, `verdict_ba`: the same rule over the judges' verdicts in that order (null when
  no judge judged that order); `consistent`: both orders name the same winner (null unless
  both name one);
- `p_a`, `p_a_ab`, `p_a_ba`: the mean of the judges' shares of final votes for A;
- `label`, `correct`, `row_number`, `prompt`, `messages`, `response_a`, `response_b`: the
  pair's, from the first table; `policy` is `jury`;
- `jury_judges` (the tables, as a JSON list, in the order given), `jury_votes_a`,
  `jury_votes_b` (judges whose combined verdict is A, B), and per judge i (1-based)
  `verdict_j<i>` and `p_a_j<i>`, all in the first table's slots.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from rmjudge.analysis.counts import item_accuracy
from rmjudge.analysis.tables import JudgedTable
from rmjudge.errors import UserError
from rmjudge.sql import quote_ident, sql_literal
from rmjudge.store import PAIR_COLUMNS

RESAMPLES = 10000
MAX_DRAWS = 4_000_000  # pair indices drawn per chunk of resamples (bounds the memory)
LETTERS = ("A", "B")
JURY_MARK = "jury_judges"


class CompareError(UserError):
    """The tables cannot be compared as given; the message names the file and the fix."""


@dataclass(frozen=True)
class CompareSettings:
    resamples: int = field(default=RESAMPLES, metadata={"help": "Bootstrap resamples."})
    seed: int = field(default=0, metadata={"help": "Bootstrap seed."})
    level: float = field(default=0.95, metadata={"help": "Interval coverage."})

    def __post_init__(self) -> None:
        if self.resamples < 1:
            raise ValueError("--resamples must be at least 1")
        if not 0.5 <= self.level < 1.0:
            raise ValueError("--level must be in [0.5, 1)")


# -- the statistics ---------------------------------------------------------------------------

def bootstrap_mean(values, resamples: int = RESAMPLES, seed: int = 0, level: float = 0.95,
                   max_draws: int = MAX_DRAWS) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean of `values` and its percentile bootstrap interval. Resample r
    is row r of `rng.integers(0, n, size=(resamples, n))` with `rng = default_rng(seed)`,
    drawn `max_draws // n` rows at a time (the same numbers as drawing them all at once)."""
    d = np.asarray(values, dtype=float)
    n = d.size
    if n == 0:
        raise ValueError("no values to resample")
    rng = np.random.default_rng(seed)
    rows = max(1, max_draws // n)
    means = np.concatenate([d[rng.integers(0, n, size=(min(rows, resamples - start), n))]
                            .mean(axis=1) for start in range(0, resamples, rows)])
    a = round((1.0 - level) / 2, 12)
    return float(d.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1.0 - a))


def paired_gain(base: dict[str, float], other: dict[str, float], resamples: int = RESAMPLES,
                seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """Accuracy of `other` minus the base's on the pairs both judged, with a paired bootstrap
    interval (pairs resampled, both judges on the same draw)."""
    ids = sorted(set(base) & set(other))
    if not ids:
        raise ValueError("no pair judged by both")
    return bootstrap_mean([other[i] - base[i] for i in ids], resamples, seed, level)


def pair_correct(label: str, ab: str | None, ba: str | None) -> float:
    """Per labelled pair: the share of its judged orders whose verdict is the gold label
    (`counts.item_accuracy` when both were judged; a pair judged in one order counts that
    order; a verdict that is missing in a judged order, `error`, counts as wrong)."""
    if ab is None or ba is None:
        return float((ab if ba is None else ba) == label)
    return float(item_accuracy(float(ab == label), float(ba == label)))


def per_pair_correct(table: JudgedTable) -> dict[str, float]:
    """id -> `pair_correct` for the labelled pairs of a judged table."""
    rows = table.sql("SELECT id, label, verdict_ab, verdict_ba FROM pairs "
                     "WHERE label IN ('A', 'B')")
    return {i: pair_correct(lab, ab, ba) for i, lab, ab, ba in rows}


def cohen_kappa(a: list, b: list) -> float | None:
    """Cohen's kappa of two raters over the same items: (p_o - p_e) / (1 - p_e), p_o the share
    of items they agree on, p_e the agreement expected from each rater's category shares.
    None when there is no item or p_e is 1 (both raters always gave the same one category)."""
    if len(a) != len(b):
        raise ValueError("the raters must rate the same items")
    n = len(a)
    if n == 0:
        return None
    po = sum(x == y for x, y in zip(a, b)) / n
    cats = set(a) | set(b)
    pe = sum((a.count(c) / n) * (b.count(c) / n) for c in cats)
    if pe >= 1.0 - 1e-12:
        return None
    return (po - pe) / (1.0 - pe)


def order_items(rows_a: list[tuple], rows_b: list[tuple]) -> tuple[list, list, int]:
    """The per-order kappa items of two raters over the same pairs: rows are (ab, ba) per
    pair; an item is kept when both gave A or B. Returns (ratings a, ratings b, left out)."""
    xa, xb, left = [], [], 0
    for ra, rb in zip(rows_a, rows_b):
        for va, vb in zip(ra, rb):
            if va is None and vb is None:
                continue  # the order was not judged
            if va in LETTERS and vb in LETTERS:
                xa.append(va)
                xb.append(vb)
            else:
                left += 1
    return xa, xb, left


# -- loading and the same-input check ---------------------------------------------------------

PAIR_FIELDS = ("id", "row_number", "label", "verdict", "verdict_ab", "verdict_ba", "p_a",
               "prompt", "response_a", "response_b")


@dataclass
class Judge:
    path: str
    rows: dict[str, tuple]  # id -> PAIR_FIELDS values
    fingerprint: str | None
    source: str | None
    swapped: int = 0  # pairs whose slots are swapped against the first table (aligned)


TEXTS = ("prompt", "response_a", "response_b")  # loaded as digests, for the same-input check


def load_judge(table: JudgedTable) -> Judge:
    cols = ", ".join(f"md5(coalesce({quote_ident(c)}, chr(0)))" if c in TEXTS else
                     quote_ident(c) for c in PAIR_FIELDS)
    rows = {r[0]: r for r in table.sql(f"SELECT {cols} FROM pairs")}
    ident = table.meta.get("input") if isinstance(table.meta.get("input"), dict) else {}
    return Judge(table.path, rows, ident.get("fingerprint"), ident.get("source"))


SWAP = {"A": "B", "B": "A"}


def _swap(v):
    return SWAP.get(v, v)


def _flip(p):
    return None if p is None else 1.0 - p


def is_swapped(a: tuple, b: tuple) -> bool:
    """Row `b` is row `a` with the responses in the other slots (and the label with them):
    with chosen/rejected input, the slot of the chosen response is drawn from the run's seed."""
    f = PAIR_FIELDS.index
    return (b[f("response_a")] == a[f("response_b")] and b[f("response_b")] == a[f("response_a")]
            and b[f("label")] == _swap(a[f("label")]) and b[f("prompt")] == a[f("prompt")])


def aligned(row: tuple) -> tuple:
    """A row of a table whose slots are swapped against the first table, in the first table's
    terms: letters exchanged, the orders exchanged (its (A, B) order showed the first table's
    B first), vote shares for A become shares for B."""
    f = PAIR_FIELDS.index
    r = list(row)
    r[f("verdict")] = _swap(row[f("verdict")])
    r[f("verdict_ab")] = _swap(row[f("verdict_ba")])
    r[f("verdict_ba")] = _swap(row[f("verdict_ab")])
    r[f("p_a")] = _flip(row[f("p_a")])
    r[f("label")] = _swap(row[f("label")])
    r[f("response_a")], r[f("response_b")] = row[f("response_b")], row[f("response_a")]
    return tuple(r)


def check_same_input(judges: list[Judge]) -> list[str]:
    """The ids judged in every table, in the first table's row order. Rows whose slots are
    swapped against the first table are aligned to it in place (`aligned`). CompareError names
    the table that is not of the same input as the first."""
    first = judges[0]
    fix = "compare tables judged from the same input"
    seen: set[str] = set()
    for j in judges:
        real = os.path.realpath(j.path)
        if real in seen:
            raise CompareError(f"{j.path} is given twice; give each judged table once")
        seen.add(real)
    fields = ("prompt", "response_a", "response_b", "label")
    for j in judges[1:]:
        if j.fingerprint and first.fingerprint and j.fingerprint != first.fingerprint:
            raise CompareError(
                f"{j.path} holds judgments of another input ({j.source}) than {first.path} "
                f"({first.source}): {fix}")
        shared = first.rows.keys() & j.rows.keys()
        if not shared:
            raise CompareError(f"{j.path} shares no pair id with {first.path}, so it is not "
                               f"of the same input: {fix}")
        for pid in sorted(shared):
            a, b = first.rows[pid], j.rows[pid]
            differ = [k for k in fields if a[PAIR_FIELDS.index(k)] != b[PAIR_FIELDS.index(k)]]
            if not differ:
                continue
            if is_swapped(a, b):
                j.rows[pid] = aligned(b)
                j.swapped += 1
                continue
            what = "gold label" if differ[0] == "label" else differ[0]
            raise CompareError(
                f"{j.path}: pair {pid!r} has another {what} than in {first.path}, so it is "
                f"not of the same input: {fix} (and the same label mapping)")
    common = set(first.rows)
    for j in judges[1:]:
        common &= j.rows.keys()
    rn = PAIR_FIELDS.index("row_number")
    return sorted(common, key=lambda i: (first.rows[i][rn] is None, first.rows[i][rn], i))


# -- the comparison ---------------------------------------------------------------------------

@dataclass
class Comparison:
    judges: list[dict]
    common: int
    labelled: int
    kappa_judges: list[dict]
    kappa_gold: list[dict]
    flips: list[dict]
    settings: dict

    def as_dict(self) -> dict:
        return {"judges": self.judges, "common_pairs": self.common,
                "common_labelled": self.labelled,
                "kappa": {"unit": "order", "between_judges": self.kappa_judges,
                          "against_gold": self.kappa_gold},
                "flips": self.flips, "settings": self.settings}


def _stat(v: tuple[float, float, float] | None, n: int) -> dict:
    if v is None:
        return {"value": None, "lo": None, "hi": None, "n": n}
    return {"value": v[0], "lo": v[1], "hi": v[2], "n": n}


def compare(tables: list[JudgedTable], cs: CompareSettings | None = None) -> Comparison:
    cs = cs or CompareSettings()
    if len(tables) < 2:
        raise CompareError("give at least two judged tables to compare")
    judges = [load_judge(t) for t in tables]
    ids = check_same_input(judges)
    idx = {k: PAIR_FIELDS.index(k) for k in PAIR_FIELDS}
    first = judges[0].rows
    labelled = [i for i in ids if first[i][idx["label"]] in LETTERS]

    correct = []
    for j in judges:
        r = j.rows
        correct.append({i: pair_correct(first[i][idx["label"]], r[i][idx["verdict_ab"]],
                                        r[i][idx["verdict_ba"]]) for i in labelled})
    out = []
    common = set(ids)
    for k, j in enumerate(judges):
        only = sorted(set(j.rows) - common)
        acc = bootstrap_mean([correct[k][i] for i in labelled], cs.resamples, cs.seed,
                             cs.level) if labelled else None
        gain = None
        if k > 0 and labelled:
            gain = paired_gain(correct[0], correct[k], cs.resamples, cs.seed, cs.level)
        out.append({"path": j.path, "pairs": len(j.rows), "swapped": j.swapped,
                    "not_in_all": len(only), "not_in_all_ids": only[:5],
                    "accuracy": _stat(acc, len(labelled)),
                    "gain": None if k == 0 else _stat(gain, len(labelled))})

    orders = [[(j.rows[i][idx["verdict_ab"]], j.rows[i][idx["verdict_ba"]]) for i in ids]
              for j in judges]
    kj = []
    for a in range(len(judges)):
        for b in range(a + 1, len(judges)):
            xa, xb, left = order_items(orders[a], orders[b])
            kj.append({"a": a + 1, "b": b + 1, "value": cohen_kappa(xa, xb), "n": len(xa),
                       "left_out": left})
    gold_rows = [(first[i][idx["label"]],) * 2 for i in ids if first[i][idx["label"]] in LETTERS]
    kg = []
    for a, j in enumerate(judges):
        mine = [o for o, i in zip(orders[a], ids) if first[i][idx["label"]] in LETTERS]
        # the gold label is the rater for both orders; an order not judged stays out
        gold = [tuple(None if v is None else g for v, g in zip(o, gr))
                for o, gr in zip(mine, gold_rows)]
        xa, xg, left = order_items(mine, gold)
        kg.append({"judge": a + 1, "value": cohen_kappa(xa, xg), "n": len(xa),
                   "left_out": left})

    flips = []
    for i in ids:
        verdicts = [j.rows[i][idx["verdict"]] for j in judges]
        if len(set(verdicts)) > 1:
            flips.append({"id": i, "label": first[i][idx["label"]], "verdicts": verdicts,
                          "p_a": [j.rows[i][idx["p_a"]] for j in judges]})
    return Comparison(out, len(ids), len(labelled), kj, kg, flips,
                      {"resamples": cs.resamples, "seed": cs.seed, "level": cs.level})


# -- text -------------------------------------------------------------------------------------

def _pct(x: float | None, sign: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}" if sign else f"{100 * x:.1f}"


def _ci(s: dict | None, sign: bool = False) -> str:
    if not s or s["value"] is None:
        return "-"
    return f"{_pct(s['value'], sign)} [{_pct(s['lo'], sign)}, {_pct(s['hi'], sign)}]"


def _kappa(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _share(v: str | None, p: float | None) -> str:
    return f"{v or '-'} ({'-' if p is None else f'{p:.2f}'})"


def render(c: Comparison, max_flips: int = 20) -> str:
    level = round(100 * c.settings["level"])
    lines = [(f"{c.common} pairs judged by each of the {len(c.judges)} judges, {c.labelled} of "
              f"them labelled; bootstrap {level}% intervals ({c.settings['resamples']} "
              f"resamples, seed {c.settings['seed']})")]
    if not c.labelled:
        lines.append("  no gold labels on these pairs: accuracy, gain and kappa against gold "
                     "need labelled input (chosen/rejected, or a label column)")
    for j in c.judges:
        if j["swapped"]:
            lines.append(f"  {j['path']}: {j['swapped']} pairs hold A and B in the other slots "
                         "(chosen/rejected input judged with another --seed); compared in the "
                         "first table's slots")
        if j["not_in_all"]:
            ex = ", ".join(repr(x) for x in j["not_in_all_ids"])
            lines.append(f"  {j['path']}: {j['not_in_all']} pairs not judged by every judge "
                         f"(left out), e.g. {ex}")
    lines += ["", (f"judge  accuracy, both orders pooled [{level}% CI]  gain over judge 1 "
                   f"[paired {level}% CI]  kappa vs gold (orders)  table")]
    for k, j in enumerate(c.judges, 1):
        g = c.kappa_gold[k - 1]
        lines.append(f"{k:>5}  {_ci(j['accuracy']):<36}  {_ci(j['gain'], True):<34}  "
                     f"{_kappa(g['value']):<23}  {j['path']}")
    lines += ["", "Cohen's kappa between judges (per order, verdicts A/B):"]
    for kj in c.kappa_judges:
        left = (f", {kj['left_out']} orders without a verdict from both left out"
                if kj["left_out"] else "")
        lines.append(f"  judge {kj['a']} vs {kj['b']}: {_kappa(kj['value'])} "
                     f"({kj['n']} orders{left})")
    lines += ["", (f"flips: {len(c.flips)} of {c.common} pairs where the combined verdicts "
                   "differ (verdict (share of final votes for A) per judge)")]
    if c.flips:
        shown = c.flips[:max_flips]
        w = max(2, *(len(str(f["id"])) for f in shown))
        judges = range(1, len(c.judges) + 1)
        lines.append((f"  {'id':<{w}}  label  " + "  ".join(f"{f'judge {k}':<11}"
                                                             for k in judges)).rstrip())
        for f in shown:
            cells = "  ".join(f"{_share(v, p):<11}" for v, p in zip(f["verdicts"], f["p_a"]))
            lines.append(f"  {f['id']:<{w}}  {f['label'] or '-':<5}  {cells}".rstrip())
        if len(c.flips) > max_flips:
            lines.append(f"  ... {len(c.flips) - max_flips} more (--flips N shows more, --json "
                         "lists all)")
    return "\n".join(lines)


# -- the jury ---------------------------------------------------------------------------------

def _source(t: JudgedTable, alias: str) -> str:
    """SQL naming the `pairs` rows of table `t` from another table's connection."""
    if t.fmt == "duckdb":
        return f"{quote_ident(alias)}.pairs"
    if t.fmt == "parquet":
        return f"read_parquet({sql_literal(t.path)})"
    return f"read_json_auto({sql_literal(t.path)}, format='newline_delimited')"


def _count(cols: list[str], value: str) -> str:
    return "(" + " + ".join(f"coalesce({c} = '{value}', false)::INT" for c in cols) + ")"


def _majority(cols: list[str], per_order: bool) -> str:
    """The jury's verdict over the judges' verdict columns `cols` (see the module docstring)."""
    n = len(cols)
    none = (f"WHEN {' AND '.join(f'{c} IS NULL' for c in cols)} THEN NULL " if per_order else "")
    decided = "('A', 'B')" if per_order else "('A', 'B', 'tie')"
    any_verdict = " OR ".join(f"{c} IN {decided}" for c in cols)
    return (f"CASE {none}WHEN {_count(cols, 'A')} * 2 > {n} THEN 'A' "
            f"WHEN {_count(cols, 'B')} * 2 > {n} THEN 'B' "
            f"WHEN coalesce({any_verdict}, false) THEN 'tie' ELSE 'error' END")


def _mean(cols: list[str]) -> str:
    have = " + ".join(f"({c} IS NOT NULL)::INT" for c in cols)
    total = " + ".join(f"coalesce({c}, 0)" for c in cols)
    return f"({total}) / nullif({have}, 0)"


# the jury's columns taken from the inner query (the others: computed, or null)
PASSED = ("id", "row_number", "verdict", "verdict_ab", "verdict_ba", "p_a", "p_a_ab", "p_a_ba",
          "label", "prompt", "messages", "response_a", "response_b")


def jury_query(tables: list[JudgedTable]) -> str:
    """The jury's rows (common pairs, the first table's row order) as a query on the first
    table's connection, once `attach_judges` made the other tables visible there."""
    import orjson

    n = len(tables)
    froms = ["pairs j1"]
    for k, t in enumerate(tables[1:], 2):
        froms.append(f"JOIN {_source(t, f'compare_j{k}')} j{k} ON "
                     f"CAST(j{k}.id AS VARCHAR) = j1.id")

    def raw(k: int, c: str, typ: str) -> str:
        # the first table's `pairs` view has every core column; a file may lack newer ones
        t = tables[k - 1]
        if k == 1 or c in t.source_types:
            return f"TRY_CAST(j{k}.{quote_ident(c)} AS {typ})"
        return f"CAST(NULL AS {typ})"

    def same(k: int) -> str:
        """Judge k's row has the first table's slots (else they are swapped: `aligned`)."""
        return " AND ".join(f"{raw(k, c, 'VARCHAR')} IS NOT DISTINCT FROM j1.{c}"
                            for c in ("response_a", "response_b", "label"))

    def col(c: str, typ: str) -> list[str]:
        """Judge k's column `c` in the first table's terms."""
        swapped = {"verdict": "verdict", "verdict_ab": "verdict_ba", "verdict_ba": "verdict_ab",
                   "p_a": "p_a", "p_a_ab": "p_a_ba", "p_a_ba": "p_a_ab"}[c]
        out = [raw(1, c, typ)]
        for k in range(2, n + 1):
            other = raw(k, swapped, typ)
            other = (f"CASE {other} WHEN 'A' THEN 'B' WHEN 'B' THEN 'A' ELSE {other} END"
                     if typ == "VARCHAR" else f"1 - {other}")
            out.append(f"CASE WHEN {same(k)} THEN {raw(k, c, typ)} ELSE {other} END")
        return out

    v, ab, ba = col("verdict", "VARCHAR"), col("verdict_ab", "VARCHAR"), col("verdict_ba", "VARCHAR")
    pa, pab, pba = col("p_a", "DOUBLE"), col("p_a_ab", "DOUBLE"), col("p_a_ba", "DOUBLE")
    names = orjson.dumps([t.path for t in tables]).decode()
    inner = [
        "j1.id AS id", "j1.row_number AS row_number", f"{_majority(v, False)} AS verdict",
        f"{_majority(ab, True)} AS verdict_ab", f"{_majority(ba, True)} AS verdict_ba",
        f"{_mean(pa)} AS p_a", f"{_mean(pab)} AS p_a_ab", f"{_mean(pba)} AS p_a_ba",
        "j1.label AS label", "j1.prompt AS prompt", "j1.messages AS messages",
        "j1.response_a AS response_a", "j1.response_b AS response_b",
        f"{_count(v, 'A')} AS jury_votes_a", f"{_count(v, 'B')} AS jury_votes_b",
    ] + [f"{x} AS verdict_j{k}" for k, x in enumerate(v, 1)] + \
        [f"{x} AS p_a_j{k}" for k, x in enumerate(pa, 1)]
    core = {
        "consistent": "CASE WHEN verdict_ab IN ('A', 'B') AND verdict_ba IN ('A', 'B') "
                      "THEN verdict_ab = verdict_ba END",
        "correct": "CASE WHEN label IN ('A', 'B') THEN verdict = label END",
        "policy": "'jury'",
    }
    outer = [f"CAST({core.get(c, quote_ident(c) if c in PASSED else 'NULL')} AS "
             f"{t.split()[0]}) AS {quote_ident(c)}" for c, t in PAIR_COLUMNS] + [
        f"CAST({sql_literal(names)} AS VARCHAR) AS {JURY_MARK}",
        "CAST(jury_votes_a AS INTEGER) AS jury_votes_a",
        "CAST(jury_votes_b AS INTEGER) AS jury_votes_b",
    ] + [f"CAST(verdict_j{k} AS VARCHAR) AS verdict_j{k}" for k in range(1, n + 1)] + \
        [f"CAST(p_a_j{k} AS DOUBLE) AS p_a_j{k}" for k in range(1, n + 1)]
    return (f"SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} "
            f"FROM {' '.join(froms)}) ORDER BY row_number, id")


def attach_judges(tables: list[JudgedTable]) -> None:
    """Make the run stores among `tables[1:]` readable (read-only) from the first table's
    connection, as `compare_j<k>`."""
    con = tables[0].con
    for k, t in enumerate(tables[1:], 2):
        if t.fmt == "duckdb":
            con.execute(f"ATTACH {sql_literal(t.path)} AS {quote_ident(f'compare_j{k}')} "
                        "(READ_ONLY)")


def detach_judges(tables: list[JudgedTable]) -> None:
    con = tables[0].con
    for k in range(2, len(tables) + 1):
        con.execute(f"DETACH DATABASE IF EXISTS {quote_ident(f'compare_j{k}')}")


def is_jury_file(path: str) -> bool:
    """True when `path` is a Parquet/JSONL jury table written by `rmjudge compare --jury`."""
    import duckdb

    from rmjudge.store import output_format

    fmt = output_format(path)
    if fmt == "duckdb":
        return False
    reader = (f"read_parquet({sql_literal(path)})" if fmt == "parquet" else
              f"read_json_auto({sql_literal(path)}, format='newline_delimited')")
    con = duckdb.connect(":memory:")
    try:
        cols = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {reader}").fetchall()}
    except duckdb.Error:
        return False
    finally:
        con.close()
    return {JURY_MARK, "jury_votes_a", "verdict", "verdict_ab", "p_a"} <= cols


def check_jury_output(tables: list[JudgedTable], output: str) -> None:
    """Refuse `output` unless it is new or an earlier jury table (`guard_output`), never one
    of the compared tables."""
    from rmjudge.analysis.outputs import guard_output

    for t in tables:
        guard_output(output, t.path, "compare", is_jury_file,
                     "a jury table has the column jury_judges")


def is_jury_store(path: str) -> bool:
    """True when `path` is a run store written by `rmjudge compare --jury`."""
    import duckdb
    import orjson

    from rmjudge.store import is_rmjudge_store

    if not is_rmjudge_store(path):
        return False
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.Error:
        return False
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()
    except duckdb.Error:
        return False
    finally:
        con.close()
    try:
        settings = orjson.loads(row[0]) if row else None
    except orjson.JSONDecodeError:
        return False
    return isinstance(settings, dict) and JURY_MARK in settings


def check_jury_store_output(tables: list[JudgedTable], output: str) -> None:
    """A DuckDB jury: a new file or an earlier jury store, never a compared table or any
    other database."""
    from rmjudge.analysis.outputs import OutputError
    from rmjudge.store import check_not_busy

    check_not_busy(output)
    for t in tables:
        if os.path.realpath(output) == os.path.realpath(t.path):
            raise OutputError(f"{output} is the judged table {t.path} itself; `rmjudge compare` "
                              "never writes over it: choose another -o")
    if os.path.isdir(output):
        raise OutputError(f"{output} is a directory; give -o a file name")
    if os.path.exists(output) and not is_jury_store(output):
        raise OutputError(f"{output} exists and was not written by `rmjudge compare --jury` "
                          "(a jury store has a jury_judges entry in its settings); it is left "
                          "untouched: choose another -o")


def _empty(columns: list[tuple[str, str]]) -> str:
    cols = ", ".join(f"CAST(NULL AS {t.split()[0]}) AS {quote_ident(c)}" for c, t in columns)
    return f"SELECT {cols} LIMIT 0"


def write_jury_store(tables: list[JudgedTable], query: str, output: str) -> None:
    """The jury as a run store: its rows go in as one Parquet batch (`Store.import_batches`)
    of a store built beside `output` and moved into place (`NewStore`)."""
    import shutil
    import tempfile

    from rmjudge.store import ERROR_COLUMNS, SAMPLE_COLUMNS, NewStore, write_query_file

    con = tables[0].con
    folder = tempfile.mkdtemp(prefix=f".{os.path.basename(output)}.jury-",
                              dir=os.path.dirname(os.path.abspath(output)))
    try:
        batch = os.path.join(folder, "0")
        os.makedirs(batch)
        for name, q in (("pairs", query), ("samples", _empty(SAMPLE_COLUMNS)),
                        ("errors", _empty(ERROR_COLUMNS))):
            write_query_file(con, q, os.path.join(batch, f"{name}.parquet"), "parquet")
        check_jury_store_output(tables, output)
        new = NewStore(output, {JURY_MARK: [t.path for t in tables]},
                       overwrite=os.path.exists(output))
        try:
            if isinstance(tables[0].meta.get("input"), dict):
                new.store.set_meta("input", tables[0].meta["input"])
            new.store.import_batches(folder, [])
        except BaseException:
            new.discard()
            raise
        check_jury_store_output(tables, output)
        new.install()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_jury(tables: list[JudgedTable], output: str) -> int:
    """Write the jury table of `tables` to `output` (.parquet, .jsonl, or a .duckdb run
    store); returns its rows."""
    from rmjudge.store import output_format, write_query_file

    fmt = output_format(output)
    check = (lambda: check_jury_store_output(tables, output)) if fmt == "duckdb" else \
        (lambda: check_jury_output(tables, output))
    check()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    attach_judges(tables)
    try:
        query = jury_query(tables)
        if fmt == "duckdb":
            write_jury_store(tables, query, output)
        else:
            write_query_file(tables[0].con, query, output, fmt, check=check)
        return tables[0].one(f"SELECT count(*) FROM ({query})")[0]
    finally:
        detach_judges(tables)
