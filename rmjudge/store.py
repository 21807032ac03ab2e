"""The run store: the only code that opens, locks, creates, replaces or deletes run files.

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
- Only files rmjudge created are ever written, replaced or deleted: a DuckDB database without
  rmjudge's tables, or any other file, given as the output is refused and left untouched.
- Disk full or unwritable outputs become one `DiskError` naming the file; the transaction in
  flight is rolled back, so the store stays consistent and a rerun resumes.

Passthrough input columns keep their types: numbers, booleans and strings as such, lists and
objects as DuckDB JSON (a later value that does not fit widens the column: BIGINT -> DOUBLE ->
VARCHAR, with non-strings JSON-encoded in a VARCHAR column). `messages` is JSON too; exports
write JSON columns as nested lists and structs (Parquet) or nested JSON (JSONL).
DuckDB names are case-insensitive: an input column whose name matches a core column in any case
is stored as `input_<name>`, and a name that would still collide gets a `_2`, `_3`... suffix;
the input-key -> column map is kept in `meta`, so every commit and resume uses the same names.
"""

from __future__ import annotations

import errno
import fcntl
import os
import uuid
from datetime import datetime, timezone
from typing import Any, Iterable

import orjson

from rmjudge import jsontext
from rmjudge.errors import BusyError, DiskError, UserError
from rmjudge.interrupts import critical
from rmjudge.protocol import PairResult, Sample
from rmjudge.sql import quote_ident, sql_literal

SCHEMA_VERSION = 1

PAIR_COLUMNS = [
    ("id", "VARCHAR PRIMARY KEY"), ("row_number", "BIGINT"), ("verdict", "VARCHAR"),
    ("verdict_ab", "VARCHAR"), ("verdict_ba", "VARCHAR"), ("consistent", "BOOLEAN"),
    ("p_a", "DOUBLE"), ("p_a_ab", "DOUBLE"), ("p_a_ba", "DOUBLE"), ("label", "VARCHAR"), ("correct", "BOOLEAN"),
    ("shortcut_ab", "BOOLEAN"), ("shortcut_ba", "BOOLEAN"), ("policy", "VARCHAR"),
    ("confidence_ab", "DOUBLE"), ("confidence_ba", "DOUBLE"),
    ("rollouts_ab", "INTEGER"), ("rollouts_ba", "INTEGER"),
    ("prompt", "VARCHAR"), ("messages", "JSON"), ("response_a", "VARCHAR"),
    ("response_b", "VARCHAR"), ("run_id", "INTEGER"),
]
SAMPLE_COLUMNS = [
    ("pair_id", "VARCHAR"), ("order", "VARCHAR"), ("stage", "VARCHAR"), ("idx", "INTEGER"),
    ("text", "VARCHAR"), ("prediction", "INTEGER"), ("confidence", "DOUBLE"),
    ("is_anchor", "BOOLEAN"), ("reflection_of", "INTEGER"), ("reflection_slot", "INTEGER"),
    ("won_reflection", "BOOLEAN"), ("verdict_source", "VARCHAR"), ("tokens", "INTEGER"),
    ("finish_reason", "VARCHAR"), ("p_first", "DOUBLE"),
]
ERROR_COLUMNS = [
    ("row_number", "BIGINT PRIMARY KEY"), ("id", "VARCHAR"), ("reason", "VARCHAR"),
    ("raw", "VARCHAR"), ("run_id", "INTEGER"),
]
RUN_COLUMNS = [
    ("run_id", "INTEGER PRIMARY KEY"), ("version", "VARCHAR"), ("model_path", "VARCHAR"),
    ("model_sha256", "VARCHAR"), ("lora_path", "VARCHAR"), ("lora_sha256", "VARCHAR"),
    ("settings", "VARCHAR"), ("input", "VARCHAR"), ("started", "TIMESTAMPTZ"),
    ("finished", "TIMESTAMPTZ"), ("pairs_judged", "BIGINT"), ("errors", "BIGINT"),
    ("generated_tokens", "BIGINT"), ("wall_seconds", "DOUBLE"), ("status", "VARCHAR"),
    ("shard", "VARCHAR"), ("schema", "VARCHAR"),
    # cost through --server: prompt tokens sent and tokens received (NULL in-process)
    ("tokens_sent", "BIGINT"), ("tokens_received", "BIGINT"),
]
GREEDY_COLUMNS = [
    ("pair_id", "VARCHAR"), ("order", "VARCHAR"), ("text", "VARCHAR"), ("prediction", "INTEGER"),
    ("letter", "VARCHAR"), ("verdict_source", "VARCHAR"), ("confidence", "DOUBLE"),
    ("tokens", "INTEGER"), ("finish_reason", "VARCHAR"), ("model_sha256", "VARCHAR"),
    ("max_tokens", "INTEGER"),
]
# Human labels imported by `rmjudge review import` (rmjudge/review/): one row per pair and
# reviewer ('' when the file names none); a later import of the same pair and reviewer replaces it.
HUMAN_LABEL_COLUMNS = [
    ("pair_id", "VARCHAR NOT NULL"), ("reviewer", "VARCHAR NOT NULL"), ("label", "VARCHAR"),
    ("source", "VARCHAR"), ("imported", "TIMESTAMPTZ"),
]
CORE_TABLES = ("pairs", "samples", "errors", "runs", "meta")
_CORE_LOWER = {c.lower() for c, _ in PAIR_COLUMNS}

