"""The reads of an open run store (`Store`, rmjudge/store/run_store.py, is made of them, of its
writes, rmjudge/store/writes.py, and of what opens, checks and closes it): the pairs held, for
resume; the counts of a run's summary; read-only queries on the run's connection; and the
Parquet/JSONL exports of its tables."""

from __future__ import annotations

import os
from typing import Any

from rmjudge.core.sql import quote_ident, sql_literal
from rmjudge.files import remove_export, sidecar, write_query_file


class StoreReads:
    """What `Store` reads: `self.con` is the store's open connection."""

    # -- resume -----------------------------------------------------------------------------
    def done_ids(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT id FROM pairs").fetchall()}

    def judged(self) -> dict[str, tuple[int, str | None]]:
        """{pair id: (row number, content hash)} of the pairs held (the hash is None for pairs
        stored by a version before schema 2)."""
        return {r[0]: (r[1], r[2]) for r in self.con.execute(
            "SELECT id, row_number, content_hash FROM pairs").fetchall()}

    # -- queries ----------------------------------------------------------------------------
    def pair_count(self) -> int:
        """Pairs held (all runs)."""
        return self.con.execute("SELECT count(*) FROM pairs").fetchone()[0]

    def summary_counts(self) -> dict[str, Any]:
        """Counts over the whole store, for a run's summary: `pairs`
        (`analysis.counts.pair_counts`), `rollouts` (`sample_counts`), `verdicts`
        ({verdict: pairs}), `generations`, `parse_failures` and `forced` (samples), `errors`
        (error rows)."""
        from rmjudge.core.counts import pair_counts, sample_counts

        q = self.con.execute
        gens, pf, forced = q("""SELECT count(*), count(*) FILTER (WHERE verdict_source IS DISTINCT
                                FROM 'generated'), count(*) FILTER (WHERE verdict_source = 'forced')
                                FROM samples""").fetchone()
        return {
            "pairs": pair_counts(lambda sql, params: q(sql, params).fetchone()),
            "rollouts": sample_counts(lambda sql, params: q(sql, params).fetchone()),
            "verdicts": dict(q("SELECT verdict, count(*) FROM pairs GROUP BY 1 ORDER BY 1")
                             .fetchall()),
            "generations": gens, "parse_failures": pf, "forced": forced,
            "errors": q("SELECT count(*) FROM errors").fetchone()[0],
        }

    def read(self, query: str, params: list | None = None):
        """The result of a read-only `query` over the store's tables, on the run's own
        connection (the streaming Python API reads each committed chunk back with it while the
        run holds the store); a DuckDB result, read with `.fetchall()`, `.df()` or
        `.arrow()`."""
        return self.con.execute(query, params or [])

    # -- export -----------------------------------------------------------------------------
    def export(self, out: str, fmt: str) -> list[str]:
        """Write pairs (and samples, errors) as Parquet or JSONL next to `out`."""
        written = []
        targets = [("pairs", out, "row_number"), ("samples", sidecar(out, "samples"), None),
                   ("errors", sidecar(out, "errors"), "row_number")]
        for table, path, order in targets:
            n = self.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            if table == "errors" and n == 0:
                if os.path.exists(path):
                    remove_export(path)
                continue
            order_by = f" ORDER BY {order}" if order else ""
            select = self._nested_select(table) if fmt == "parquet" else self._finite_select(table)
            write_query_file(self.con, f"SELECT {select} FROM {table}{order_by}", path, fmt)
            written.append(path)
        return written

    def _nested_select(self, table: str) -> str:
        """`*`, with JSON columns as nested Parquet types where their values share a shape."""
        import duckdb

        if table != "pairs":
            return "*"
        swaps = []
        for col, typ in self._columns_types("pairs").items():
            if typ != "JSON":
                continue
            q = quote_ident(col)
            try:
                if col == "messages":
                    shape = '[{"role":"VARCHAR","content":"VARCHAR"}]'
                else:
                    kinds = {r[0] for r in self.con.execute(
                        f"SELECT DISTINCT json_type({q}) FROM pairs WHERE {q} IS NOT NULL").fetchall()}
                    if len(kinds) != 1 or kinds - {"OBJECT", "ARRAY"}:
                        continue
                    shape = self.con.execute(
                        f"SELECT json_group_structure({q}) FROM pairs").fetchone()[0]
                    if not shape or '"JSON"' in shape or "NULL" in shape:
                        continue
                expr = f"from_json({q}, {sql_literal(shape)})"
                self.con.execute(f"SELECT count({expr}) FROM pairs").fetchone()  # converts?
            except duckdb.Error:  # keys that differ only by case, empty keys, ...: keep JSON text
                continue
            swaps.append(f"{expr} AS {q}")
        return f"* REPLACE ({', '.join(swaps)})" if swaps else "*"

    def _finite_select(self, table: str) -> str:
        """`*`, with NaN and infinities as null: JSON has no spelling for them."""
        doubles = [c for c, t in self._columns_types(table).items() if t in ("DOUBLE", "FLOAT")]
        swaps = [f"CASE WHEN isfinite({quote_ident(c)}) THEN {quote_ident(c)} END AS "
                 f"{quote_ident(c)}" for c in doubles]
        return f"* REPLACE ({', '.join(swaps)})" if swaps else "*"

    def _columns_types(self, table: str) -> dict[str, str]:
        return dict(self.con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? AND "
            "database_name = current_database() ORDER BY column_index", [table]).fetchall())
