"""Stores built whole, aside, and moved into place: `NewStore` (merge, Ray assembly, the jury
table), with the copying of shard stores (`import_stores`, `rmjudge merge`) and of a Ray run's
Parquet batches (`write_batch`, `import_batches`). A pair id seen again across batches is an
error row with the reason `rmjudge.io.intake` gives a duplicate id.
"""

from __future__ import annotations

import os
import uuid

import orjson

from rmjudge.io.intake import duplicate_reason
from rmjudge.judging.protocol import PairResult
from rmjudge.core.sql import quote_ident, sql_literal
from rmjudge.store.bulk import insert_rows
from rmjudge.store.files import (
    Lock,
    StoreError,
    check_not_busy,
    make_dir,
    place_dir,
    prepare_dir,
    refuse_foreign,
    remove_file,
    remove_tree,
    replace_file,
    write_query_file,
)
from rmjudge.store.run_store import Store
from rmjudge.store.schema import PAIR_COLUMNS, RUN_COLUMNS, SCHEMA_VERSION, human_labels_ddl


def import_stores(store: Store, paths: list[str]) -> tuple[int, int, int, int]:
    """Copy the tables of run stores (shards) into `store`, renumbering run ids (old ids
    mapped per shard; `runs.merged_from` names the shard file). Returns the counts of
    pairs, errors, samples and runs now held. Human labels (`human_labels`) come along: the
    caller has refused two shards that label a pair for one reviewer differently, so a label
    held twice is the same one (the later import's row is kept)."""
    aliases = [f"s{i}" for i in range(len(paths))]
    con = store.con
    for p, a in zip(paths, aliases):
        con.execute(f"ATTACH {sql_literal(p)} AS {quote_ident(a)} (READ_ONLY)")
    con.execute("ALTER TABLE runs ADD COLUMN IF NOT EXISTS merged_from VARCHAR")
    con.execute("CREATE TEMP TABLE run_map (shard_index INTEGER, old_id INTEGER, new_id INTEGER)")

    def statements(con) -> None:
        next_id = 1
        for i, (p, a) in enumerate(zip(paths, aliases)):
            qa = quote_ident(a)
            old = [r[0] for r in con.execute(f"SELECT run_id FROM {qa}.runs ORDER BY run_id").fetchall()]
            insert_rows(con, "run_map", [[i, o, next_id + k] for k, o in enumerate(old)])
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
                mine = store.column_for(key_of.get(c, c))
                if mine.lower() not in {x.lower() for x in store.pair_columns}:
                    store.add_columns({mine: typ}, con)
                elif store.column_type(mine) not in (typ, "VARCHAR"):
                    store.widen(con, mine, "VARCHAR")
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
        labelled = [a for a in aliases if con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = "
            "'human_labels'", [a]).fetchone()[0]]
        if labelled:  # a label follows its pair id; the same one twice (shards agree): kept once
            con.execute(human_labels_ddl())
            every = " UNION ALL ".join(f"SELECT * FROM {quote_ident(a)}.human_labels"
                                       for a in labelled)
            con.execute(f"""INSERT INTO human_labels BY NAME
                SELECT * FROM ({every}) QUALIFY row_number() OVER (PARTITION BY pair_id, reviewer
                    ORDER BY imported DESC NULLS LAST, source) = 1""")
        store.save_column_map(con)

    try:
        store.write(statements)
        counts = tuple(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                       for t in ("pairs", "errors", "samples", "runs"))
    finally:
        for a in aliases:
            con.execute(f"DETACH {quote_ident(a)}")
    return counts  # type: ignore[return-value]

