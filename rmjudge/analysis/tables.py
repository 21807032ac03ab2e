"""Open a judged output for reading: a `.duckdb` run store, or the Parquet/JSONL exports
(`x.parquet` + `x.samples.parquet`, `x.jsonl` + `x.samples.jsonl`).

`open_judged(path)` returns a `JudgedTable` whose in-memory DuckDB connection has views `pairs`,
`samples` (when the samples were kept), `errors` (the rows that could not be judged, when the
store or the `x.errors.*` sidecar holds them) and `greedy` (when `rmjudge eval --greedy-baseline`
stored one), with the store's column types whatever the file format, so every analysis is plain
SQL.
"""

from __future__ import annotations

from rmjudge.core.errors import UserError

import os
from dataclasses import dataclass, field

import duckdb

from rmjudge.core.sql import quote_ident, sql_literal
from rmjudge.files import StoreBusyError, check_not_busy, output_format, sidecar, store_path
from rmjudge.store import ERROR_COLUMNS, GREEDY_COLUMNS, PAIR_COLUMNS, SAMPLE_COLUMNS

REQUIRED = ("id", "verdict", "verdict_ab", "verdict_ba", "consistent", "p_a", "label")
_TYPES = {c: t.split()[0] for c, t in PAIR_COLUMNS + SAMPLE_COLUMNS + GREEDY_COLUMNS
          + ERROR_COLUMNS}


class TableError(UserError):
    """The path is not a judged table that can be read; the message says how to fix it."""


def _reader(path: str, fmt: str) -> str:
    if fmt == "parquet":
        return f"read_parquet({sql_literal(path)})"
    return f"read_json_auto({sql_literal(path)}, format='newline_delimited')"


