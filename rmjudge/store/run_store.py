"""`Store`: an open, locked run store, and the queries over it.

A store is a DuckDB file holding `pairs`, `samples`, `errors`, `runs`, `meta` (and `greedy`
once `rmjudge eval --greedy-baseline` ran), with a lock file beside it (`X.lock`):

- One row per input pair in `pairs` (primary key `id`), one row per generation in `samples`,
  one row per unjudgeable input row in `errors` (keyed by row number, so a rerun replaces it).
- Results are committed in small transactions, so `kill -9` loses at most the chunk in flight,
  and a rerun skips the ids already in `pairs`.
- The settings that decide verdicts, and the identity of the input, are kept in `meta`; a rerun
  with other settings or another input is refused with a message naming the differences.
- The lock is taken before anything else, and held until the store closes: a second writer,
  `--overwrite` of a live run, or a merge replacing it are refused (exit code 3).
- Disk full or unwritable outputs become one `DiskError` naming the file; the transaction in
  flight is rolled back, so the store stays consistent and a rerun resumes.

`messages` and passthrough lists/objects are JSON columns (typing: `rmjudge.store.schema`);
exports write JSON columns as nested lists and structs (Parquet) or nested JSON (JSONL). The
input-key -> column map is kept in `meta`, so every commit and resume uses the same names.
Callers read counts through the methods here (`pair_count`, `summary_counts`), never through
`con`.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any, Iterable

import orjson

from rmjudge.core.interrupts import critical, held_calls
from rmjudge.judging.protocol import PairResult, Sample
from rmjudge.core.sql import quote_ident, sql_literal
from rmjudge.store.bulk import delete_in, insert_rows
from rmjudge.files import (Lock, StoreError, busy_export, clean_stale_temps, disk_error, first_line,
                           prepare_dir, remove_export, sidecar, store_path, write_query_file)
from rmjudge.store.ownership import refuse_foreign, remove_files
from rmjudge.store.schema import (
    CORE_LOWER,
    ERROR_COLUMNS,
    GREEDY_COLUMNS,
    HUMAN_LABEL_COLUMNS,
    RANKING_COLUMNS,
    PAIR_COLUMNS,
    RUN_COLUMNS,
    RUNNING,
    SAMPLE_COLUMNS,
    SCHEMA_VERSION,
    cell,
    ddl,
    human_labels_ddl,
    names,
    other_settings_message,
    type_for,
    value_kind,
    wider,
)


DUCKDB_MIN = (1, 4, 2)  # the floor pyproject.toml declares; docs/scoring.md says why


def check_duckdb(version: str) -> None:
    """Refuse a DuckDB older than `DUCKDB_MIN` (installed past pip's check, e.g. with
    --no-deps): DuckDB 1.1 refuses an id deleted and inserted again in one transaction, which
    `--rejudge-changed` does for an edited row that keeps its id, and DuckDB 1.2 and 1.3 crash
    the process (a segmentation fault) exporting a passthrough value nested 400 deep, and
    1.4.0 and 1.4.1 refuse to attach a second judged table in `compare` ("Unique file handle
    conflict")."""
    parts = []
    for p in version.split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits) if digits else 0)
    if tuple(parts) < DUCKDB_MIN:
        raise StoreError(f"rmjudge needs DuckDB {'.'.join(map(str, DUCKDB_MIN))} or later, "
                         f"found {version}: pip install -U 'duckdb>={'.'.join(map(str, DUCKDB_MIN))}'")


