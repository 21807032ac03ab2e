"""Stores built whole, aside, and moved into place: `NewStore` (merge, Ray assembly, the jury
table), with the copying of shard stores (`import_stores`, `rmjudge merge`) and of a Ray run's
Parquet batches (`write_batch`, `import_batches`). A pair id seen again across batches is an
error row with the reason `rmjudge.io.intake` gives a duplicate id.
"""

from __future__ import annotations

import os
import re
import uuid

import orjson

from rmjudge.io.intake import duplicate_reason
from rmjudge.judging.protocol import PairResult
from rmjudge.core.sql import quote_ident, sql_literal
from rmjudge.store.bulk import insert_rows
from rmjudge.files import (Lock, StoreError, check_not_busy, check_not_sidecar, make_dir,
                           place_dir, prepare_dir,
                           remove_file, remove_tree, replace_file, swap_dir, write_json,
                           write_query_file)
from rmjudge.store.ownership import refuse_foreign
from rmjudge.store.run_store import Store
from rmjudge.store.schema import (PAIR_COLUMNS, RUN_COLUMNS, SCHEMA_VERSION, human_labels_ddl,
                                   wider)


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
            src = ["m.new_id" if c == "run_id" else f"t.{quote_ident(c)}"
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

BATCH_COLUMNS = "columns.json"  # a batch's passthrough columns: input key, column, type


def batch_columns(folder: str) -> list[tuple[str, str, str]] | None:
    """The passthrough columns of the batch `folder` as (input key, column, type), in the order
    its rows first held the keys; None for a folder without the record (a batch written by
    0.7, or the jury's): its columns are then taken by name with their Parquet types."""
    path = os.path.join(folder, BATCH_COLUMNS)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return [tuple(c) for c in orjson.loads(f.read())]  # type: ignore[misc]


def _parquet_types(con, path: str) -> dict[str, str]:
    return {r[0]: r[1] for r in con.execute(
        f"DESCRIBE SELECT * FROM read_parquet({sql_literal(path)})").fetchall()}


def _batch_plan(store: Store, con, folder: str) -> list[tuple[str, str, str]]:
    """The passthrough columns of a batch as (its column, the store's column, its type): by
    input key through the store's column map, as `Store.commit` names them, so keys that
    differ only by case stay apart across batches as they do in one run."""
    core = {c.lower() for c, _ in PAIR_COLUMNS}
    recorded = batch_columns(folder)
    if recorded is None:
        types = _parquet_types(con, os.path.join(folder, "pairs.parquet"))
        recorded = [(c, c, t) for c, t in types.items() if c.lower() not in core]
    return [(col, store.column_for(key), typ) for key, col, typ in recorded]


def import_batches(store: Store, batch_dir: str, runs: list[dict]) -> tuple[int, int, int]:
    """Copy the Parquet batches of a Ray run (`batch_dir/*/{pairs,samples,errors}.parquet`)
    in. Passthrough columns keep their types and are matched by input key (`BATCH_COLUMNS`),
    widened across batches as one run widens them (BIGINT -> DOUBLE -> VARCHAR, any other mix
    -> VARCHAR), and the key -> column map is saved as a run saves it. A later duplicate of a
    pair id across batches goes to `errors`. Returns (pairs, errors, duplicates)."""
    con = store.con
    have = [d for d in sorted(os.listdir(batch_dir)) if not d.startswith(".")]
    dups = 0

    def glob(t: str) -> str:
        return sql_literal(os.path.join(batch_dir, "*", f"{t}.parquet"))

    def statements(con) -> None:
        nonlocal dups
        if have:
            folders = [os.path.join(batch_dir, d) for d in have]
            plans = [_batch_plan(store, con, f) for f in folders]
            final: dict[str, str] = {}
            for plan in plans:
                for _, dest, typ in plan:
                    final[dest] = wider(final[dest], typ) if dest in final else typ
            for dest, typ in final.items():
                now = store.column_type(dest)
                if now is None:
                    store.add_columns({dest: typ}, con)
                elif wider(now, typ) != now:
                    store.widen(con, dest, wider(now, typ))
            # which copy of a pair id is kept: the first by row number, whichever batch
            files = ", ".join(sql_literal(os.path.join(f, "pairs.parquet")) for f in folders)
            con.execute(f"""CREATE TEMP TABLE batch_ids AS SELECT id, row_number, run_id,
                parse_dirpath(_file) AS dir, row_number() OVER (PARTITION BY id
                ORDER BY row_number) AS _rank
                FROM read_parquet([{files}], union_by_name = true, filename = '_file')""")
            groups: dict[tuple, list[str]] = {}  # batches alike: read together
            for folder, plan in zip(folders, plans):
                groups.setdefault(tuple(plan), []).append(folder)
            core = [c for c, _ in PAIR_COLUMNS]
            for plan, members in groups.items():
                dest = core + [d for _, d, _ in plan]
                src = [f"t.{quote_ident(c)}" for c in core] + [
                    f"CAST(t.{quote_ident(c)} AS {store.column_type(d)})" for c, d, _ in plan]
                paths = ", ".join(sql_literal(os.path.join(f, "pairs.parquet")) for f in members)
                con.execute(f"""INSERT INTO pairs ({', '.join(quote_ident(c) for c in dest)})
                    SELECT {', '.join(src)} FROM read_parquet([{paths}], filename = '_file') t
                    WHERE NOT EXISTS (SELECT 1 FROM batch_ids b WHERE b._rank > 1
                        AND b.id = t.id AND b.dir = parse_dirpath(t._file))
                    ORDER BY t.row_number""")
            con.execute(f"""INSERT INTO samples BY NAME
                SELECT s.* EXCLUDE (_file) FROM read_parquet({glob("samples")},
                    filename = '_file') s
                WHERE NOT EXISTS (SELECT 1 FROM batch_ids b WHERE b._rank > 1
                    AND b.id = s.pair_id AND b.dir = parse_dirpath(s._file))""")
            con.execute(f"INSERT INTO errors BY NAME SELECT * FROM read_parquet({glob('errors')})")
            later = con.execute("""SELECT d.row_number, d.id, f.row_number, d.run_id
                FROM batch_ids d JOIN batch_ids f ON f.id = d.id AND f._rank = 1
                WHERE d._rank > 1 ORDER BY d.row_number""").fetchall()
            con.execute("DROP TABLE batch_ids")
            if later:
                insert_rows(con, "errors", [[rn, pid, duplicate_reason(rn, pid, first), run_id]
                                            for rn, pid, first, run_id in later],
                            ["row_number", "id", "reason", "run_id"])
            dups = len(later)
            store.save_column_map(con)
        for r in runs:
            cols = [c for c, _ in RUN_COLUMNS if r.get(c) is not None]
            con.execute(f"INSERT INTO runs ({', '.join(quote_ident(c) for c in cols)}) "
                        f"VALUES ({', '.join('?' for _ in cols)})", [r[c] for c in cols])

    store.write(statements)
    n_pairs = con.execute("SELECT count(*) FROM pairs").fetchone()[0]
    n_err = con.execute("SELECT count(*) FROM errors").fetchone()[0]
    return n_pairs, n_err, dups


def batch_judged(folder: str) -> dict[str, tuple[int, str | None]]:
    """{pair id: (row number, content hash)} of the pairs a finished batch holds: what the
    intake of the same rows compares them to (a resume's changed-row check)."""
    import duckdb

    with duckdb.connect() as con:
        return {r[0]: (r[1], r[2]) for r in con.execute(
            "SELECT id, row_number, content_hash FROM read_parquet(?)",
            [os.path.join(folder, "pairs.parquet")]).fetchall()}


def load_batch(store: Store, folder: str) -> None:
    """Copy the finished batch `folder` into the scratch `store` (its column map and types
    adopted), so that judging some of its rows again writes the batch whole."""
    def statements(con) -> None:
        recorded = batch_columns(folder)
        pairs = os.path.join(folder, "pairs.parquet")
        if recorded is None:
            core = {c.lower() for c, _ in PAIR_COLUMNS}
            types = _parquet_types(con, pairs)
            recorded = [(c, c, t) for c, t in types.items() if c.lower() not in core]
        store.adopt_columns({k: c for k, c, _ in recorded}, {c: t for _, c, t in recorded}, con)
        for table in ("pairs", "samples", "errors"):
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM "
                        f"read_parquet({sql_literal(os.path.join(folder, table + '.parquet'))})")

    store.write(statements)


