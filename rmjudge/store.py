"""The run store: a DuckDB file holding `pairs`, `samples`, `errors`, `runs` and `meta`.

- One row per input pair in `pairs` (primary key `id`), one row per generation in `samples`,
  one row per unjudgeable input row in `errors` (keyed by row number, so a rerun replaces it).
- Results are committed in small transactions, so `kill -9` loses at most the chunk in flight,
  and a rerun skips the ids already in `pairs`.
- The settings that decide verdicts are kept in `meta`; a rerun with other settings is refused
  with a message naming the differences.
- A lock file beside the database keeps a second writer out with a clear message.
Passthrough input columns become VARCHAR columns of `pairs` (non-string values JSON-encoded).
"""

from __future__ import annotations

from rmjudge.errors import UserError

import fcntl
import os
from datetime import datetime, timezone
from typing import Any, Iterable

import orjson

from rmjudge.io.readers import quote_ident
from rmjudge.protocol import PairResult, Sample

SCHEMA_VERSION = 1

PAIR_COLUMNS = [
    ("id", "VARCHAR PRIMARY KEY"), ("row_number", "BIGINT"), ("verdict", "VARCHAR"),
    ("verdict_ab", "VARCHAR"), ("verdict_ba", "VARCHAR"), ("consistent", "BOOLEAN"),
    ("p_a", "DOUBLE"), ("p_a_ab", "DOUBLE"), ("p_a_ba", "DOUBLE"), ("label", "VARCHAR"), ("correct", "BOOLEAN"),
    ("shortcut_ab", "BOOLEAN"), ("shortcut_ba", "BOOLEAN"), ("policy", "VARCHAR"),
    ("confidence_ab", "DOUBLE"), ("confidence_ba", "DOUBLE"),
    ("rollouts_ab", "INTEGER"), ("rollouts_ba", "INTEGER"),
    ("prompt", "VARCHAR"), ("messages", "VARCHAR"), ("response_a", "VARCHAR"),
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
    ("shard", "VARCHAR"),
]


class StoreError(UserError):
    """The output cannot be used as asked; the message names the fix."""


def _ddl(name: str, cols: list[tuple[str, str]], extra: str = "") -> str:
    body = ", ".join(f"{quote_ident(c)} {t}" for c, t in cols)
    return f"CREATE TABLE IF NOT EXISTS {name} ({body}{extra})"


def _passthrough(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return orjson.dumps(v, default=str).decode()


def describe_differences(old: dict, new: dict) -> str:
    keys = sorted(set(old) | set(new))
    diffs = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]
    return ", ".join(diffs)


