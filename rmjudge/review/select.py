"""Which pairs a reviewer sees, and what is shown for each.

Selections (docs/review.md), each over the judged `pairs`:
- `flipped`: both orders gave a winner (A or B) and not the same one;
- `low-confidence`: the share of final votes for A (`p_a`, averaged over the orders) lies
  within `threshold` of 0.5 (|p_a - 0.5| <= threshold);
- `disagree-with-gold`: a gold label A/B and a combined verdict (A, B or tie) other than it
  (a pair without a verdict, `error`/`dropped`, has no opinion to disagree with);
- `jury-split`: in a jury table (`rmjudge compare --jury`), the judges' combined verdicts
  (`verdict_j1`, `verdict_j2`, ...) are not all the same;
- `random:N`: N pairs drawn uniformly without replacement with `random.Random(seed)` from the
  ids sorted as text (all pairs when the table holds fewer).
Several selections are united; each row names the rules that chose it (`selected_by`).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from rmjudge.analysis.jury import JURY_MARK
from rmjudge.analysis.tables import JudgedTable, TableError
from rmjudge.core.settings import SettingsError
from rmjudge.core.sql import quote_ident

RULES = ("flipped", "low-confidence", "disagree-with-gold", "jury-split")
DEFAULT_THRESHOLD = 0.1


@dataclass(frozen=True)
class Selection:
    rule: str  # one of RULES, or "random"
    n: int = 0  # random:N

    @property
    def name(self) -> str:
        return f"random:{self.n}" if self.rule == "random" else self.rule


def parse_selection(text: str) -> Selection:
    t = text.strip().lower()
    if t in RULES:
        return Selection(t)
    if t.startswith("random:"):
        try:
            n = int(t.split(":", 1)[1])
        except ValueError:
            n = -1
        if n < 1:
            raise SettingsError(f"--select {text}: random:N needs a whole number N of at least "
                                "1")
        return Selection("random", n)
    raise SettingsError(f"--select {text}: choose flipped, low-confidence, disagree-with-gold, "
                        "jury-split or random:N")


def slot_key(response_a: str | None, response_b: str | None) -> str:
    """A short key of both responses in their slots (A first), to check slots on import."""
    def h(x: str | None) -> str:
        return hashlib.sha256((x or "").encode()).hexdigest()[:12]
    return f"{h(response_a)}:{h(response_b)}"


def jury_columns(table: JudgedTable) -> list[str]:
    cols, k = [], 1
    while f"verdict_j{k}" in table.pair_columns:
        cols.append(f"verdict_j{k}")
        k += 1
    return cols


def rule_sql(table: JudgedTable, rule: str, threshold: float) -> str:
    """A WHERE condition over `pairs` for one rule."""
    if rule == "flipped":
        return ("verdict_ab IN ('A', 'B') AND verdict_ba IN ('A', 'B') "
                "AND verdict_ab <> verdict_ba")
    if rule == "low-confidence":
        return f"p_a IS NOT NULL AND abs(p_a - 0.5) <= {float(threshold)!r} + 1e-12"
    if rule == "disagree-with-gold":
        return "label IN ('A', 'B') AND verdict IN ('A', 'B', 'tie') AND verdict <> label"
    if rule == "jury-split":
        cols = jury_columns(table)
        if JURY_MARK not in table.pair_columns or len(cols) < 2:
            raise TableError(f"{table.path} is not a jury table, so it has no judges to split: "
                             "make one with `rmjudge compare A.duckdb B.duckdb --jury -o "
                             "JURY.duckdb` and export from it")
        vals = ", ".join(f"coalesce({quote_ident(c)}, 'none')" for c in cols)
        return f"len(list_distinct([{vals}])) > 1"
    raise ValueError(rule)


def select_ids(table: JudgedTable, selections: list[Selection], threshold: float = DEFAULT_THRESHOLD,
               seed: int = 0) -> dict[str, list[str]]:
    """id -> the names of the selections that chose it, in the table's row order."""
    chosen: dict[str, list[str]] = {}
    order = [r[0] for r in table.sql("SELECT id FROM pairs ORDER BY row_number, id")]
    for sel in selections:
        if sel.rule == "random":
            ids = sorted(order)
            picked = set(random.Random(seed).sample(ids, min(sel.n, len(ids))))
        else:
            picked = {r[0] for r in table.sql(
                f"SELECT id FROM pairs WHERE {rule_sql(table, sel.rule, threshold)}")}
        for i in picked:
            chosen.setdefault(i, []).append(sel.name)
    return {i: chosen[i] for i in order if i in chosen}


