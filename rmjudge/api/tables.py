"""A judged store as pandas DataFrames: the result table of `rmjudge.score` (and of each chunk
`rmjudge.score_batches` yields) and `rmjudge.open_store`'s tables.

The result table has one row per input row, in input order: the store's `pairs` columns (the
verdicts, vote shares, consistency, the prompt and responses, the input's own columns), with
per pair `generations` (its generations), `parse_failures` (those with no verdict of their own)
and `forced` (verdicts read from the logits), and the error rows (input rows that could not be
judged) with their reason in `error` (None for judged pairs) and no verdict. It is one query
(`result_query`), run on the finished store or, while a run holds it, on the run's connection
(`rmjudge.store.Store.read`). Columns DuckDB holds as JSON (`messages`, nested input columns)
come back as Python lists and dicts.

Reading needs pandas (the `notebook` extra); the store is opened read-only and let go before the
call returns, so a later run can resume it.
"""

from __future__ import annotations

import os
from typing import Any

from rmjudge.core.errors import UserError

DROPPED = ("content_hash",)  # bookkeeping of resumes, not a result


def require_pandas():
    """pandas, or a MissingExtraError with the install command."""
    from rmjudge.core.extras import require

    require("rmjudge's Python API (tables as pandas DataFrames)", "notebook", ("pandas",))
    import pandas

    return pandas


def result_query(db: str = "", chunk: bool = False) -> str:
    """The result table over the tables of schema `db` ("" or "judged."); `chunk`: only the
    pairs and error rows named by two list parameters (ids, row numbers)."""
    where_p = " WHERE p.id IN (SELECT unnest(?::VARCHAR[]))" if chunk else ""
    where_e = " WHERE e.row_number IN (SELECT unnest(?::BIGINT[]))" if chunk else ""
    drop = ", ".join(DROPPED)
    return f"""
        WITH s AS (
            SELECT pair_id, count(*) AS generations,
                   count(*) FILTER (WHERE verdict_source IS DISTINCT FROM 'generated')
                       AS parse_failures,
                   count(*) FILTER (WHERE verdict_source = 'forced') AS forced
            FROM {db}samples GROUP BY pair_id)
        SELECT p.* EXCLUDE ({drop}), s.generations, s.parse_failures, s.forced,
               CAST(NULL AS VARCHAR) AS error
        FROM {db}pairs p LEFT JOIN s ON s.pair_id = p.id{where_p}
        UNION ALL BY NAME
        SELECT e.row_number, e.id, e.run_id, e.reason AS error FROM {db}errors e{where_e}
        ORDER BY row_number"""


def frame(result) -> Any:
    """A DuckDB result as a DataFrame, JSON columns as Python values and counts as integers
    (0 for a pair without samples: a jury verdict; None on error rows)."""
    import orjson

    pd = require_pandas()
    json_cols = [d[0] for d in result.description if str(d[1]).upper() == "JSON"]
    df = result.df()
    for col in json_cols:
        df[col] = [orjson.loads(v) if isinstance(v, str) else v for v in df[col]]
    if "error" in df.columns:
        judged = df["error"].isna()
        for col in ("generations", "parse_failures", "forced"):
            if col in df.columns:
                df[col] = df[col].where(~judged, df[col].fillna(0)).astype(pd.Int64Dtype())
    return df


def read_result(con, db: str = "") -> Any:
    """The whole result table of the store `con` reads as schema `db`."""
    return frame(con.execute(result_query(db)))


def chunk_result(store, ids: list[str], rows: list[int]) -> Any:
    """The result table of one committed chunk, read on the run's own store connection."""
    return frame(store.read(result_query(chunk=True), [ids, rows]))


class TableOpenError(UserError):
    """A path that is not a judged store or export; the message names the fix."""


def open_store(path: str | os.PathLike) -> "JudgedStore":
    """The tables of a judged store (a `.duckdb` run store, or a `.parquet`/`.jsonl` export),
    read-only: `.pairs`, `.samples`, `.errors`, `.runs`, `.rankings` (a store of `rmjudge
    rank`) and `.results` (the table `score` returns), each a pandas DataFrame; `.sql(query)`
    for any read-only query over every table the store holds. Raises a UserError naming the
    fix when `path` is not a judged output or another process is writing it."""
    from rmjudge.analysis.tables import open_judged
    from rmjudge.files import output_format, store_path

    require_pandas()
    if not isinstance(path, (str, os.PathLike)):
        from rmjudge.analysis.tables import TableError

        raise TableError(f"open_store reads a judged store's path, not a {type(path).__name__}: "
                         "give the .duckdb store (or its .parquet/.jsonl export)")
    path = os.fspath(path)
    work = store_path(path)
    # a Parquet/JSONL export is read from the run store behind it while that is there
    store = path if output_format(path) == "duckdb" else (work if os.path.exists(work) else None)
    open_judged(store or path).close()  # refuses what is not a judged output
    return JudgedStore(path, store)