class Store:
    def __init__(self, path: str):
        import duckdb

        self.path = path
        self._lock_file = open(path + ".lock", "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise StoreError(
                f"another rmjudge process is writing {path}; wait for it to finish or use "
                "-o to write elsewhere"
            ) from None
        try:
            self.con = duckdb.connect(path)
        except duckdb.Error as exc:
            self._release()
            raise StoreError(f"cannot open {path} as DuckDB: {str(exc).splitlines()[0]}") from None
        self.con.execute(_ddl("pairs", PAIR_COLUMNS))
        self.con.execute(_ddl("samples", SAMPLE_COLUMNS,
                              ', PRIMARY KEY (pair_id, "order", stage, idx)'))
        self.con.execute(_ddl("errors", ERROR_COLUMNS))
        self.con.execute(_ddl("runs", RUN_COLUMNS))
        self.con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        self.pair_columns = [r[0] for r in self.con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'pairs' "
            "ORDER BY column_index").fetchall()]
        self.run_id: int | None = None

    @classmethod
    def fresh(cls, path: str, settings: dict) -> "Store":
        """A new, empty store at `path` (removing leftovers) with its verdict settings set."""
        remove_store_files(path)
        store = cls(path)
        store.set_meta("settings", settings)
        store.set_meta("schema_version", SCHEMA_VERSION)
        return store

    # -- settings and runs ------------------------------------------------------------------
    def meta(self, key: str) -> Any:
        row = self.con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return None if row is None else orjson.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        self.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, orjson.dumps(value).decode()])

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

    def start_run(self, info: dict) -> int:
        row = self.con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchone()
        self.run_id = int(row[0])
        cols = ["run_id", "started", "status"] + list(info)
        vals = [self.run_id, datetime.now(timezone.utc), "running"] + list(info.values())
        self.con.execute(
            f"INSERT INTO runs ({', '.join(quote_ident(c) for c in cols)}) "
            f"VALUES ({', '.join('?' for _ in cols)})", vals)
        return self.run_id

    def finish_run(self, **fields: Any) -> None:
        fields["finished"] = datetime.now(timezone.utc)
        sets = ", ".join(f"{quote_ident(k)} = ?" for k in fields)
        self.con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*fields.values(), self.run_id])

    # -- resume -----------------------------------------------------------------------------
    def done_ids(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT id FROM pairs").fetchall()}

    # -- writes -----------------------------------------------------------------------------
    def _ensure_columns(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self.pair_columns:
                self.con.execute(f"ALTER TABLE pairs ADD COLUMN {quote_ident(name)} VARCHAR")
                self.pair_columns.append(name)

    def commit(self, results: list[PairResult], errors: list[dict]) -> None:
        """Write a chunk of judged pairs and error rows in one transaction."""
        rows, samples = [], []
        extra: dict[str, str] = {}  # output column -> input key
        reserved = dict(PAIR_COLUMNS)
        for res in results:
            for k in res.pair.extra:
                extra.setdefault(f"input_{k}" if k in reserved else k, k)
        self._ensure_columns(extra)
        cols = [c for c, _ in PAIR_COLUMNS] + list(extra)
        for res in results:
            rows.append(self._pair_row(res)
                        + [_passthrough(res.pair.extra.get(k)) for k in extra.values()])
            for o in res.orders.values():
                samples.extend(self._sample_row(s) for s in o.samples)
        self.con.execute("BEGIN TRANSACTION")
        try:
            if rows:
                self.con.executemany(
                    f"INSERT INTO pairs ({', '.join(quote_ident(c) for c in cols)}) "
                    f"VALUES ({', '.join('?' for _ in cols)})", rows)
            if samples:
                self.con.executemany(
                    f"INSERT INTO samples VALUES ({', '.join('?' for _ in SAMPLE_COLUMNS)})", samples)
            for e in errors:
                self.con.execute("INSERT OR REPLACE INTO errors VALUES (?, ?, ?, ?, ?)",
                                 [e["row_number"], e.get("id"), e["reason"], e.get("raw"), self.run_id])
            if rows:  # a row judged now supersedes an earlier failure of the same row
                self.con.executemany("DELETE FROM errors WHERE row_number = ? AND id = ?",
                                     [[r[1], r[0]] for r in rows])
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
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

    # -- export -----------------------------------------------------------------------------
    def export(self, out: str, fmt: str) -> list[str]:
        """Write pairs (and samples, errors) as Parquet or JSONL next to `out`."""
        stem, ext = os.path.splitext(out)
        copy_fmt = "(FORMAT parquet)" if fmt == "parquet" else "(FORMAT json)"
        written = []
        targets = [("pairs", out, "row_number"), ("samples", f"{stem}.samples{ext}", None),
                   ("errors", f"{stem}.errors{ext}", "row_number")]
        for table, path, order in targets:
            n = self.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            if table == "errors" and n == 0:
                if os.path.exists(path):
                    os.remove(path)
                continue
            order_by = f" ORDER BY {order}" if order else ""
            tmp = path + ".tmp"
            self.con.execute(f"COPY (SELECT * FROM {table}{order_by}) TO '{_sql_str(tmp)}' {copy_fmt}")
            os.replace(tmp, path)
            written.append(path)
        return written

    def close(self) -> None:
        try:
            self.con.close()
        finally:
            self._release()

    def _release(self) -> None:
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
        finally:
            self._lock_file.close()


def _share_a(o, order: str) -> float | None:
    """Share of one order's final votes that went to A."""
    if o is None or o.vote_share_1 is None:
        return None
    return o.vote_share_1 if order == "ab" else 1.0 - o.vote_share_1


def remove_store_files(path: str) -> None:
    """Delete a store's database, write-ahead log and lock file, where present."""
    for p in (path, path + ".wal", path + ".lock"):
        if os.path.exists(p):
            os.remove(p)


def _sql_str(s: str) -> str:
    return s.replace("'", "''")