class Store:
    """An open, locked run store. `overwrite` empties it first (only when it is rmjudge's own
    and nobody else holds it)."""

    def __init__(self, path: str, *, overwrite: bool = False, exports: list[str] = ()):
        import duckdb

        check_duckdb(duckdb.__version__)
        self.path = path
        prepare_dir(path)
        out = exports[0] if exports else None
        self._lock = Lock(path, busy=None if out is None else busy_export(out, out))
        self._export_locks: list[Lock] = []
        try:
            # the files exported beside this store: another run writes none of them
            for f in exports:
                if os.path.abspath(store_path(f)) != os.path.abspath(path):
                    self._export_locks.append(Lock(store_path(f), busy=busy_export(f, out)))
            refuse_foreign(path)
            # temporaries left by a run killed while exporting, or by a killed `merge` into
            # this store: their locks are ours now
            for f in [path, *exports]:
                clean_stale_temps(f)
            if overwrite:
                remove_files(path)
            try:
                self.con = held_calls(duckdb.connect(path))  # Ctrl-C: after a query
            except duckdb.Error as exc:
                raise disk_error(path, exc) or StoreError(
                    f"cannot open {path} as DuckDB: {first_line(exc)}") from None
            try:
                self._create_tables()
            except BaseException:
                self.con.close()
                raise
        except BaseException:
            self._release_locks()
            raise
        self.pair_columns = self._columns("pairs")
        self._columns_map: dict[str, str] = self.meta("passthrough") or {}
        if "content_hash" in {c.lower() for c in self._columns_map.values()}:
            self.close()
            raise StoreError(f"{path} was made by an older version and holds an input column "
                             "named content_hash, a name rmjudge now uses itself; use "
                             "--overwrite to start again or -o to write elsewhere")
        self._types: dict[str, str] = dict(self.con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'pairs' "
            "AND database_name = current_database()").fetchall())
        self.run_id: int | None = None

    def _create_tables(self) -> None:
        import duckdb

        try:
            self.con.execute("BEGIN TRANSACTION")
            self.con.execute(ddl("pairs", PAIR_COLUMNS))
            self.con.execute(ddl("samples", SAMPLE_COLUMNS,
                                  ', PRIMARY KEY (pair_id, "order", stage, idx)'))
            self.con.execute(ddl("errors", ERROR_COLUMNS))
            self.con.execute(ddl("runs", RUN_COLUMNS))
            for c, t in RUN_COLUMNS:  # stores made by older versions
                self.con.execute(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {quote_ident(c)} {t.split()[0]}")
            # schema 1 had no content hash: its pairs are resumed by id alone
            self.con.execute("ALTER TABLE pairs ADD COLUMN IF NOT EXISTS content_hash VARCHAR")
            self.con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            self.con.execute("COMMIT")
        except duckdb.Error as exc:
            self._rollback()
            raise disk_error(self.path, exc) or StoreError(
                f"cannot use {self.path} as a run store: {first_line(exc)}") from None

    def _columns(self, table: str) -> list[str]:
        return [r[0] for r in self.con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND database_name = "
            "current_database() ORDER BY column_index", [table]).fetchall()]

    def _rollback(self) -> None:
        import duckdb

        try:
            self.con.execute("ROLLBACK")
        except duckdb.Error:  # nothing in flight, or the failure already ended it
            pass

    def write(self, statements) -> None:
        """Run `statements(con)` in one transaction; I/O failures become DiskError."""
        import duckdb

        with critical():
            try:
                self.con.execute("BEGIN TRANSACTION")
                statements(self.con)
                self.con.execute("COMMIT")
            except (duckdb.Error, OSError) as exc:
                self._rollback()
                err = disk_error(self.path, exc)
                if err is None:
                    raise
                raise err from None

    # -- settings and runs ------------------------------------------------------------------
    def meta(self, key: str) -> Any:
        row = self.con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return None if row is None else orjson.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        blob = orjson.dumps(value).decode()
        self.write(lambda con: con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, blob]))

    def check_settings(self, settings: dict) -> None:
        """Refuse to mix verdicts from different settings in one output."""
        old = self.meta("settings")
        if old is None:
            self.set_meta("settings", settings)
            self.set_meta("schema_version", SCHEMA_VERSION)
        elif old.get("rank") and not settings.get("rank"):
            raise StoreError(f"{self.path} holds a ranking made by `rmjudge rank` (its "
                             "comparisons and rankings tables), not pairs judged by `rmjudge "
                             "score`; write to another -o, or --overwrite to replace the ranking")
        elif old != settings:
            raise StoreError(other_settings_message(f"{self.path} holds results", old, settings))

    def check_input(self, identity: dict | None) -> None:
        """Refuse to mix two inputs in one output; a resume of the same input goes on."""
        if identity is None:
            return
        old = self.meta("input")
        if old is None:  # a new store, or one made before inputs were recorded
            self.set_meta("input", identity)
        elif old.get("commit") and identity.get("commit") \
                and old["commit"] != identity["commit"]:  # a Hub dataset's revision moved
            now = ("now resolves to" if old.get("source") == identity.get("source") else "is")
            raise StoreError(
                f"{self.path} holds results for commit {old['commit']} of "
                f"{old.get('source')}, but {identity.get('source')} {now} commit "
                f"{identity['commit']}; to resume, give the input pinned to that commit "
                f"({old.get('pinned') or old['commit']}) with the same -o, use -o to write "
                "elsewhere, or --overwrite to start again")
        elif old.get("fingerprint") != identity.get("fingerprint"):
            same = old.get("source") == identity.get("source")
            what = (f"{identity.get('source')} no longer starts with the row it started with "
                    "when these results were made (its first readable row changed)" if same else
                    f"{self.path} holds results for another input ({old.get('source')}), not "
                    f"{identity.get('source')}")
            raise StoreError(f"{what}; rerun with that input to resume, use -o to write "
                             "elsewhere, or --overwrite to start again")

    def check_columns(self) -> None:
        """Refuse a store whose pairs, samples or errors table lacks a column a run writes (an
        edited store, or one made by another version), before anything is judged: its first
        commit could not store a row."""
        missing = []
        for table, cols in (("pairs", PAIR_COLUMNS), ("samples", SAMPLE_COLUMNS),
                            ("errors", ERROR_COLUMNS)):
            have = {c.lower() for c in self._columns(table)}
            missing += [f"{table}.{c}" for c, _ in cols if c.lower() not in have]
        if missing:
            raise StoreError(f"{self.path} lacks the column{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(missing)} that a run writes (edited, or made by "
                             "another version); use -o to write elsewhere or --overwrite to "
                             "start again")

    def start_run(self, info: dict) -> int:
        self.check_columns()
        row = self.con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchone()
        self.run_id = int(row[0])
        info = {k: (orjson.dumps(v).decode() if isinstance(v, (dict, list)) else v)
                for k, v in info.items()}
        cols = ["run_id", "started", "status"] + list(info)
        vals = [self.run_id, datetime.now(timezone.utc), RUNNING] + list(info.values())
        self.write(lambda con: con.execute(
            f"INSERT INTO runs ({', '.join(quote_ident(c) for c in cols)}) "
            f"VALUES ({', '.join('?' for _ in cols)})", vals))
        return self.run_id

    def finish_run(self, **fields: Any) -> None:
        fields["finished"] = datetime.now(timezone.utc)
        sets = ", ".join(f"{quote_ident(k)} = ?" for k in fields)
        self.write(lambda con: con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?",
                                            [*fields.values(), self.run_id]))

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

    # -- merging ----------------------------------------------------------------------------
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

    def close(self) -> None:
        try:
            self.con.close()
        finally:
            self._release_locks()

    def _release_locks(self) -> None:
        try:
            for lock in self._export_locks:
                lock.release()
        finally:
            self._export_locks = []
            self._lock.release()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _share_a(o, order: str) -> float | None:
    """Share of one order's final votes that went to A."""
    if o is None or o.vote_share_1 is None:
        return None
    return o.vote_share_1 if order == "ab" else 1.0 - o.vote_share_1