# Run status values recorded in `runs.status`.
RUNNING, FINISHED, INTERRUPTED, FAILED = "running", "finished", "interrupted", "failed"


class StoreError(UserError):
    """The output cannot be used as asked; the message names the fix."""


class StoreBusyError(StoreError, BusyError):
    """Another rmjudge process holds the store's lock."""


# -- file names -------------------------------------------------------------------------------

def output_format(out: str) -> str:
    """'duckdb' | 'parquet' | 'jsonl', from the output's name."""
    lower = out.lower()
    if lower.endswith(".parquet"):
        return "parquet"
    if lower.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "duckdb"


def store_path(out: str) -> str:
    """The DuckDB file that holds a run: the output itself, or for a Parquet/JSONL output a
    hidden working file beside it (`.x.parquet.rmjudge.duckdb`), out of the way of
    `load_dataset("parquet", data_dir=...)` and of globs over the export folder."""
    if output_format(out) == "duckdb":
        return out
    head, tail = os.path.split(out)
    new = os.path.join(head, f".{tail}.rmjudge.duckdb")
    legacy = legacy_store_path(out)
    return legacy if os.path.exists(legacy) and not os.path.exists(new) else new


def legacy_store_path(out: str) -> str:
    """Where versions up to 0.1.1 kept the working file of a Parquet/JSONL output."""
    return out + ".work.duckdb"


def sidecar(path: str, table: str) -> str:
    """`x.parquet` -> `x.samples.parquet` (the names an export writes beside its pairs)."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.{table}{ext}"


# -- helpers ----------------------------------------------------------------------------------

def _ddl(name: str, cols: list[tuple[str, str]], extra: str = "") -> str:
    body = ", ".join(f"{quote_ident(c)} {t}" for c, t in cols)
    return f"CREATE TABLE IF NOT EXISTS {name} ({body}{extra})"


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "BOOLEAN"
    if isinstance(v, int):
        return "BIGINT" if -2**63 <= v < 2**63 else "VARCHAR"
    if isinstance(v, float):
        return "DOUBLE"
    if isinstance(v, str):
        return "VARCHAR"
    if isinstance(v, (list, dict)):
        return "JSON"
    return "VARCHAR"


def _type_for(kinds: set[str]) -> str:
    """One column type for values of these kinds (numbers widen; any other mix is VARCHAR)."""
    if len(kinds) == 1:
        return next(iter(kinds))
    if kinds <= {"BIGINT", "DOUBLE"}:
        return "DOUBLE"
    return "VARCHAR"


def _wider(have: str, want: str) -> str:
    if have == want or have == "VARCHAR":
        return have
    if {have, want} <= {"BIGINT", "DOUBLE"}:
        return "DOUBLE"
    return "VARCHAR"


def _cell(v: Any, typ: str) -> Any:
    """A passthrough value for a column of type `typ` (VARCHAR: scalars as text, lists and
    objects as JSON text)."""
    if v is None:
        return None
    if typ == "JSON":
        return jsontext.dumps(v)
    if typ in ("BOOLEAN", "BIGINT", "DOUBLE"):
        return v
    return jsontext.text(v)


def describe_differences(old: dict, new: dict) -> str:
    keys = sorted(set(old) | set(new))
    diffs = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]
    return ", ".join(diffs)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


_DISK_HINTS = ("no space left", "disk is full", "could not write", "file too large",
               "read-only file system", "permission denied", "could not set lock")


def disk_error(path: str, exc: BaseException) -> DiskError | None:
    """A DiskError for an I/O failure writing `path` (None when `exc` is something else)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
                                                   errno.EROFS, errno.EACCES, errno.EPERM):
        why = os.strerror(exc.errno)
    else:
        text = str(exc).lower()
        hint = next((h for h in _DISK_HINTS if h in text), None)
        if hint is None:
            return None
        why = {"no space left": "No space left on device", "disk is full": "No space left on device",
               "file too large": "File too large", "read-only file system": "Read-only file system",
               "permission denied": "Permission denied"}.get(hint, _first_line(exc))
    return DiskError(f"cannot write {path}: {why}; free space or choose a writable -o, then "
                     "rerun the same command to resume (the results committed so far are kept)")


