"""`rmjudge compare`: several judges on the same input, side by side.

Inputs are judged tables (`open_judged`: run stores or their Parquet/JSONL exports) of one
input, in any row order. Pairs are matched by id and checked by content: the same content hash
(`pairs.content_hash`, stored with each verdict), or the same conversation, responses and gold
label, or the same with A and B exchanged (with chosen/rejected input the slot of the chosen
response is drawn from the run's seed): such rows are aligned to the first table's slots
(`aligned`), and every figure is in the first table's terms. A pair holding other content
(an edited row) is reported per table and left out; a table with no pair in common is refused.
The recorded input (source, Hub revision and commit) of each table is reported. Pairs judged
in only some tables are counted per table and left out: every figure is computed on the pairs
judged in all of them (the common pairs).

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
  with each judge's share of final votes for A (`p_a`);
- when the first table's store has human labels (`rmjudge review import`): each judge against
  them on the common pairs (`rmjudge.analysis.agreement`).

Both bootstraps draw with `numpy.random.default_rng(seed)`, one resample of all pairs per row,
so a figure is reproducible from the seed and equal to drawing all resamples at once.

The jury of the judges (`--jury`) is written by `rmjudge.analysis.jury`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rmjudge.analysis.stats import (LETTERS, RESAMPLES, bootstrap_mean,  # noqa: F401  (re-exported)
                                    cohen_kappa, order_items, pair_correct, paired_gain)
from rmjudge.analysis.stats import MAX_RESAMPLES
from rmjudge.analysis.tables import JudgedTable
from rmjudge.core.errors import UserError
from rmjudge.core.settings import SettingsError, setting
from rmjudge.core.sql import quote_ident


class CompareError(UserError):
    """The tables cannot be compared as given; the message names the file and the fix."""


@dataclass(frozen=True)
class CompareSettings:
    resamples: int = setting(RESAMPLES, "Bootstrap resamples for the intervals.")
    seed: int = setting(0, "Bootstrap seed.")
    level: float = setting(0.95, "Interval coverage.")

    def __post_init__(self) -> None:
        if self.resamples < 1:
            raise SettingsError("--resamples must be at least 1")
        if self.resamples > MAX_RESAMPLES:
            raise SettingsError(f"--resamples must be at most {MAX_RESAMPLES:,}")
        if not 0.5 <= self.level < 1.0:
            raise SettingsError("--level must be in [0.5, 1)")


def per_pair_correct(table: JudgedTable) -> dict[str, float]:
    """id -> `pair_correct` for the labelled pairs of a judged table."""
    rows = table.sql("SELECT id, label, verdict_ab, verdict_ba FROM pairs "
                     "WHERE label IN ('A', 'B')")
    return {i: pair_correct(lab, ab, ba) for i, lab, ab, ba in rows}


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
    hashes: dict[str, tuple] = field(default_factory=dict)  # id -> (content hash, messages digest)
    input: dict = field(default_factory=dict)  # the recorded input: source, revision, commit
    changed: list[str] = field(default_factory=list)  # ids holding another pair than the first


TEXTS = ("prompt", "response_a", "response_b")  # loaded as digests, for the same-input check


def load_judge(table: JudgedTable) -> Judge:
    cols = ", ".join(f"md5(coalesce({quote_ident(c)}, chr(0)))" if c in TEXTS else
                     quote_ident(c) for c in PAIR_FIELDS)
    rows = {r[0]: r for r in table.sql(f"SELECT {cols} FROM pairs")}
    hashes = {r[0]: (r[1], r[2]) for r in table.sql(
        "SELECT id, content_hash, md5(coalesce(CAST(messages AS VARCHAR), chr(0))) FROM pairs")}
    ident = table.meta.get("input") if isinstance(table.meta.get("input"), dict) else {}
    return Judge(table.path, rows, ident.get("fingerprint"), ident.get("source"), hashes=hashes,
                 input={k: ident[k] for k in ("source", "revision", "commit") if ident.get(k)})


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


def same_pair(first: Judge, j: Judge, pid: str) -> str | None:
    """How pair `pid` of `j` stands to the first table's: "same" (the same content hash; or,
    for a table without hashes or rows that differ only in passthrough columns, the same
    conversation, responses and gold label), "swapped" (A and B exchanged: `is_swapped`), or
    None when it holds another pair (an edited row)."""
    (h1, m1), (h2, m2) = first.hashes.get(pid, (None, None)), j.hashes.get(pid, (None, None))
    if h1 is not None and h1 == h2:
        return "same"
    a, b = first.rows[pid], j.rows[pid]
    if m1 != m2:
        return None
    if all(a[PAIR_FIELDS.index(k)] == b[PAIR_FIELDS.index(k)] for k in SAME_FIELDS):
        return "same"
    return "swapped" if is_swapped(a, b) else None


SAME_FIELDS = ("prompt", "response_a", "response_b", "label")


def _difference(first: Judge, j: Judge, pid: str) -> str:
    a, b = first.rows[pid], j.rows[pid]
    differ = [k for k in SAME_FIELDS if a[PAIR_FIELDS.index(k)] != b[PAIR_FIELDS.index(k)]]
    if not differ:
        return "conversation"
    return "gold label" if differ[0] == "label" else differ[0]


def check_same_input(judges: list[Judge]) -> list[str]:
    """The ids judged in every table with the same content, in the first table's row order.
    Pairs are aligned by id and checked by content (`same_pair`: the content hash stored with
    each verdict), whatever order the tables hold them in. Rows whose slots are swapped against
    the first table are aligned to it in place (`aligned`); a pair that holds other content
    than in the first table (an edited row) goes to the table's `changed` and is left out.
    CompareError names a table that shares no pair with the first."""
    first = judges[0]
    fix = "compare tables judged from the same input"
    seen: set[str] = set()
    for j in judges:
        real = os.path.realpath(j.path)
        if real in seen:
            raise CompareError(f"{j.path} is given twice; give each judged table once")
        seen.add(real)
    for j in judges[1:]:
        shared = first.rows.keys() & j.rows.keys()
        if not shared:
            raise CompareError(f"{j.path} shares no pair id with {first.path}, so it is not "
                               f"of the same input: {fix}")
        for pid in sorted(shared):
            how = same_pair(first, j, pid)
            if how == "swapped":
                j.rows[pid] = aligned(j.rows[pid])
                j.swapped += 1
            elif how is None:
                j.changed.append(pid)
        if len(j.changed) == len(shared):  # not one pair in common: another input
            if j.fingerprint and first.fingerprint and j.fingerprint != first.fingerprint:
                raise CompareError(
                    f"{j.path} holds judgments of another input ({j.source}) than {first.path} "
                    f"({first.source}): none of their {len(shared)} shared pair ids holds the "
                    f"same pair; {fix}")
            pid = j.changed[0]
            raise CompareError(
                f"{j.path}: pair {pid!r} has another {_difference(first, j, pid)} than in "
                f"{first.path}, so it is not of the same input: {fix} (and the same label "
                "mapping)")
    common = set(first.rows)
    for j in judges[1:]:
        common &= j.rows.keys() - set(j.changed)
    rn = PAIR_FIELDS.index("row_number")
    return sorted(common, key=lambda i: (first.rows[i][rn] is None, first.rows[i][rn], i))


def input_note(judges: list[Judge]) -> str | None:
    """A line when the tables' recorded inputs name different Hub commits (pairs are compared
    by content all the same); None otherwise."""
    commits = {j.input["commit"] for j in judges if j.input.get("commit")}
    if len(commits) < 2:
        return None
    named = "; ".join(f"{j.path}: {j.input.get('source')} at {j.input['commit']}"
                      for j in judges if j.input.get("commit"))
    return (f"the tables were judged from different commits of the input ({named}); pairs are "
            "matched by id and compared by content, an edited pair is left out")


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
    human: list[dict] | None = None  # per judge, vs the first table's human labels
    note: str | None = None  # the tables name different Hub commits of their input
    edited: list[str] = field(default_factory=list)  # ids some table holds with other content

    def as_dict(self) -> dict:
        out = {"judges": self.judges, "common_pairs": self.common,
               "common_labelled": self.labelled,
               "kappa": {"unit": "order", "between_judges": self.kappa_judges,
                         "against_gold": self.kappa_gold},
               "flips": self.flips, "settings": self.settings}
        if self.human is not None:
            out["human"] = self.human
        if self.note is not None:
            out["note"] = self.note
        return out


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
    edited = {i for j in judges for i in j.changed}
    for k, j in enumerate(judges):
        only = sorted(set(j.rows) - common)
        acc = bootstrap_mean([correct[k][i] for i in labelled], cs.resamples, cs.seed,
                             cs.level) if labelled else None
        gain = None
        if k > 0 and labelled:
            gain = paired_gain(correct[0], correct[k], cs.resamples, cs.seed, cs.level)
        only = sorted(set(only) - edited)
        out.append({"path": j.path, "pairs": len(j.rows), "swapped": j.swapped,
                    "input": j.input or None,
                    "changed": len(j.changed), "changed_ids": j.changed[:5],
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
    from rmjudge.analysis.agreement import judges_vs_human

    human = judges_vs_human(tables[0], [
        {i: (j.rows[i][idx["verdict"]], j.rows[i][idx["verdict_ab"]],
             j.rows[i][idx["verdict_ba"]], first[i][idx["label"]]) for i in ids}
        for j in judges], cs)
    return Comparison(out, len(ids), len(labelled), kj, kg, flips,
                      {"resamples": cs.resamples, "seed": cs.seed, "level": cs.level}, human,
                      input_note(judges), sorted(edited))


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


def render(c: Comparison, max_flips: int = 20, width: int | None = None) -> str:
    """The comparison as text, every line at most `width` wide (None: no limit): prose wraps
    at spaces, tables keep their columns where they fit and are stacked (one block per row)
    where they do not; no path, id or figure is cut."""
    from rmjudge.core.layout import wrap_line

    limit = width or 10**9

    def prose(*lines: str) -> list[str]:
        return [out for line in lines for out in wrap_line(line, limit)]

    level = round(100 * c.settings["level"])
    out = prose(f"{c.common} pairs judged by each of the {len(c.judges)} judges, {c.labelled} "
                f"of them labelled; bootstrap {level}% intervals ({c.settings['resamples']} "
                f"resamples, seed {c.settings['seed']})")
    if not c.labelled:
        out += prose("  no gold labels on these pairs: accuracy, gain and kappa against gold "
                     "need labelled input (chosen/rejected, or a label column)")
    if c.note:
        out += prose(f"  {c.note}")
    out += prose(*_judge_notes(c), "", "judges (by number):",
                 *(f"  {k}  {j['path']}" for k, j in enumerate(c.judges, 1)), "")
    out += _judges_table(c, level, limit)
    out += prose("", "Cohen's kappa between judges (per order, verdicts A/B):")
    for kj in c.kappa_judges:
        left = (f", {kj['left_out']} orders without a verdict from both left out"
                if kj["left_out"] else "")
        out += prose(f"  judge {kj['a']} vs {kj['b']}: {_kappa(kj['value'])} "
                     f"({kj['n']} orders{left})")
    out += prose("", f"flips: {len(c.flips)} of {c.common} pairs where the combined verdicts "
                 "differ (verdict (share of final votes for A) per judge)")
    out += _flips_table(c, max_flips, limit)
    if len(c.flips) > max_flips:
        out += prose(f"  ... {len(c.flips) - max_flips} more (--flips N shows more, --json "
                     "lists all)")
    if c.human:
        from rmjudge.analysis.agreement import render_compare

        out += ["", render_compare(c.human, c.settings["level"], limit)]
    return "\n".join(out)


def _judge_notes(c: Comparison) -> list[str]:
    """Per judge: the pairs left out or read in the other slots."""
    lines = []
    for j in c.judges:
        if j["changed"]:
            ex = ", ".join(repr(x) for x in j["changed_ids"])
            lines.append(f"  {j['path']}: {j['changed']} pairs hold other content than in "
                         f"{c.judges[0]['path']} (edited since; left out), e.g. {ex}")
        if j["swapped"]:
            lines.append(f"  {j['path']}: {j['swapped']} pairs hold A and B in the other slots "
                         "(chosen/rejected input judged with another --seed); compared in the "
                         "first table's slots")
        if j["not_in_all"]:
            ex = ", ".join(repr(x) for x in j["not_in_all_ids"])
            lines.append(f"  {j['path']}: {j['not_in_all']} pairs not judged by every judge "
                         f"(left out), e.g. {ex}")
    return lines


def _judges_table(c: Comparison, level: int, width: int) -> list[str]:
    """Each judge's accuracy, gain over judge 1 and kappa against gold."""
    from rmjudge.core.layout import fit_table

    head = ["judge", f"accuracy, both orders pooled [{level}% CI]",
            f"gain over judge 1 [paired {level}% CI]", "kappa vs gold (orders)"]
    rows = [[str(k), _ci(j["accuracy"]), _ci(j["gain"], True),
             _kappa(c.kappa_gold[k - 1]["value"])] for k, j in enumerate(c.judges, 1)]
    return fit_table(head, rows, width, right=(0,))


def _flips_table(c: Comparison, max_flips: int, width: int) -> list[str]:
    """The pairs whose combined verdicts differ, one row each (stacked when too wide)."""
    if not c.flips:
        return []
    from rmjudge.core.layout import stacked

    shown = c.flips[:max_flips]
    w = max(2, *(len(str(f["id"])) for f in shown))
    judges = range(1, len(c.judges) + 1)
    lines = [(f"  {'id':<{w}}  label  " + "  ".join(f"{f'judge {k}':<11}"
                                                  for k in judges)).rstrip()]
    for f in shown:
        cells = "  ".join(f"{_share(v, p):<11}" for v, p in zip(f["verdicts"], f["p_a"]))
        lines.append(f"  {f['id']:<{w}}  {f['label'] or '-':<5}  {cells}".rstrip())
    if max(map(len, lines)) > width:
        lines = stacked(["id", "label"] + [f"judge {k}" for k in judges],
                        [[str(f["id"]), f["label"] or "-",
                          *(_share(v, p) for v, p in zip(f["verdicts"], f["p_a"]))]
                         for f in shown], width, indent="  ")
    return lines