ANCHOR_SQL = """
SELECT pair_id, "order",
       any_value(prediction) FILTER (WHERE is_anchor) AS anchor_pred,
       any_value(confidence) FILTER (WHERE is_anchor) AS anchor_conf,
       count(*) FILTER (WHERE prediction = 1) AS n1,
       count(*) FILTER (WHERE prediction = 2) AS n2,
       count(*) AS n,
       count(*) FILTER (WHERE won_reflection) AS won
FROM samples WHERE stage = 'rollout' AND pair_id IN (SELECT unnest(?::VARCHAR[]))
GROUP BY ALL
"""


def _letter(order: str, pred) -> str | None:
    if pred not in (1, 2):
        return None
    return "A" if (pred == 1) == (order == "ab") else "B"


def anchor_analysis(table: JudgedTable, ids: list[str]) -> dict[tuple[str, str], dict]:
    """(id, order) -> the anchor's verdict (A/B), its confidence, the rollouts' votes for A
    and B, and how many rollouts beat the anchor in self-reflection."""
    if not table.has_samples or not ids:
        return {}
    out = {}
    for pid, order, pred, conf, n1, n2, n, won in table.sql(ANCHOR_SQL, [ids]):
        a, b = (n1, n2) if order == "ab" else (n2, n1)
        out[(pid, order)] = {"anchor": _letter(order, pred), "anchor_confidence": conf,
                             "rollout_votes_a": a, "rollout_votes_b": b, "rollouts": n,
                             "beat_anchor": won}
    return out


def conversation_text(messages_json: str | None, prompt: str | None) -> str:
    """The conversation as plain text, one `role: content` block per turn."""
    import orjson

    try:
        msgs = orjson.loads(messages_json) if messages_json else None
    except orjson.JSONDecodeError:
        msgs = None
    if not isinstance(msgs, list) or not msgs:
        return prompt or ""
    parts = []
    for m in msgs:
        if isinstance(m, dict):
            parts.append(f"{m.get('role', 'user')}: {m.get('content', '')}")
    return "\n\n".join(parts)


FIELDS = ("id", "row_number", "label", "verdict", "verdict_ab", "verdict_ba", "consistent",
          "p_a", "p_a_ab", "p_a_ba", "prompt", "messages", "response_a", "response_b")


def review_rows(table: JudgedTable, chosen: dict[str, list[str]]) -> list[dict]:
    """The rows a reviewer sees, in the table's row order (see formats.REVIEW_COLUMNS)."""
    ids = list(chosen)
    if not ids:
        return []
    cols = ", ".join(quote_ident(c) for c in FIELDS)
    got = {r[0]: dict(zip(FIELDS, r)) for r in table.sql(
        f"SELECT {cols} FROM pairs WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids])}
    anchors = anchor_analysis(table, ids)
    rows = []
    for i in ids:
        p = got[i]
        row = {
            "id": i, "human_label": None, "selected_by": ",".join(chosen[i]),
            "gold_label": p["label"] if p["label"] in ("A", "B") else None,
            "judge_verdict": p["verdict"], "judge_verdict_ab": p["verdict_ab"],
            "judge_verdict_ba": p["verdict_ba"], "judge_consistent": p["consistent"],
            "judge_vote_share_a": p["p_a"], "judge_vote_share_a_ab": p["p_a_ab"],
            "judge_vote_share_a_ba": p["p_a_ba"],
        }
        for o in ("ab", "ba"):
            an = anchors.get((i, o), {})
            row[f"anchor_{o}"] = an.get("anchor")
            row[f"anchor_confidence_{o}"] = an.get("anchor_confidence")
            row[f"rollout_votes_{o}"] = (f"A {an['rollout_votes_a']} / B {an['rollout_votes_b']}"
                                         f" of {an['rollouts']}") if an else None
            row[f"beat_anchor_{o}"] = an.get("beat_anchor")
        row.update({
            "conversation": conversation_text(p["messages"], p["prompt"]),
            "response_a": p["response_a"], "response_b": p["response_b"],
            "slot_key": slot_key(p["response_a"], p["response_b"]),
        })
        rows.append(row)
    return rows