def is_duckdb_file(path: str) -> bool:
    """True when `path` is a DuckDB database file (its header carries `DUCK` at byte 8)."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return head[8:12] == b"DUCK"


def is_rmjudge_store(path: str) -> bool:
    """True when `path` is a DuckDB file holding rmjudge's tables (or no tables at all)."""
    import duckdb

    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return os.path.isfile(path)
    if not is_duckdb_file(path):
        return False
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.Error as exc:
        msg = str(exc).lower()
        if "lock" in msg or "different configuration" in msg:
            raise StoreBusyError(f"{path} is open for writing in another process; wait for it "
                                 "to finish or use -o to write elsewhere") from None
        return False
    try:
        tables = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT internal").fetchall()}
        others = con.execute("""
            SELECT (SELECT count(*) FROM duckdb_views() WHERE NOT internal)
                 + (SELECT count(*) FROM duckdb_sequences())
                 + (SELECT count(*) FROM duckdb_functions() WHERE NOT internal)
                 + (SELECT count(*) FROM duckdb_types() WHERE NOT internal)
                 + (SELECT count(*) FROM duckdb_schemas() WHERE NOT internal
                      AND schema_name NOT IN ('main', 'pg_catalog', 'information_schema'))
        """).fetchone()[0]
    finally:
        con.close()
    if not tables:
        return others == 0  # an empty database; anything in it is someone else's
    return set(CORE_TABLES) <= tables