@dataclass
class JudgedTable:
    path: str
    con: duckdb.DuckDBPyConnection
    fmt: str
    tables: set[str] = field(default_factory=set)
    pair_columns: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    # pairs column -> its type in the file (the view reads passthrough columns as VARCHAR)
    source_types: dict[str, str] = field(default_factory=dict)

    @property
    def has_samples(self) -> bool:
        return "samples" in self.tables

    @property
    def has_errors(self) -> bool:
        return "errors" in self.tables

    @property
    def has_greedy(self) -> bool:
        return "greedy" in self.tables

    @property
    def passthrough(self) -> list[str]:
        core = {c for c, _ in PAIR_COLUMNS}
        return [c for c in self.pair_columns if c not in core]

    def sql(self, query: str, params: list | None = None) -> list[tuple]:
        return self.con.execute(query, params or []).fetchall()

    def one(self, query: str, params: list | None = None) -> tuple:
        return self.con.execute(query, params or []).fetchone()

    def count_labelled(self) -> int:
        return self.one("SELECT count(*) FROM pairs WHERE label IN ('A', 'B')")[0]

    def group_columns(self, wanted: list[str] | None = None) -> list[str]:
        """Passthrough columns to break results down by: `source`/`subset` when present and
        not constant, or the columns asked for."""
        if wanted:
            missing = [c for c in wanted if c not in self.pair_columns]
            if missing:
                raise TableError(
                    f"{self.path} has no column {', '.join(map(repr, missing))} to group by; "
                    f"its passthrough columns are: {', '.join(self.passthrough) or 'none'}")
            return list(wanted)
        out = []
        for c in ("source", "subset"):
            if c in self.pair_columns:
                n = self.one(f"SELECT count(DISTINCT {quote_ident(c)}) FROM pairs")[0]
                if n > 1:
                    out.append(c)
        return out

    def runs(self) -> list[dict]:
        """The store's `runs` rows (one per `rmjudge score` run: model, input, settings...),
        oldest first; empty for an export whose working store is gone."""
        db = {"duckdb": "judged"}.get(self.fmt, "work")
        present = self.one("SELECT count(*) FROM duckdb_tables() WHERE database_name = ? "
                           "AND table_name = 'runs'", [db])[0]
        if not present:
            return []
        cur = self.con.execute(f"SELECT * FROM {db}.runs ORDER BY run_id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def refresh(self, name: str) -> None:
        """Re-read one table (after the store added rows to it), as `open_judged` does."""
        self.con.execute(f"DROP VIEW IF EXISTS {name}")
        if self.fmt == "duckdb":
            self.con.execute("DETACH DATABASE IF EXISTS judged")
            self.con.execute(f"ATTACH {sql_literal(self.path)} AS judged (READ_ONLY)")
            for t in sorted(self.tables | {name}):
                self.con.execute(f"DROP VIEW IF EXISTS {t}")
                _typed_view(self.con, t, f"judged.{t}")
        else:
            _typed_view(self.con, name, _reader(sidecar(self.path, name), self.fmt))
        self.tables.add(name)

    def release(self) -> None:
        """Let go of a DuckDB file so the store can write to it (`refresh` reopens it)."""
        if self.fmt == "duckdb":
            self.con.execute("DETACH DATABASE IF EXISTS judged")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "JudgedTable":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_KNOWN = {"pairs": PAIR_COLUMNS, "samples": SAMPLE_COLUMNS, "greedy": GREEDY_COLUMNS,
          "errors": ERROR_COLUMNS}


def is_nested_type(t: str) -> bool:
    """A DuckDB list, struct or map type (`INTEGER[]`, `STRUCT(...)`, `MAP(...)`)."""
    return t.endswith("]") or t.startswith(("STRUCT", "MAP"))


def _typed_view(con: duckdb.DuckDBPyConnection, name: str, source: str,
                types: dict[str, str] | None = None) -> list[str]:
    """A view over `source` with the store's column types (JSON exports lose some); a known
    column the file lacks (older or hand-edited stores) reads as NULL instead of failing every
    query that names it. Other columns read as VARCHAR (nested values as JSON text); their
    types in the file go to `types`."""
    described = [(r[0], r[1]) for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()]
    cols = [c for c, _ in described]
    if types is not None:
        types.update(described)
    exprs = []
    for c, have in described:
        t = _TYPES.get(c, "VARCHAR")
        if t == "VARCHAR" and is_nested_type(have):
            exprs.append(f"CAST(to_json({quote_ident(c)}) AS VARCHAR) AS {quote_ident(c)}")
            continue
        exprs.append(f"TRY_CAST({quote_ident(c)} AS {t}) AS {quote_ident(c)}")
    have = {c.lower() for c in cols}
    for c, t in _KNOWN.get(name, []):
        if c.lower() not in have:
            exprs.append(f"CAST(NULL AS {t.split()[0]}) AS {quote_ident(c)}")
    con.execute(f"CREATE VIEW {name} AS SELECT {', '.join(exprs)} FROM {source}")
    return cols


BUSY = "{who} is writing {path}; wait for it to finish, then read it again"


def _check_not_busy(path: str) -> None:
    """StoreBusyError (exit 3) when an rmjudge process holds the lock of `path` or of the
    working store of a Parquet/JSONL export being written. A lock file that cannot be opened
    (a read-only folder) proves nothing: DuckDB's own lock still guards the read."""
    for p in dict.fromkeys((path, store_path(path))):
        try:
            check_not_busy(p)
        except StoreBusyError:
            raise StoreBusyError(BUSY.format(who="another rmjudge process", path=path)) from None
        except UserError:
            pass


def open_judged(path: str) -> JudgedTable:
    """Open a judged output read-only; raise TableError with the fix when it is not one."""
    _check_judged_path(path)
    _check_not_busy(path)
    fmt = output_format(path)
    con = duckdb.connect(":memory:")
    tables: set[str] = set()
    meta: dict = {}
    types: dict[str, str] = {}
    try:
        if fmt == "duckdb":
            src_cols = _attach_store(con, path, tables, meta, types)
        else:
            src_cols = _attach_export(con, path, fmt, tables, meta, types)
        cols = [r[0] for r in con.execute("DESCRIBE pairs").fetchall()]
        missing = [c for c in REQUIRED if c not in src_cols]
        if missing:
            raise TableError(
                f"{path} is not a judged table (no column {', '.join(missing)}): run "
                f"`rmjudge score {path}` to judge it first")
    except BaseException:
        con.close()
        raise
    return JudgedTable(path, con, fmt, tables, cols, meta, types)


def _check_judged_path(path: str) -> None:
    """TableError with the fix when `path` names no judged output file."""
    if path.endswith(":") or (":" in os.path.basename(path) and not os.path.exists(path)):
        raise TableError(f"{path}: give the judged output file itself (x.duckdb, x.parquet or "
                         "x.jsonl), not a table inside it")
    if not os.path.exists(path):
        raise TableError(f"no judged table at {path}: run `rmjudge score INPUT -o {path}` "
                         "first, or check the path")
    if os.path.isdir(path):
        raise TableError(f"{path} is a directory; give the judged output file")


def _attach_store(con, path: str, tables: set[str], meta: dict,
                  types: dict[str, str]) -> list[str]:
    """Views of a DuckDB run store's tables (filling `tables`, `meta` and `types`); the
    columns of its pairs table."""
    try:
        con.execute(f"ATTACH {sql_literal(path)} AS judged (READ_ONLY)")
    except duckdb.Error as exc:
        msg = str(exc).splitlines()[0]
        if "lock" in msg.lower() or "different configuration" in msg.lower():
            raise StoreBusyError(BUSY.format(
                who="another process (it holds the DuckDB file's lock)", path=path)
            ) from None
        raise TableError(f"cannot open {path}: {msg} (is it a DuckDB file written by "
                         "rmjudge score?)") from None
    present = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = 'judged'").fetchall()}
    if "pairs" not in present:
        raise TableError(f"{path} has no `pairs` table, so it is not a judged output: "
                         "run `rmjudge score INPUT` to make one")
    for t in ("pairs", "samples", "greedy", "errors"):
        if t in present:
            got = _typed_view(con, t, f"judged.{t}", types if t == "pairs" else None)
            if t == "pairs":
                src_cols = got
            tables.add(t)
    if "samples" in tables and con.execute("SELECT count(*) FROM samples").fetchone()[0] \
            == 0 and con.execute("SELECT count(*) FROM pairs").fetchone()[0] > 0:
        tables.discard("samples")  # judged pairs without samples (a jury): none to read
    if "meta" in present:
        import orjson

        for k, v in con.execute("SELECT key, value FROM judged.meta").fetchall():
            try:
                meta[k] = orjson.loads(v)
            except orjson.JSONDecodeError:
                meta[k] = v
    return src_cols


def _attach_export(con, path: str, fmt: str, tables: set[str], meta: dict,
                   types: dict[str, str]) -> list[str]:
    """Views of a Parquet/JSONL export and its side files, with the settings of its working
    store when it is still there (filling `tables`, `meta` and `types`); the columns of its
    pairs."""
    try:
        src_cols = _typed_view(con, "pairs", _reader(path, fmt), types)
    except duckdb.Error as exc:
        raise TableError(f"cannot read {path} as {fmt}: "
                         f"{str(exc).splitlines()[0]}") from None
    tables.add("pairs")
    for t in ("samples", "greedy", "errors"):
        side = sidecar(path, t)
        if os.path.exists(side):
            _typed_view(con, t, _reader(side, fmt))
            tables.add(t)
    work = store_path(path)
    if os.path.exists(work):
        try:
            con.execute(f"ATTACH {sql_literal(work)} AS work (READ_ONLY)")
            import orjson

            for k, v in con.execute("SELECT key, value FROM work.meta").fetchall():
                meta[k] = orjson.loads(v)
        except (duckdb.Error, ValueError):
            pass
    return src_cols


def is_judged(path: str) -> bool:
    """True when `path` looks like an output of `rmjudge score` (not an input to judge)."""
    from rmjudge.io.readers import split_duckdb_source

    if path == "-" or split_duckdb_source(path) or path.lower().endswith(".csv"):
        return False
    if output_format(path) == "duckdb":
        return True
    if not os.path.exists(path):
        return False
    con = duckdb.connect(":memory:")
    try:
        cols = {r[0] for r in con.execute(
            f"DESCRIBE SELECT * FROM {_reader(path, output_format(path))}").fetchall()}
    except duckdb.Error:
        return False
    finally:
        con.close()
    return {"verdict", "verdict_ab", "p_a"} <= cols
