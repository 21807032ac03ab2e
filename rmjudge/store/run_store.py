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
Callers read counts through the methods of `Store` (`pair_count`, `summary_counts`), never
through `con`.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

import orjson

from rmjudge.core.interrupts import critical, held_calls
from rmjudge.core.sql import quote_ident
from rmjudge.files import (Lock, StoreError, busy_export, clean_stale_temps, disk_error, first_line,
                           prepare_dir, store_path)
from rmjudge.store.ownership import refuse_foreign, remove_files
from rmjudge.store.reads import StoreReads
from rmjudge.store.schema import (ERROR_COLUMNS, PAIR_COLUMNS, RUN_COLUMNS, RUNNING,
                                  SAMPLE_COLUMNS, SCHEMA_VERSION, ddl, other_settings_message)
from rmjudge.store.writes import StoreWrites


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


class Store(StoreReads, StoreWrites):
    """An open, locked run store. `overwrite` empties it first (only when it is rmjudge's own
    and nobody else holds it). Its reads are `StoreReads` (rmjudge/store/reads.py), its writes
    of pairs, columns, rankings and labels `StoreWrites` (rmjudge/store/writes.py); here: the
    lock, the tables, transactions (`write`), the settings and input checks, the runs."""

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
