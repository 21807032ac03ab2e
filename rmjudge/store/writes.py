"""The writes of an open run store besides its runs and settings (`Store`,
rmjudge/store/run_store.py, is made of them, of its reads, rmjudge/store/reads.py, and of what
opens, checks and closes it): the passthrough columns (the input-key -> column map kept in
`meta`, typed and widened as values arrive), a chunk of judged pairs with their samples and
error rows (`commit`), the greedy baseline, the rankings, error rows dropped and human labels.
Each write is one transaction through `Store.write`."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable

import orjson

from rmjudge.core.sql import quote_ident
from rmjudge.judging.protocol import PairResult, Sample
from rmjudge.store.bulk import delete_in, insert_rows
from rmjudge.store.schema import (CORE_LOWER, ERROR_COLUMNS, GREEDY_COLUMNS, HUMAN_LABEL_COLUMNS,
                                  PAIR_COLUMNS, RANKING_COLUMNS, SAMPLE_COLUMNS, cell, ddl,
                                  human_labels_ddl, names, type_for, value_kind, wider)


class StoreWrites:
    """What `Store` writes: `self.con`, `self.write`, `self.pair_columns`, `self._columns_map`
    and `self._types` are the open store's."""

    # -- writes -----------------------------------------------------------------------------
    def column_for(self, key: str) -> str:
        """The `pairs` column that holds input key `key` (assigned once, kept in meta)."""
        if key in self._columns_map:
            return self._columns_map[key]
        taken = {c.lower() for c in self.pair_columns} | {c.lower() for c in self._columns_map.values()}
        if key.lower() in CORE_LOWER or not key.strip():
            base = f"input_{key.strip()}" if key.strip() else "input_column"
        else:
            base = key
        if key in self.pair_columns and key.lower() not in CORE_LOWER \
                and key not in self._columns_map.values():
            col = key  # a store from an older version already holds this column
        elif base in self.pair_columns and base not in self._columns_map.values():
            col = base
        else:
            col, i = base, 2
            while col.lower() in taken:
                col = f"{base}_{i}"
                i += 1
        self._columns_map[key] = col
        return col

    def add_columns(self, names: Iterable[str] | dict[str, str], con=None) -> None:
        """Add passthrough columns to `pairs` (within the caller's transaction): a list of
        names (VARCHAR) or a {name: type} dict."""
        con = con or self.con
        typed = names if isinstance(names, dict) else {n: "VARCHAR" for n in names}
        have = {c.lower() for c in self.pair_columns}
        for name, typ in typed.items():
            if name.lower() not in have:
                con.execute(f"ALTER TABLE pairs ADD COLUMN {quote_ident(name)} {typ}")
                self.pair_columns.append(name)
                self._types[name] = typ
                have.add(name.lower())

    def column_map(self) -> dict[str, str]:
        """The input-key -> `pairs` column map (a copy), in the order the keys were met."""
        return dict(self._columns_map)

    def adopt_columns(self, mapping: dict[str, str], types: dict[str, str], con=None) -> None:
        """Take over the passthrough columns of another store of the same run (a Ray batch
        judged again): its input-key -> column map and the columns' types, so the rows copied
        from it land in the same columns (within the caller's transaction when `con` is
        given)."""
        for key, col in mapping.items():
            self._columns_map.setdefault(key, col)
        con = con or self.con
        self.add_columns({c: types.get(c, "VARCHAR") for c in mapping.values()}, con)
        con.execute("INSERT OR REPLACE INTO meta VALUES ('passthrough', ?)",
                    [orjson.dumps(self._columns_map).decode()])

    def column_type(self, col: str) -> str | None:
        """The type of the `pairs` column `col` (None when there is no such column)."""
        return self._types.get(col)

    def save_column_map(self, con) -> None:
        """Record the input-key -> column map in `meta` (within the caller's transaction)."""
        con.execute("INSERT OR REPLACE INTO meta VALUES ('passthrough', ?)",
                    [orjson.dumps(self._columns_map).decode()])

    def widen(self, con, col: str, typ: str) -> None:
        """Widen the `pairs` column `col` to `typ` (within the caller's transaction)."""
        con.execute(f"ALTER TABLE pairs ALTER COLUMN {quote_ident(col)} SET DATA TYPE {typ}")
        self._types[col] = typ

    def _typed_values(self, extra: dict[str, str], results: list[PairResult]):
        """Per passthrough column: its type (new columns: from the values; a value that does
        not fit widens the column: BIGINT -> DOUBLE -> VARCHAR, anything -> VARCHAR) and the
        values converted for it. Returns ({column: type to add}, {column: type to widen to},
        [[values per row]])."""
        new: dict[str, str] = {}
        widen: dict[str, str] = {}
        columns = []
        for col, key in extra.items():
            values = [res.pair.extra.get(key) for res in results]
            have = self._types.get(col)
            kinds = {value_kind(v) for v in values if v is not None}
            want = type_for(kinds) if kinds else None
            if have is None:
                have = want or "VARCHAR"
                new[col] = have
            elif want is not None and wider(have, want) != have:
                have = wider(have, want)
                widen[col] = have
            columns.append([cell(v, have) for v in values])
        return new, widen, [list(r) for r in zip(*columns)] if columns else [[] for _ in results]

    def commit(self, results: list[PairResult], errors: list[dict],
               replaced: Iterable[str] = ()) -> None:
        """Write a chunk of judged pairs and error rows in one transaction; the pairs (and their
        samples) with the ids in `replaced` are dropped in it first (a changed row judged
        again: see `rmjudge.io.intake`)."""
        replaced = list(dict.fromkeys(replaced))
        keys: list[str] = []
        for res in results:
            for k in res.pair.extra:
                if k not in keys:
                    keys.append(k)
        before = dict(self._columns_map)
        types_before = dict(self._types)
        extra = {self.column_for(k): k for k in keys}  # output column -> input key
        cols = names(PAIR_COLUMNS) + list(extra)
        new, widen, cells = self._typed_values(extra, results)
        rows, samples = [], []
        for res, more in zip(results, cells):
            rows.append(self._pair_row(res) + more)
            for o in res.orders.values():
                samples.extend(self._sample_row(s) for s in o.samples)
        map_changed = self._columns_map != before
        n_cols = len(self.pair_columns)

        def statements(con) -> None:
            # the columns change first: DuckDB before 2.0 refuses to insert a key deleted
            # earlier in the transaction once the table was altered after the delete
            self.add_columns(new, con)
            for col, typ in widen.items():
                self.widen(con, col, typ)
            if map_changed:
                con.execute("INSERT OR REPLACE INTO meta VALUES ('passthrough', ?)",
                            [orjson.dumps(self._columns_map).decode()])
            if replaced:
                delete_in(con, "samples", "pair_id", replaced, "VARCHAR")
                delete_in(con, "pairs", "id", replaced, "VARCHAR")
            insert_rows(con, "pairs", rows, cols)
            insert_rows(con, "samples", samples, names(SAMPLE_COLUMNS))
            insert_rows(con, "errors", [[e["row_number"], e.get("id"), e["reason"], e.get("raw"),
                                         self.run_id] for e in errors], names(ERROR_COLUMNS),
                        replace=True)
            # a row judged now supersedes an earlier failure of the same row
            delete_in(con, "errors", "row_number", [r[1] for r in rows], "BIGINT")

        try:
            self.write(statements)
        except BaseException:  # nothing of this chunk was kept: forget its columns too
            self._columns_map = before
            self._types = types_before
            del self.pair_columns[n_cols:]
            self.pair_columns = self._columns("pairs")
            raise

    def _pair_row(self, res: PairResult) -> list[Any]:
        p = res.pair
        ab, ba = res.orders.get("ab"), res.orders.get("ba")
        return [
            p.id, p.row_number, res.verdict, res.letter("ab"), res.letter("ba"), res.consistent,
            res.p_a, _share_a(ab, "ab"), _share_a(ba, "ba"), p.label, res.correct,
            ab.shortcut if ab else None, ba.shortcut if ba else None, res.policy,
            ab.confidence if ab else None, ba.confidence if ba else None,
            ab.n_rollouts if ab else None, ba.n_rollouts if ba else None,
            p.messages[-1]["content"], orjson.dumps(list(p.messages)).decode(),
            p.response_a, p.response_b, self.run_id, p.content_hash(),
        ]

    @staticmethod
    def _sample_row(s: Sample) -> list[Any]:
        return [s.pair_id, s.order, s.stage, s.idx, s.text, s.prediction, s.confidence,
                s.is_anchor, s.reflection_of, s.reflection_slot, s.won_reflection,
                s.verdict_source, s.tokens, s.finish_reason, s.p_first]

    # -- greedy baseline --------------------------------------------------------------------
    def add_greedy(self, rows: list[list]) -> None:
        """Store greedy-baseline rows (replacing the same pair and order)."""
        def statements(con) -> None:
            con.execute(ddl("greedy", GREEDY_COLUMNS, ', PRIMARY KEY (pair_id, "order")'))
            insert_rows(con, "greedy", rows, names(GREEDY_COLUMNS), replace=True)

        self.write(statements)

    # -- human labels -----------------------------------------------------------------------
    def set_rankings(self, rows: list[list[Any]]) -> None:
        """Replace the `rankings` table (RANKING_COLUMNS, one row per prompt and candidate) with
        `rows`, in one transaction."""
        def statements(con) -> None:
            con.execute(ddl("rankings", RANKING_COLUMNS, ", PRIMARY KEY (prompt_id, candidate)"))
            con.execute("DELETE FROM rankings")
            insert_rows(con, "rankings", rows, names(RANKING_COLUMNS))

        self.write(statements)

    def drop_errors(self, row_numbers: list[int]) -> None:
        """Delete the error rows of these row numbers (input rows that are fine now)."""
        self.write(lambda con: delete_in(con, "errors", "row_number", row_numbers, "BIGINT"))

    def add_human_labels(self, rows: list[tuple[str, str, str, str]]) -> int:
        """Store human labels, rows of (pair_id, reviewer, label A|B|tie, source file), all
        stamped with the same import time; a row for a pair and reviewer already held replaces
        it (the table is created on first use, so older stores take labels too). Returns the
        number of rows replaced."""
        now = datetime.now(timezone.utc)
        replaced = 0

        def statements(con) -> None:
            nonlocal replaced
            con.execute(human_labels_ddl())
            if rows:
                con.execute("CREATE TEMP TABLE IF NOT EXISTS incoming (pair_id VARCHAR, reviewer VARCHAR)")
                con.execute("DELETE FROM incoming")
                insert_rows(con, "incoming", [[r[0], r[1]] for r in rows])
                replaced = con.execute("""SELECT count(*) FROM human_labels h JOIN
                    (SELECT DISTINCT pair_id, reviewer FROM incoming) i
                    USING (pair_id, reviewer)""").fetchone()[0]
                insert_rows(con, "human_labels", [[*r, now] for r in rows],
                            names(HUMAN_LABEL_COLUMNS), replace=True)

        self.write(statements)
        return int(replaced)


def _share_a(o, order: str) -> float | None:
    """Share of one order's final votes that went to A."""
    if o is None or o.vote_share_1 is None:
        return None
    return o.vote_share_1 if order == "ab" else 1.0 - o.vote_share_1