def write_batch(store: Store, results: list[PairResult], errors: list[dict],
                dest_dir: str, *, replaced: list[str] = (), previous: str | None = None) -> None:
    """Commit a Ray batch into `store` (a scratch store) and write its tables as Parquet files,
    with its passthrough columns (`BATCH_COLUMNS`), into `dest_dir`, built under a temporary name
    beside it and moved into place whole; when another attempt placed `dest_dir` first, its
    files are kept and this one's dropped. `previous`: the finished folder this batch
    supersedes (its rows judged again, or fewer rows of a file that grew since): the store
    already holds it (`load_batch`); the pairs in `replaced` are dropped as the new verdicts
    come in (`Store.commit`), and the new folder takes its place (`recover_batches` finishes
    a swap a killed worker left half done)."""
    store.commit(results, errors, replaced)
    parent, name = os.path.split(os.path.abspath(dest_dir))
    make_dir(parent)
    tmp = os.path.join(parent, f".tmp-{name}-{uuid.uuid4().hex[:8]}")
    make_dir(tmp)
    try:
        for table in ("pairs", "samples", "errors"):
            write_query_file(store.con, f"SELECT * FROM {table}",
                             os.path.join(tmp, f"{table}.parquet"), "parquet")
        cmap = store.column_map()
        write_json(os.path.join(tmp, BATCH_COLUMNS),
                   [[k, c, store.column_type(c)] for k, c in cmap.items()])
        if previous is None:
            place_dir(tmp, dest_dir)
            return
        previous = os.path.abspath(previous)
        if previous == os.path.abspath(dest_dir):
            swap_dir(tmp, dest_dir)
        else:
            place_dir(tmp, dest_dir)
            remove_tree(previous)
    finally:
        remove_tree(tmp)