def import_batches(store: Store, batch_dir: str, runs: list[dict]) -> tuple[int, int, int]:
    """Copy the Parquet batches of a Ray run (`batch_dir/*/{pairs,samples,errors}.parquet`)
    in; a later duplicate of a pair id across batches goes to `errors`. Returns (pairs,
    errors, duplicates)."""
    con = store.con
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
            store.add_columns(cols, con)
            sel = ", ".join(quote_ident(c) for c in cols)
            con.execute(f"INSERT INTO pairs ({sel}) SELECT {sel} FROM bp WHERE _rank = 1 "
                        "ORDER BY row_number")
            con.execute(f"""INSERT INTO samples BY NAME
                SELECT s.* EXCLUDE (_file) FROM read_parquet({glob("samples")},
                    filename = '_file') s
                JOIN bp ON bp.id = s.pair_id AND bp._rank = 1
                 AND parse_dirpath(bp._file) = parse_dirpath(s._file)""")
            con.execute(f"INSERT INTO errors BY NAME SELECT * FROM read_parquet({glob('errors')})")
            later = con.execute("""SELECT d.row_number, d.id, f.row_number, d.run_id
                FROM bp d JOIN bp f ON f.id = d.id AND f._rank = 1 WHERE d._rank > 1
                ORDER BY d.row_number""").fetchall()
            if later:
                insert_rows(con, "errors", [[rn, pid, duplicate_reason(rn, pid, first), run_id]
                                            for rn, pid, first, run_id in later],
                            ["row_number", "id", "reason", "run_id"])
            dups = len(later)
        for r in runs:
            cols = [c for c, _ in RUN_COLUMNS if r.get(c) is not None]
            con.execute(f"INSERT INTO runs ({', '.join(quote_ident(c) for c in cols)}) "
                        f"VALUES ({', '.join('?' for _ in cols)})", [r[c] for c in cols])

    store.write(statements)
    n_pairs = con.execute("SELECT count(*) FROM pairs").fetchone()[0]
    n_err = con.execute("SELECT count(*) FROM errors").fetchone()[0]
    return n_pairs, n_err, dups

def write_batch(store: Store, results: list[PairResult], errors: list[dict],
                dest_dir: str) -> None:
    """Commit a Ray batch into `store` (a scratch store) and write its tables as Parquet files
    into `dest_dir`, built under a temporary name beside it and moved into place whole; when
    another attempt placed `dest_dir` first, its files are kept and this one's dropped."""
    store.commit(results, errors)
    parent, name = os.path.split(os.path.abspath(dest_dir))
    make_dir(parent)
    tmp = os.path.join(parent, f".tmp-{name}-{uuid.uuid4().hex[:8]}")
    make_dir(tmp)
    try:
        for table in ("pairs", "samples", "errors"):
            write_query_file(store.con, f"SELECT * FROM {table}",
                             os.path.join(tmp, f"{table}.parquet"), "parquet")
        place_dir(tmp, dest_dir)
    finally:
        remove_tree(tmp)


class NewStore:
    """A store built under a temporary name next to `dest` and moved into place by `install`
    (merge, Ray assembly): `dest` is never seen half-written, and is replaced only while its
    lock is ours and only when it is an rmjudge store."""

    def __init__(self, dest: str, settings: dict, *, overwrite: bool):
        self.dest = dest
        prepare_dir(dest)
        check_not_busy(dest)
        if os.path.exists(dest):
            if not overwrite:
                raise StoreError(f"{dest} exists; use --overwrite to replace it or -o to write "
                                 "elsewhere")
            refuse_foreign(dest)
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
            remove_file(p)  # missing when never made, or cleaned as stale once unlocked

    def install(self) -> None:
        """Checkpoint, close, then replace `dest` while holding its lock."""
        try:
            self.store.con.execute("CHECKPOINT")
        except BaseException:
            self.discard()
            raise
        lock = None
        try:
            try:
                lock = Lock(self.dest, "writing")
            finally:
                # closed only now, so that the temporary is never unlocked while `dest`'s lock
                # is free (a run opening `dest` cleans temporaries without a live lock)
                self.store.close()
            refuse_foreign(self.dest)
            remove_file(self.dest + ".wal")
            replace_file(self.tmp, self.dest)
        except BaseException:
            for p in (self.tmp, self.tmp + ".wal"):
                remove_file(p)
            raise
        finally:
            if lock is not None:
                lock.release()
            remove_file(self.tmp + ".lock")