class _Lock:
    """An exclusive, non-blocking `flock` on `path + '.lock'`, held until `release`."""

    def __init__(self, path: str, what: str = "writing"):
        self.path = path + ".lock"
        try:
            self._f = open(self.path, "a+")
        except OSError as exc:
            raise disk_error(path, exc) or StoreError(
                f"cannot create the lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(self._f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._f.close()
            raise StoreBusyError(f"another rmjudge process is {what} {path}; wait for it to finish "
                            "or use -o to write elsewhere") from None

    def release(self) -> None:
        try:
            fcntl.flock(self._f, fcntl.LOCK_UN)
        finally:
            self._f.close()


def check_not_busy(path: str) -> None:
    """Raise BusyError when an rmjudge process holds `path`'s lock (for read-only users)."""
    if os.path.exists(path + ".lock"):
        _Lock(path, "writing").release()


def _prepare_dir(path: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as exc:
        raise disk_error(path, exc) or StoreError(
            f"cannot create the directory {d}: {exc.strerror}") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise DiskError(f"cannot write {path}: the directory {d} is not writable; choose -o in "
                        "a writable directory")


def _refuse_foreign(path: str) -> None:
    if not os.path.exists(path) and os.path.exists(path + ".wal"):
        raise StoreError(
            f"{path}.wal exists without {path} (a write-ahead log of a database that is gone, "
            "perhaps not rmjudge's); it is left untouched: move it away or choose another -o")
    if os.path.exists(path) and not is_rmjudge_store(path):
        raise StoreError(
            f"{path} exists and is not an rmjudge run store (rmjudge did not create it); it is "
            "left untouched: choose another -o")


def check_writable_target(path: str) -> None:
    """Refuse early a path that is not an rmjudge store (the store refuses it again on open)."""
    _refuse_foreign(path)


class Store:
    """An open, locked run store. `overwrite` empties it first (only when it is rmjudge's own
    and nobody else holds it)."""

    def __init__(self, path: str, *, overwrite: bool = False):
        import duckdb

        self.path = path
        _prepare_dir(path)
        self._lock = _Lock(path)
        try:
            _refuse_foreign(path)
            if overwrite:
                _remove_files(path)
            try:
                self.con = duckdb.connect(path)
            except duckdb.Error as exc:
                raise disk_error(path, exc) or StoreError(
                    f"cannot open {path} as DuckDB: {_first_line(exc)}") from None
            try:
                self._create_tables()
            except BaseException:
                self.con.close()
                raise
        except BaseException:
            self._lock.release()
            raise
        self.pair_columns = self._columns("pairs")
        self._columns_map: dict[str, str] = self.meta("passthrough") or {}
        self._types: dict[str, str] = dict(self.con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'pairs' "
            "AND database_name = current_database()").fetchall())
        self.run_id: int | None = None

    def _create_tables(self) -> None:
        import duckdb

        try:
            self.con.execute("BEGIN TRANSACTION")
            self.con.execute(_ddl("pairs", PAIR_COLUMNS))
            self.con.execute(_ddl("samples", SAMPLE_COLUMNS,
                                  ', PRIMARY KEY (pair_id, "order", stage, idx)'))
            self.con.execute(_ddl("errors", ERROR_COLUMNS))
            self.con.execute(_ddl("runs", RUN_COLUMNS))
            for c, t in RUN_COLUMNS:  # stores made by older versions
                self.con.execute(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {quote_ident(c)} {t.split()[0]}")
            self.con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            self.con.execute("COMMIT")
        except duckdb.Error as exc:
            self._rollback()
            raise disk_error(self.path, exc) or StoreError(
                f"cannot use {self.path} as a run store: {_first_line(exc)}") from None

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

    def _write(self, statements) -> None:
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
        self._write(lambda con: con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, blob]))

    def check_settings(self, settings: dict) -> None:
        """Refuse to mix verdicts from different settings in one output."""
        old = self.meta("settings")
        if old is None:
            self.set_meta("settings", settings)
            self.set_meta("schema_version", SCHEMA_VERSION)
        elif old != settings:
            raise StoreError(
                f"{self.path} holds results made with other settings ({describe_differences(old, settings)}); "
                "rerun with the same settings to resume, use -o to write elsewhere, or "
                "--overwrite to start again"
            )

    def check_input(self, identity: dict | None) -> None:
        """Refuse to mix two inputs in one output; a resume of the same input goes on."""
        if identity is None:
            return
        old = self.meta("input")
        if old is None:  # a new store, or one made before inputs were recorded
            self.set_meta("input", identity)
        elif old.get("fingerprint") != identity.get("fingerprint"):
            same = old.get("source") == identity.get("source")
            what = (f"{identity.get('source')} no longer starts with the row it started with "
                    "when these results were made (its first readable row changed)" if same else
                    f"{self.path} holds results for another input ({old.get('source')}), not "
                    f"{identity.get('source')}")
            raise StoreError(f"{what}; rerun with that input to resume, use -o to write "
                             "elsewhere, or --overwrite to start again")

    def start_run(self, info: dict) -> int:
        row = self.con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchone()
        self.run_id = int(row[0])
        info = {k: (orjson.dumps(v).decode() if isinstance(v, (dict, list)) else v)
                for k, v in info.items()}
        cols = ["run_id", "started", "status"] + list(info)
        vals = [self.run_id, datetime.now(timezone.utc), RUNNING] + list(info.values())
        self._write(lambda con: con.execute(
            f"INSERT INTO runs ({', '.join(quote_ident(c) for c in cols)}) "
            f"VALUES ({', '.join('?' for _ in cols)})", vals))
        return self.run_id

    def finish_run(self, **fields: Any) -> None:
        fields["finished"] = datetime.now(timezone.utc)
        sets = ", ".join(f"{quote_ident(k)} = ?" for k in fields)
        self._write(lambda con: con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?",
                                            [*fields.values(), self.run_id]))

    # -- resume -----------------------------------------------------------------------------
    def done_ids(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT id FROM pairs").fetchall()}

    # -- writes -----------------------------------------------------------------------------
    def column_for(self, key: str) -> str:
        """The `pairs` column that holds input key `key` (assigned once, kept in meta)."""
        if key in self._columns_map:
            return self._columns_map[key]
        taken = {c.lower() for c in self.pair_columns} | {c.lower() for c in self._columns_map.values()}
        if key.lower() in _CORE_LOWER or not key.strip():
            base = f"input_{key.strip()}" if key.strip() else "input_column"
        else:
            base = key
        if key in self.pair_columns and key.lower() not in _CORE_LOWER \
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

    def _widen(self, con, col: str, typ: str) -> None:
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
            kinds = {_kind(v) for v in values if v is not None}
            want = _type_for(kinds) if kinds else None
            if have is None:
                have = want or "VARCHAR"
                new[col] = have
            elif want is not None and _wider(have, want) != have:
                have = _wider(have, want)
                widen[col] = have
            columns.append([_cell(v, have) for v in values])
        return new, widen, [list(r) for r in zip(*columns)] if columns else [[] for _ in results]

    def commit(self, results: list[PairResult], errors: list[dict]) -> None:
        """Write a chunk of judged pairs and error rows in one transaction."""
        keys: list[str] = []
        for res in results:
            for k in res.pair.extra:
                if k not in keys:
                    keys.append(k)
        before = dict(self._columns_map)
        types_before = dict(self._types)
        extra = {self.column_for(k): k for k in keys}  # output column -> input key
        cols = [c for c, _ in PAIR_COLUMNS] + list(extra)
        new, widen, cells = self._typed_values(extra, results)
        rows, samples = [], []
        for res, more in zip(results, cells):
            rows.append(self._pair_row(res) + more)
            for o in res.orders.values():
                samples.extend(self._sample_row(s) for s in o.samples)
        map_changed = self._columns_map != before
        n_cols = len(self.pair_columns)

        def statements(con) -> None:
            self.add_columns(new, con)
            for col, typ in widen.items():
                self._widen(con, col, typ)
            if map_changed:
                con.execute("INSERT OR REPLACE INTO meta VALUES ('passthrough', ?)",
                            [orjson.dumps(self._columns_map).decode()])
            if rows:
                con.executemany(
                    f"INSERT INTO pairs ({', '.join(quote_ident(c) for c in cols)}) "
                    f"VALUES ({', '.join('?' for _ in cols)})", rows)
            if samples:
                con.executemany(
                    f"INSERT INTO samples VALUES ({', '.join('?' for _ in SAMPLE_COLUMNS)})", samples)
            for e in errors:
                con.execute("INSERT OR REPLACE INTO errors VALUES (?, ?, ?, ?, ?)",
                            [e["row_number"], e.get("id"), e["reason"], e.get("raw"), self.run_id])
            if rows:  # a row judged now supersedes an earlier failure of the same row
                con.executemany("DELETE FROM errors WHERE row_number = ?", [[r[1]] for r in rows])

        try:
            self._write(statements)
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
            p.response_a, p.response_b, self.run_id,
        ]

    @staticmethod
    def _sample_row(s: Sample) -> list[Any]:
        return [s.pair_id, s.order, s.stage, s.idx, s.text, s.prediction, s.confidence,
                s.is_anchor, s.reflection_of, s.reflection_slot, s.won_reflection,
                s.verdict_source, s.tokens, s.finish_reason, s.p_first]

    # -- greedy baseline --------------------------------------------------------------------
    def add_greedy(self, rows: list[list]) -> None:
        """Store greedy-baseline rows (replacing the same pair and order)."""
        marks = ", ".join("?" for _ in GREEDY_COLUMNS)

        def statements(con) -> None:
            con.execute(_ddl("greedy", GREEDY_COLUMNS, ', PRIMARY KEY (pair_id, "order")'))
            if rows:
                con.executemany(f"INSERT OR REPLACE INTO greedy VALUES ({marks})", rows)

        self._write(statements)

    # -- human labels -----------------------------------------------------------------------
    def add_human_labels(self, rows: list[tuple[str, str, str, str]]) -> int:
        """Store human labels, rows of (pair_id, reviewer, label A|B|tie, source file), all
        stamped with the same import time; a row for a pair and reviewer already held replaces
        it (the table is created on first use, so older stores take labels too). Returns the
        number of rows replaced."""
        now = datetime.now(timezone.utc)
        replaced = 0

        def statements(con) -> None:
            nonlocal replaced
            con.execute(_ddl("human_labels", HUMAN_LABEL_COLUMNS, ", PRIMARY KEY (pair_id, reviewer)"))
            if rows:
                con.execute("CREATE TEMP TABLE IF NOT EXISTS incoming (pair_id VARCHAR, reviewer VARCHAR)")
                con.execute("DELETE FROM incoming")
                con.executemany("INSERT INTO incoming VALUES (?, ?)", [[r[0], r[1]] for r in rows])
                replaced = con.execute("""SELECT count(*) FROM human_labels h JOIN
                    (SELECT DISTINCT pair_id, reviewer FROM incoming) i
                    USING (pair_id, reviewer)""").fetchone()[0]
                con.executemany("INSERT OR REPLACE INTO human_labels VALUES (?, ?, ?, ?, ?)",
                                [[*r, now] for r in rows])

        self._write(statements)
        return int(replaced)

    # -- merging ----------------------------------------------------------------------------
    def import_stores(self, paths: list[str]) -> tuple[int, int, int, int]:
        """Copy the tables of run stores (shards) into this one, renumbering run ids (old ids
        mapped per shard; `runs.merged_from` names the shard file). Returns the counts of
        pairs, errors, samples and runs now held."""
        aliases = [f"s{i}" for i in range(len(paths))]
        con = self.con
        for p, a in zip(paths, aliases):
            con.execute(f"ATTACH {sql_literal(p)} AS {quote_ident(a)} (READ_ONLY)")
        con.execute("ALTER TABLE runs ADD COLUMN IF NOT EXISTS merged_from VARCHAR")
        con.execute("CREATE TEMP TABLE run_map (shard_index INTEGER, old_id INTEGER, new_id INTEGER)")

        def statements(con) -> None:
            next_id = 1
            for i, (p, a) in enumerate(zip(paths, aliases)):
                qa = quote_ident(a)
                old = [r[0] for r in con.execute(f"SELECT run_id FROM {qa}.runs ORDER BY run_id").fetchall()]
                con.executemany("INSERT INTO run_map VALUES (?, ?, ?)",
                                [[i, o, next_id + k] for k, o in enumerate(old)])
                next_id += len(old)
                shard_types = dict(con.execute(
                    "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = ? "
                    "AND table_name = 'pairs' ORDER BY column_index", [a]).fetchall())
                cmap = con.execute(f"SELECT value FROM {qa}.meta WHERE key = 'passthrough'").fetchone()
                key_of = {c: k for k, c in (orjson.loads(cmap[0]) if cmap else {}).items()}
                core = {c for c, _ in PAIR_COLUMNS}
                moves = []  # (shard column, merged column): by input key, never by name alone
                for c, typ in shard_types.items():
                    if c in core:
                        continue
                    mine = self.column_for(key_of.get(c, c))
                    if mine.lower() not in {x.lower() for x in self.pair_columns}:
                        self.add_columns({mine: typ}, con)
                    elif self._types.get(mine) not in (typ, "VARCHAR"):
                        self._widen(con, mine, "VARCHAR")
                    moves.append((c, mine))
                run_cols = [r[0] for r in con.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND "
                    "table_name = 'runs' ORDER BY column_index", [a]).fetchall()]
                run_sel = ", ".join(quote_ident(c) for c in run_cols if c not in ("run_id", "merged_from"))
                con.execute(f"""
                    INSERT INTO runs BY NAME
                    SELECT m.new_id AS run_id, {run_sel}, {sql_literal(p)} AS merged_from
                    FROM {qa}.runs r JOIN run_map m ON m.shard_index = {i} AND m.old_id = r.run_id""")
                dest = [c for c, _ in PAIR_COLUMNS if c in shard_types] + [m for _, m in moves]
                src = [f"m.new_id" if c == "run_id" else f"t.{quote_ident(c)}"
                       for c, _ in PAIR_COLUMNS if c in shard_types] + \
                      [f"t.{quote_ident(c)}" for c, _ in moves]
                con.execute(f"""
                    INSERT INTO pairs ({', '.join(quote_ident(c) for c in dest)})
                    SELECT {', '.join(src)}
                    FROM {qa}.pairs t LEFT JOIN run_map m
                      ON m.shard_index = {i} AND m.old_id = t.run_id""")
                con.execute(f"""
                    INSERT INTO errors BY NAME
                    SELECT t.* REPLACE (m.new_id AS run_id)
                    FROM {qa}.errors t LEFT JOIN run_map m
                      ON m.shard_index = {i} AND m.old_id = t.run_id""")
                con.execute(f"INSERT INTO samples BY NAME SELECT * FROM {qa}.samples")
            if self._columns_map:
                con.execute("INSERT OR REPLACE INTO meta VALUES ('passthrough', ?)",
                            [orjson.dumps(self._columns_map).decode()])

        try:
            self._write(statements)
            counts = tuple(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                           for t in ("pairs", "errors", "samples", "runs"))
        finally:
            for a in aliases:
                con.execute(f"DETACH {quote_ident(a)}")
        return counts  # type: ignore[return-value]

    def import_batches(self, batch_dir: str, runs: list[dict]) -> tuple[int, int, int]:
        """Copy the Parquet batches of a Ray run (`batch_dir/*/{pairs,samples,errors}.parquet`)
        in; a later duplicate of a pair id across batches goes to `errors`. Returns (pairs,
        errors, duplicates)."""
        con = self.con
        have = [d for d in sorted(os.listdir(batch_dir)) if not d.startswith(".")]
        dups = 0

        def glob(t: str) -> str:
            return sql_literal(os.path.join(batch_dir, "*", f"{t}.parquet"))

        def statements(con) -> None:
            nonlocal dups
            if have:
                con.execute(f"CREATE TEMP VIEW bp AS SELECT *, row_number() OVER (PARTITION BY id "
                            f"ORDER BY row_number) AS _rank FROM read_parquet({glob('pairs')}, "
                            "union_by_name = true, filename = '_file')")
                cols = [r[0] for r in con.execute("DESCRIBE bp").fetchall()
                        if r[0] not in ("_file", "_rank")]
                self.add_columns(cols, con)
                sel = ", ".join(quote_ident(c) for c in cols)
                con.execute(f"INSERT INTO pairs ({sel}) SELECT {sel} FROM bp WHERE _rank = 1 "
                            "ORDER BY row_number")
                con.execute(f"""INSERT INTO samples BY NAME
                    SELECT s.* EXCLUDE (_file) FROM read_parquet({glob("samples")},
                        filename = '_file') s
                    JOIN bp ON bp.id = s.pair_id AND bp._rank = 1
                     AND parse_dirpath(bp._file) = parse_dirpath(s._file)""")
                con.execute(f"INSERT INTO errors BY NAME SELECT * FROM read_parquet({glob('errors')})")
                dups = con.execute("""INSERT INTO errors (row_number, id, reason, raw, run_id)
                    SELECT d.row_number, d.id, 'row ' || d.row_number || ': duplicate id '''
                           || d.id || ''' (first seen on row ' || f.row_number
                           || '); give each pair a unique id', NULL, d.run_id
                    FROM bp d JOIN bp f ON f.id = d.id AND f._rank = 1 WHERE d._rank > 1""").fetchone()[0]
            for r in runs:
                cols = [c for c, _ in RUN_COLUMNS if r.get(c) is not None]
                con.execute(f"INSERT INTO runs ({', '.join(quote_ident(c) for c in cols)}) "
                            f"VALUES ({', '.join('?' for _ in cols)})", [r[c] for c in cols])

        self._write(statements)
        n_pairs = con.execute("SELECT count(*) FROM pairs").fetchone()[0]
        n_err = con.execute("SELECT count(*) FROM errors").fetchone()[0]
        return n_pairs, n_err, dups

    def write_batch_files(self, results: list[PairResult], errors: list[dict],
                          dest_dir: str) -> None:
        """Commit a Ray batch into this (scratch) store and write its tables as Parquet files
        into `dest_dir` (which must not exist yet)."""
        self.commit(results, errors)
        os.makedirs(dest_dir)
        for table in ("pairs", "samples", "errors"):
            write_query_file(self.con, f"SELECT * FROM {table}",
                             os.path.join(dest_dir, f"{table}.parquet"), "parquet")

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