def _empty_views(table, present: set[str]) -> None:
    """An empty view, with the store's columns, of each table in EMPTY_WHEN_MISSING that
    `present` lacks (an export without its run store has no `runs`; a store of `score` no
    `rankings`), so a query naming it reads no rows instead of failing."""
    from rmjudge.store import ERROR_COLUMNS, RANKING_COLUMNS, RUN_COLUMNS, SAMPLE_COLUMNS

    for name, cols in (("errors", ERROR_COLUMNS), ("runs", RUN_COLUMNS),
                       ("samples", SAMPLE_COLUMNS), ("rankings", RANKING_COLUMNS)):
        if name not in present:
            body = ", ".join(f"CAST(NULL AS {t.split()[0]}) AS \"{c}\"" for c, t in cols)
            table.con.execute(f"DROP VIEW IF EXISTS {name}")
            table.con.execute(f"CREATE VIEW {name} AS SELECT {body} WHERE false")


class JudgedStore:
    """The tables of a judged store (`open_store`), read-only: `pairs`, `samples`,
    `errors`, `runs`, `rankings` (each a DataFrame, read on first use) and `results` (the
    table `rmjudge.score` returns). Each read opens the file read-only and lets it go, so a run
    may resume the store in between; `sql(query)` runs any read-only query over every table
    of the store (`tables` names them)."""

    def __init__(self, path: str, store: str | None):
        self.path = path
        self.store = store  # the DuckDB run store behind `path`, None for a bare export
        self._cache: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"JudgedStore({self.path!r})"

    def _connect(self):
        """An in-memory DuckDB with a view of every table of the store (pairs, samples,
        errors, runs, rankings, and any other it holds); the tables a store or export lacks
        among `EMPTY_WHEN_MISSING` are empty views with their columns."""
        from rmjudge.analysis.tables import open_judged
        from rmjudge.core.sql import quote_ident, sql_literal
        from rmjudge.files import sidecar

        if self.store is not None:
            table = open_judged(self.store)
            present = [r[0] for r in table.con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'judged' "
                "ORDER BY table_name").fetchall()]
            for t in present:
                table.con.execute(f"DROP VIEW IF EXISTS {quote_ident(t)}")
                table.con.execute(f"CREATE VIEW {quote_ident(t)} AS SELECT * FROM "
                                  f"judged.{quote_ident(t)}")
            _empty_views(table, set(present))
            return table
        table = open_judged(self.path)  # an export whose run store is gone: pairs, samples
        fmt = table.fmt
        reader = "read_parquet" if fmt == "parquet" else "read_json_auto"
        errors = sidecar(self.path, "errors")
        if os.path.exists(errors) and "errors" not in table.tables:
            table.con.execute(f"CREATE VIEW errors AS SELECT * FROM {reader}"
                              f"({sql_literal(errors)})")
            table.tables.add("errors")
        _empty_views(table, table.tables)
        return table

    @property
    def tables(self) -> list[str]:
        """The names of the tables `sql` can query, in alphabetical order."""
        table = self._connect()
        try:
            return sorted(r[0] for r in table.con.execute(
                "SELECT view_name FROM duckdb_views() WHERE NOT internal AND database_name = "
                "current_database()").fetchall())
        finally:
            table.close()

    def _read(self, name: str, query: str) -> Any:
        if name not in self._cache:
            table = self._connect()
            try:
                self._cache[name] = frame(table.con.execute(query))
            finally:
                table.close()
        return self._cache[name]

    @property
    def pairs(self):
        """One row per judged pair (docs/scoring.md lists the columns)."""
        return self._read("pairs", "SELECT * FROM pairs ORDER BY row_number")

    @property
    def samples(self):
        """One row per generation: rollouts and reflections, with their text and verdict."""
        return self._read("samples", 'SELECT * FROM samples ORDER BY pair_id, "order", stage, '
                          "idx")

    @property
    def errors(self):
        """One row per input row that could not be judged, with the reason."""
        return self._read("errors", "SELECT * FROM errors ORDER BY row_number")

    @property
    def runs(self):
        """One row per run into the store: version, model, settings, input, status."""
        return self._read("runs", "SELECT * FROM runs ORDER BY run_id")

    @property
    def rankings(self):
        """A ranked store's (`rmjudge rank`): one row per prompt and candidate, its rank, score
        and record (docs/rank.md); empty, with these columns, for a store of `score`."""
        return self._read("rankings", "SELECT * FROM rankings ORDER BY input_row, prompt_id, "
                          "rank, candidate")

    @property
    def results(self):
        """The table `rmjudge.score` returns: pairs and error rows in input order."""
        return self._read("results", result_query())

    def sql(self, query: str, params: list | None = None):
        """A read-only query over the store's tables (`tables`), as a DataFrame."""
        table = self._connect()
        try:
            return frame(table.con.execute(query, params or []))
        finally:
            table.close()