def recover_batches(batch_dir: str) -> None:
    """Tidy the batch folders before a run reads them: a swap a killed worker left half done
    is finished the safe way (the folder it set aside goes back when no new one took its
    place), temporaries are removed, and of two folders of one file starting at the same row
    (a batch that grew with its file) the longer is kept. Only names rmjudge gives are
    touched."""
    if not os.path.isdir(batch_dir):
        return
    names = os.listdir(batch_dir)
    for n in sorted(names):
        m = _ASIDE.fullmatch(n)
        if m is None:
            continue
        full, target = os.path.join(batch_dir, n), os.path.join(batch_dir, m.group(2))
        if m.group(1) == "old" and not os.path.exists(target):
            place_dir(full, target)
        else:
            remove_tree(full)
    by_start: dict[str, list[str]] = {}
    for n in os.listdir(batch_dir):
        m = _BATCH_KEY.fullmatch(n)
        if m is not None:
            by_start.setdefault(m.group(1), []).append(n)
    for members in by_start.values():
        for n in sorted(members)[:-1]:  # the last row is zero-padded: the longest sorts last
            remove_tree(os.path.join(batch_dir, n))


_ASIDE = re.compile(r"\.(tmp|old)-(.+)-[0-9a-f]{8}")
_BATCH_KEY = re.compile(r"(f\d{5}-r\d{12})-\d{12}")


class NewStore:
    """A store built under a temporary name next to `dest` and moved into place by `install`
    (merge, Ray assembly): `dest` is never seen half-written, and is replaced only while its
    lock is ours and only when it is an rmjudge store."""

    def __init__(self, dest: str, settings: dict, *, overwrite: bool):
        self.dest = dest
        check_not_sidecar(dest)
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

    def install(self, carry=None) -> None:
        """Checkpoint, close, then replace `dest` while holding its lock. `carry(store)`, when
        given and `dest` exists, runs once that lock is held, before the new store closes: what
        it keeps of the store it replaces (the jury's human labels: `carry_human_labels`); it
        may refuse by raising, and `dest` is then left as it was."""
        try:
            self.store.con.execute("CHECKPOINT")
        except BaseException:
            self.discard()
            raise
        lock = None
        try:
            try:
                lock = Lock(self.dest, "writing")
                if carry is not None and os.path.exists(self.dest):
                    carry(self.store)
                    self.store.con.execute("CHECKPOINT")
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


def carry_human_labels(store: Store, old: str) -> list[str]:
    """Copy the human labels (`human_labels`) of the store `old` into `store`, which is being
    built to replace it: each label follows its pair id to the pair holding the same two
    responses, in the same slots (kept as it is) or exchanged (A and B of the label exchanged,
    so it names the same response), with its reviewer, source and import time. Returns the
    pair ids of labels that find no such pair in `store` (then nothing is copied)."""
    con = store.con
    con.execute(f"ATTACH {sql_literal(old)} AS carried (READ_ONLY)")
    try:
        if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = "
                           "'carried' AND table_name = 'human_labels'").fetchone()[0]:
            return []
        con.execute("""CREATE TEMP TABLE carried_labels AS
            SELECT h.*, (n.id IS NOT NULL AND o.id IS NOT NULL
                         AND o.response_a IS NOT DISTINCT FROM n.response_a
                         AND o.response_b IS NOT DISTINCT FROM n.response_b) AS same,
                   (n.id IS NOT NULL AND o.id IS NOT NULL
                    AND o.response_a IS NOT DISTINCT FROM n.response_b
                    AND o.response_b IS NOT DISTINCT FROM n.response_a) AS swapped
            FROM carried.human_labels h LEFT JOIN carried.pairs o ON o.id = h.pair_id
            LEFT JOIN pairs n ON n.id = h.pair_id""")
        lost = [r[0] for r in con.execute("SELECT DISTINCT pair_id FROM carried_labels WHERE "
                                          "NOT (same OR swapped) ORDER BY pair_id").fetchall()]
        if lost:
            return lost

        def statements(con) -> None:
            con.execute(human_labels_ddl())
            con.execute("""INSERT INTO human_labels BY NAME
                SELECT pair_id, reviewer, CASE WHEN same THEN label WHEN label = 'A' THEN 'B'
                    WHEN label = 'B' THEN 'A' ELSE label END AS label, source, imported
                FROM carried_labels""")

        store.write(statements)
        return []
    finally:
        con.execute("DROP TABLE IF EXISTS carried_labels")
        con.execute("DETACH carried")