# -- whole files ------------------------------------------------------------------------------

def _remove_files(path: str) -> None:
    """Delete a store's database and write-ahead log (the caller holds its lock)."""
    for p in (path, path + ".wal"):
        if os.path.exists(p):
            os.remove(p)


def _temp_beside(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.new-{uuid.uuid4().hex[:8]}")


def _write_beside(path: str, produce, check=None) -> None:
    """`produce(tmp)` writes a temporary file beside `path`; `check()`, when given, runs just
    before it is moved onto `path` (and may refuse by raising). A failure leaves no temporary
    behind, and an I/O failure is a DiskError naming `path`."""
    import duckdb

    tmp = _temp_beside(path)
    try:
        produce(tmp)
        if check is not None:
            check()
        if not _link_new(tmp, path):
            if check is not None and os.path.lexists(path):
                check()  # something appeared since the check: it must pass again
            os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        err = disk_error(path, exc) if isinstance(exc, (duckdb.Error, OSError)) else None
        if err is None:
            raise
        raise err from None


def _link_new(tmp: str, path: str) -> bool:
    """Move `tmp` to `path` only if `path` does not exist (a hard link never replaces a file,
    so one created by another process since the check is left alone). False when `path`
    exists or the file system has no hard links; `tmp` is then still there."""
    if os.path.lexists(path):
        return False
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError:  # no hard links here (some network and FUSE file systems)
        return False
    os.remove(tmp)
    return True


def write_query_file(con, query: str, path: str, fmt: str, check=None) -> None:
    """`COPY (query)` to `path` as Parquet or JSONL, so a reader never sees a half-written file
    (see `_write_beside` for `check`)."""
    copy_fmt = "(FORMAT parquet)" if fmt == "parquet" else "(FORMAT json)"
    _write_beside(path, lambda tmp: con.execute(
        f"COPY ({query}) TO {sql_literal(tmp)} {copy_fmt}"), check)


def write_file(path: str, data: bytes, check=None) -> None:
    """Write a whole file so a reader never sees it half-written (see `_write_beside`)."""
    def produce(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    _write_beside(path, produce, check)


def write_rows_file(columns: list[tuple[str, str]], rows: list[list], path: str, fmt: str,
                    key: tuple[str, ...] = ()) -> None:
    """Write `rows` (later rows win on the same `key`) as a Parquet/JSONL file of `columns`."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        pk = f", PRIMARY KEY ({', '.join(quote_ident(k) for k in key)})" if key else ""
        con.execute(_ddl("t", columns, pk))
        if rows:
            verb = "INSERT OR REPLACE" if key else "INSERT"
            con.executemany(f"{verb} INTO t VALUES ({', '.join('?' for _ in columns)})", rows)
        order = f" ORDER BY {', '.join(quote_ident(k) for k in key)}" if key else ""
        write_query_file(con, f"SELECT * FROM t{order}", path, fmt)
    finally:
        con.close()


def remove_export(path: str) -> None:
    os.remove(path)


class NewStore:
    """A store built under a temporary name next to `dest` and moved into place by `install`
    (merge, Ray assembly): `dest` is never seen half-written, and is replaced only while its
    lock is ours and only when it is an rmjudge store."""

    def __init__(self, dest: str, settings: dict, *, overwrite: bool):
        self.dest = dest
        _prepare_dir(dest)
        check_not_busy(dest)
        if os.path.exists(dest):
            if not overwrite:
                raise StoreError(f"{dest} exists; use --overwrite to replace it or -o to write "
                                 "elsewhere")
            _refuse_foreign(dest)
        self.tmp = os.path.join(os.path.dirname(os.path.abspath(dest)),
                                f".{os.path.basename(dest)}.new-{uuid.uuid4().hex[:8]}")
        self.store = Store(self.tmp)
        try:
            self.store.set_meta("settings", settings)
            self.store.set_meta("schema_version", SCHEMA_VERSION)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        self.store.close()
        for p in (self.tmp, self.tmp + ".wal", self.tmp + ".lock"):
            if os.path.exists(p):
                os.remove(p)

    def install(self) -> None:
        """Checkpoint, close, then replace `dest` while holding its lock."""
        try:
            self.store.con.execute("CHECKPOINT")
        except BaseException:
            self.discard()
            raise
        self.store.close()
        lock = None
        try:
            lock = _Lock(self.dest, "writing")
            _refuse_foreign(self.dest)
            if os.path.exists(self.dest + ".wal"):
                os.remove(self.dest + ".wal")
            os.replace(self.tmp, self.dest)
        except BaseException:
            for p in (self.tmp, self.tmp + ".wal"):
                if os.path.exists(p):
                    os.remove(p)
            raise
        finally:
            if lock is not None:
                lock.release()
            if os.path.exists(self.tmp + ".lock"):
                os.remove(self.tmp + ".lock")
