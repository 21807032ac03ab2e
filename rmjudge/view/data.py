"""What the explorer shows, read from a judged table: the list (a compact columnar index), each
item's details and the text the search reads, as JSON ready to be written into data files.

One *kind* of item per exporter: `PairItems` reads the `pairs` table (with `samples`, `errors`
and the human labels of the store). Every exporter yields the same three things, so another
table (the candidates of a ranked store, say) is added as one more exporter with its own kind,
without changing the page's loading:

- `index_columns()`: {column: [value per item]}, in the items' order (a few bytes per item);
- `detail_rows()`: one JSON text per item, in the same order (prompt, responses, every sample);
- `search_texts()`: one lower-cased text per item, in the same order (what full-text search
  matches: the conversation's turns and both responses).

Each table is read in one sorted pass (the samples joined to their pair in Python) and each
item's JSON written by orjson; docs/view.md has the figures for 100,000 pairs at N = 8. Every value is data: the page renders it as text (rmjudge/view/assets).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from rmjudge.analysis.tables import JudgedTable
from rmjudge.analysis.agreement import human_sql
from rmjudge.review.select import slot_key
from rmjudge.core.sql import quote_ident
from rmjudge.store import PAIR_COLUMNS

FORMAT = 1  # the layout of the data files (docs/view.md); a change the page cannot read bumps it

# flags of an item (one bit each; the page's filters read them)
INCONSISTENT, CUT, UNPARSED, FORCED, SHORTCUT, ERROR_ROW, JUDGE_ERROR = 1, 2, 4, 8, 16, 32, 64
FLAG_NAMES = {"inconsistent": INCONSISTENT, "cut": CUT, "unparsed": UNPARSED, "forced": FORCED,
              "shortcut": SHORTCUT, "error_row": ERROR_ROW, "judge_error": JUDGE_ERROR}
GROUP_COLUMNS = ("source", "subset")
SAMPLE_FIELDS = ("order", "stage", "idx", "text", "prediction", "confidence", "is_anchor",
                 "reflection_of", "reflection_slot", "won_reflection", "verdict_source",
                 "tokens", "finish_reason", "p_first")
# the pair's fields in its details, by the page's names (`a`, `b`: the responses)
DETAIL_PAIR_FIELDS = {"id": "id", "row": "row_number", "prompt": "prompt", "messages": "messages",
                      "a": "response_a", "b": "response_b", **{c: c for c in (
                          "label", "verdict", "verdict_ab", "verdict_ba", "consistent",
                          "correct", "p_a", "p_a_ab", "p_a_ba", "policy", "shortcut_ab",
                          "shortcut_ba", "confidence_ab", "confidence_ba", "rollouts_ab",
                          "rollouts_ba")}, "run": "run_id"}
FLOAT_FIELDS = ("p_a", "p_a_ab", "p_a_ba", "confidence_ab", "confidence_ba")
FETCH_ROWS = 5000


def _round(x: float | None, digits: int = 4) -> float | None:
    if x is None or isinstance(x, float) and not math.isfinite(x):
        return None
    return round(x, digits)


@dataclass
class Coded:
    """A text column as codes into its list of distinct values (null: -1)."""
    values: list[str]
    codes: list[int]

    @classmethod
    def of(cls, items: list) -> Coded:
        seen: dict[str, int] = {}
        codes = []
        for v in items:
            if v is None:
                codes.append(-1)
                continue
            codes.append(seen.setdefault(str(v), len(seen)))
        return cls(list(seen), codes)

    def as_json(self) -> dict:
        return {"values": self.values, "codes": self.codes}


class PairItems:
    """The judged pairs of a table and its error rows, in row order (kind `pairs`)."""

    kind = "pairs"

    def __init__(self, t: JudgedTable):
        self.t = t
        t.con.execute("SET enable_progress_bar = false")  # the command prints its own summary
        self.group_columns = [c for c in GROUP_COLUMNS if c in t.pair_columns]
        core = {c for c, _ in PAIR_COLUMNS}
        self.extra_columns = [c for c in t.pair_columns if c not in core]
        self._order()

    # -- the items' order -----------------------------------------------------------------
    def _order(self) -> None:
        """The view `items(pos, kind, id, rn)`: pairs and error rows by row number (a view of
        the in-memory connection: nothing is written)."""
        errors = ("UNION ALL SELECT 'error', row_number, coalesce(id, ''), row_number FROM errors"
                  if self.t.has_errors else "")
        self.t.con.execute(f"""
            CREATE OR REPLACE VIEW items AS
            SELECT (row_number() OVER (ORDER BY rn NULLS LAST, kind DESC, id) - 1)::BIGINT AS pos,
                   kind, id, rn
            FROM (SELECT 'pair' AS kind, row_number AS rn, id, NULL::BIGINT AS err FROM pairs
                  {errors})""")
        self.count = self.t.one("SELECT count(*) FROM items")[0]
        self.pairs = self.t.one("SELECT count(*) FROM items WHERE kind = 'pair'")[0]

    # -- the list ---------------------------------------------------------------------------
    def index_columns(self) -> dict:
        t = self.t
        flags_cte = ""
        flag_sql = "0"
        if t.has_samples:
            flags_cte = """, fl AS (
                SELECT pair_id,
                       bool_or(finish_reason = 'length') AS cut,
                       bool_or(verdict_source IS NULL) AS unparsed,
                       bool_or(verdict_source = 'forced') AS forced
                FROM samples GROUP BY pair_id)"""
            flag_sql = (f"(CASE WHEN fl.cut THEN {CUT} ELSE 0 END) + "
                        f"(CASE WHEN fl.unparsed THEN {UNPARSED} ELSE 0 END) + "
                        f"(CASE WHEN fl.forced THEN {FORCED} ELSE 0 END)")
        human = human_sql(t)
        human_cte = f", hu AS ({human})" if human else ""
        human_join = "LEFT JOIN hu ON hu.pair_id = p.id" if human else ""
        human_col = "hu.label" if human else "NULL"
        groups = "".join(f", CAST(p.{quote_ident(c)} AS VARCHAR)" for c in self.group_columns)
        rows = t.sql(f"""
            WITH x AS (SELECT 1){flags_cte}{human_cte}
            SELECT i.kind, i.id, i.rn, p.label, {human_col}, p.verdict, p.verdict_ab,
                   p.verdict_ba, p.p_a, p.p_a_ab, p.p_a_ba, p.confidence_ab, p.confidence_ba,
                   length(p.response_a), length(p.response_b),
                   (CASE WHEN p.consistent = false THEN {INCONSISTENT} ELSE 0 END)
                   + (CASE WHEN p.shortcut_ab OR p.shortcut_ba THEN {SHORTCUT} ELSE 0 END)
                   + (CASE WHEN p.verdict IN ('error', 'dropped') THEN {JUDGE_ERROR} ELSE 0 END)
                   + (CASE WHEN i.kind = 'error' THEN {ERROR_ROW} ELSE 0 END)
                   + coalesce({flag_sql if t.has_samples else '0'}, 0){groups}
            FROM items i
            LEFT JOIN pairs p ON i.kind = 'pair' AND p.id = i.id
            {"LEFT JOIN fl ON fl.pair_id = p.id" if t.has_samples else ""}
            {human_join}
            ORDER BY i.pos""")
        cols = list(zip(*rows)) if rows else [()] * (16 + len(self.group_columns))
        out = {
            "id": list(cols[1]), "row": list(cols[2]),
            "label": Coded.of(cols[3]).as_json(), "human": Coded.of(cols[4]).as_json(),
            "verdict": Coded.of(cols[5]).as_json(), "verdict_ab": Coded.of(cols[6]).as_json(),
            "verdict_ba": Coded.of(cols[7]).as_json(),
            "p_a": [_round(x) for x in cols[8]], "p_a_ab": [_round(x) for x in cols[9]],
            "p_a_ba": [_round(x) for x in cols[10]],
            "confidence_ab": [_round(x) for x in cols[11]],
            "confidence_ba": [_round(x) for x in cols[12]],
            "len_a": list(cols[13]), "len_b": list(cols[14]), "flags": list(cols[15]),
            "groups": [{"name": c, **Coded.of(cols[16 + k]).as_json()}
                       for k, c in enumerate(self.group_columns)],
        }
        return out

    # -- one item's details -----------------------------------------------------------------
    def detail_rows(self) -> Iterator[bytes]:
        """One JSON object per item, in order (the keys are the page's, never data's: columns
        of the input travel as [name, value] pairs, so no name can become a property). Pairs
        and their samples are read as two streams sorted by position and joined here, each
        object written by orjson: faster than DuckDB's own JSON functions (`json_object`, a
        sorted `list` of `json_array`), which `benchmarks/bench_view.py --compare` times."""
        t = self.t
        extras = "".join(f", CAST(p.{quote_ident(c)} AS VARCHAR)" for c in self.extra_columns)
        errors = ("LEFT JOIN errors e ON i.kind = 'error' AND e.row_number = i.rn"
                  if t.has_errors else "")
        error_cols = "e.reason, e.raw, e.run_id" if t.has_errors else "NULL, NULL, NULL"
        cols = ", ".join(f"p.{quote_ident(c)}" for c in DETAIL_PAIR_FIELDS.values())
        pairs = t.con.cursor()
        pairs.execute(f"""
            SELECT i.pos, i.kind, i.id, i.rn, {error_cols}, {cols}
                   {extras}
            FROM items i LEFT JOIN pairs p ON i.kind = 'pair' AND p.id = i.id {errors}
            ORDER BY i.pos""")
        samples = None
        if t.has_samples:
            fields = ", ".join(f"s.{quote_ident(f)}" for f in SAMPLE_FIELDS)
            samples = t.con.cursor()
            samples.execute(f"""
                SELECT i.pos, {fields} FROM samples s
                JOIN items i ON i.kind = 'pair' AND i.id = s.pair_id
                ORDER BY i.pos, s."order", s.stage DESC, s.idx""")
        pending = self._rows(samples) if samples is not None else iter(())
        nxt = next(pending, None)
        n_fixed = 7 + len(DETAIL_PAIR_FIELDS)
        for row in self._rows(pairs):
            pos, kind, pid, rn, reason, raw, err_run = row[:7]
            own = []
            while nxt is not None and nxt[0] == pos:
                own.append(nxt[1:])
                nxt = next(pending, None)
            if kind == "error":
                yield orjson.dumps({"kind": "error", "id": pid, "row": rn,
                                    "error": {"reason": reason, "raw": raw, "run": err_run}},
                                   default=str)
                continue
            d = dict(zip(DETAIL_PAIR_FIELDS, row[7:n_fixed]))
            d["messages"] = d["messages"] if d["messages"] is None else str(d["messages"])
            for k in FLOAT_FIELDS:
                d[k] = _round(d[k], 6)
            d.update(kind="pair", slot_key=slot_key(d["a"], d["b"]),
                     columns=[[c, v] for c, v in zip(self.extra_columns, row[n_fixed:])],
                     samples=[[*s[:5], _round(s[5], 6), *s[6:13], _round(s[13], 6)]
                              for s in own])
            yield orjson.dumps(d, default=str)

    @staticmethod
    def _rows(cur) -> Iterator[tuple]:
        while True:
            rows = cur.fetchmany(FETCH_ROWS)
            if not rows:
                return
            yield from rows

    # -- full-text search ---------------------------------------------------------------------
    def search_texts(self) -> Iterator[str]:
        """Per item, the conversation's turns and both responses, lower-cased (error rows: the
        reason and the raw row)."""
        t = self.t
        error_join = ("LEFT JOIN errors e ON i.kind = 'error' AND e.row_number = i.rn"
                      if t.has_errors else "")
        error_text = ("coalesce(e.reason, '') || ' ' || coalesce(e.raw, '')"
                      if t.has_errors else "''")
        query = f"""
            SELECT lower(CASE WHEN i.kind = 'pair' THEN
                coalesce(array_to_string(
                    TRY_CAST(json_extract_string(p.messages, '$[*].content') AS VARCHAR[]), ' '),
                         p.prompt, '')
                || ' ' || coalesce(p.response_a, '') || ' ' || coalesce(p.response_b, '')
              ELSE {error_text} END)
            FROM items i
            LEFT JOIN pairs p ON i.kind = 'pair' AND p.id = i.id
            {error_join}
            ORDER BY i.pos"""
        yield from self._stream(query)

    def _stream(self, query: str) -> Iterator[str]:
        for (v,) in self._rows(self.t.con.execute(query)):
            yield v
