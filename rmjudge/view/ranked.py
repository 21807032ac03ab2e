"""The prompts of a ranked store (`rmjudge rank`) for the explorer: one item per prompt, with its
candidates in rank order and the results of their comparisons (kind `prompts`).

The rankings are those of `rmjudge.rank.table.read_rankings`, the one computation behind the
store's `rankings` table, `eval` and `filter`, so the page shows the same ranks, scores and
confidences. A prompt that could not be ranked (an errors-table row at `input row *
ROW_STRIDE`) is an item of its own; a comparison the judge could not judge counts against its
prompt. Like `PairItems` (rmjudge/view/data.py), the exporter yields the list's columns, one
JSON text of details per item and one lower-cased search text per item, in the same order;
the comparisons' own details (rollouts, reflections, votes) stay the pairs' details.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from rmjudge.analysis.tables import JudgedTable
from rmjudge.rank.layouts import ROW_STRIDE
from rmjudge.rank.outputs import top1_correct
from rmjudge.rank.table import PromptRanking, rank_settings, read_rankings

# flags of a prompt (one bit each; the page's filters read them)
P_DISAGREE, P_ERROR_ROW, P_FAILED, P_UNJUDGED, P_NO_GOLD = 1, 2, 4, 8, 16
PROMPT_FLAGS = {"disagree": P_DISAGREE, "error_row": P_ERROR_ROW, "failed": P_FAILED,
                "unjudged": P_UNJUDGED, "no_gold": P_NO_GOLD}
GROUP_COLUMNS = ("source", "subset")


def _round(x, digits: int = 6):
    return None if x is None else round(float(x), digits)


def _coded(values: list) -> dict:
    seen: dict[str, int] = {}
    codes = [-1 if v is None else seen.setdefault(str(v), len(seen)) for v in values]
    return {"values": list(seen), "codes": codes}


class PromptItems:
    """Every prompt of a ranked store and every prompt that could not be ranked, by input row."""

    kind = "prompts"

    def __init__(self, t: JudgedTable):
        self.t = t
        self.settings = rank_settings(t)
        self.prompts = read_rankings(t)
        self.group_columns = [c for c in GROUP_COLUMNS if c in t.passthrough]
        self._comparisons()
        self._errors()
        items: list[tuple[int, int, object]] = [(p.input_row, 0, p) for p in self.prompts]
        items += [(row, 1, e) for row, e in self.error_prompts]
        items.sort(key=lambda x: (x[0], x[1], getattr(x[2], "prompt_id", "")))
        self.rows = [x[0] for x in items]  # the input row of each item
        self.items = [x[2] for x in items]
        self.count = len(self.items)

    def _comparisons(self) -> None:
        """prompt id -> [cand_a, cand_b, pair id, verdict, verdict_ab, verdict_ba, p_a]."""
        self.games: dict[str, list[list]] = {}
        self.gold_kinds: dict[str, str] = {}
        if "prompt_id" not in self.t.passthrough:
            return
        kind = ("CAST(gold_kind AS VARCHAR)" if "gold_kind" in self.t.passthrough
                else "NULL")
        for pid, a, b, cid, v, vab, vba, pa, gk in self.t.sql(
                "SELECT CAST(prompt_id AS VARCHAR), cand_a, cand_b, id, verdict, verdict_ab, "
                f"verdict_ba, p_a, {kind} FROM pairs ORDER BY row_number"):
            if a is None or b is None:
                continue
            if gk is not None:
                self.gold_kinds[pid] = gk
            self.games.setdefault(pid, []).append([int(a), int(b), cid, v, vab, vba,
                                                   _round(pa, 4)])

    def _errors(self) -> None:
        """The prompts that could not be ranked (input row, {reason, raw, id}) and, per input
        row, the comparisons the judge failed (errors-table rows of that prompt)."""
        self.error_prompts: list[tuple[int, dict]] = []
        self.failed: dict[int, int] = {}
        self.failed_rows: dict[int, list[int]] = {}  # input row -> its failed comparisons' rows
        if not self.t.has_errors:
            return
        for rn, eid, reason, raw in self.t.sql(
                "SELECT row_number, id, reason, raw FROM errors ORDER BY row_number"):
            if rn % ROW_STRIDE == 0:
                self.error_prompts.append((rn // ROW_STRIDE, {
                    "id": eid if eid is not None else self._raw_id(raw), "reason": reason,
                    "raw": raw}))
            else:
                self.failed[rn // ROW_STRIDE] = self.failed.get(rn // ROW_STRIDE, 0) + 1
                self.failed_rows.setdefault(rn // ROW_STRIDE, []).append(rn)

    def _raw_id(self, raw: str | None) -> str | None:
        """The prompt id an error row's input gives (its id column, RMB's `bon_uid` or the
        `--group-by` column of its first row), to show; None when it has none or is not
        JSON."""
        try:
            obj = orjson.loads((raw or "").split("\n", 1)[0])
        except orjson.JSONDecodeError:
            return None
        if not isinstance(obj, dict):
            return None
        for col in (self.settings.get("group_by"), "bon_uid", "id"):
            v = obj.get(col) if col else None
            if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v).strip():
                return str(v)
        return None

    # -- the list ---------------------------------------------------------------------------
    def _flags(self, p: PromptRanking) -> int:
        f = 0
        judged = any(r.wins or r.losses or r.ties for r in p.ranked)
        if not p.has_gold:
            f |= P_NO_GOLD
        elif judged and not top1_correct(p):
            f |= P_DISAGREE
        if self.failed.get(p.input_row) or any(g[3] in ("error", "dropped")
                                               for g in self.games.get(p.prompt_id, [])):
            f |= P_FAILED
        if any(r.unjudged for r in p.ranked):
            f |= P_UNJUDGED
        return f

    def index_columns(self) -> dict:
        cols: dict[str, list] = {k: [] for k in (
            "id", "row", "k", "top", "top_score", "top_conf", "top_gold", "gold_best",
            "compared", "flags", "prompt")}
        groups: list[list] = [[] for _ in self.group_columns]
        for row, item in zip(self.rows, self.items):
            if isinstance(item, PromptRanking):
                top = item.ranked[0]
                gold = item.gold[top.candidate] if item.has_gold else None
                best = (sorted(c for c in range(item.k) if item.gold[c] == min(item.gold))
                        if item.has_gold else None)
                values = [item.prompt_id, row, item.k, top.candidate,
                          _round(top.score, 4), _round(top.confidence, 4), gold, best,
                          len(item.games), self._flags(item), _preview(item.messages)]
                for g, c in zip(groups, self.group_columns):
                    g.append(item.fields.get(c))
            else:
                values = [item["id"], row, None, None, None, None, None, None, 0,
                          P_ERROR_ROW, item["reason"]]
                for g in groups:
                    g.append(None)
            for k, v in zip(cols, values):
                cols[k].append(v)
        out: dict = dict(cols)
        out["groups"] = [{"name": c, **_coded(g)} for c, g in zip(self.group_columns, groups)]
        return out

    # -- one item's details -------------------------------------------------------------------
    def detail_rows(self) -> Iterator[bytes]:
        for row, item in zip(self.rows, self.items):
            if not isinstance(item, PromptRanking):
                yield orjson.dumps({"kind": "error", "id": item["id"], "row": row,
                                    "error": {"reason": item["reason"], "raw": item["raw"]}},
                                   default=str)
                continue
            p = item
            cands = [[r.candidate, r.rank, _round(r.score), r.wins, r.losses, r.ties,
                      r.unjudged, _round(r.confidence), p.gold[r.candidate],
                      p.texts[r.candidate]] for r in p.ranked]
            yield orjson.dumps({
                "kind": "prompt", "id": p.prompt_id, "row": p.input_row, "k": p.k,
                "messages": p.messages, "candidates": cands,
                "games": self.games.get(p.prompt_id, []) + self._failed_games(p),
                "failed": self.failed.get(p.input_row, 0),
                "gold_kind": self.gold_kinds.get(p.prompt_id) if p.has_gold else None,
                "columns": [[c, v] for c, v in p.fields.items()]}, default=str)

    def _failed_games(self, p: PromptRanking) -> list[list]:
        """The comparisons of `p` the judge failed (errors-table rows), as games without a
        verdict: [i, j, None, "failed", None, None, None, their row number]."""
        from rmjudge.rank.strategies import round_robin

        pairs = round_robin(p.k)
        out = []
        for rn in self.failed_rows.get(p.input_row, []):
            n = rn % ROW_STRIDE
            if 1 <= n <= len(pairs):
                i, j = pairs[n - 1]
                out.append([i, j, None, "failed", None, None, None, rn])
        return out

    # -- full-text search ---------------------------------------------------------------------
    def search_texts(self) -> Iterator[str]:
        """Per prompt, its turns and every candidate, lower-cased (an error prompt: the
        reason and the raw row)."""
        for item in self.items:
            if isinstance(item, PromptRanking):
                parts = [str(m.get("content", "")) for m in item.messages
                         if isinstance(m, dict)]
                parts += [t for t in item.texts if t is not None]
            else:
                parts = [item["reason"] or "", item["raw"] or ""]
            yield " ".join(parts).lower()


def _preview(messages: list) -> str:
    """The last user turn in one line, cut to 160 characters (the list's prompt column)."""
    text = next((str(m.get("content", "")) for m in reversed(messages)
                 if isinstance(m, dict) and m.get("role") == "user"), "")
    text = " ".join(text.split())
    return text if len(text) <= 160 else text[:160] + "…"
