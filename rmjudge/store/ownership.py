"""Which DuckDB files are rmjudge's run stores: only those are ever written, replaced or
deleted; a DuckDB database without rmjudge's tables, or any other file, given as the output is
refused and left untouched (`refuse_foreign`)."""

from __future__ import annotations

import os

from rmjudge.files.errors import StoreBusyError, StoreError
from rmjudge.files.folders import remove_file
from rmjudge.files.heads import is_duckdb_file
from rmjudge.store.schema import missing_core_tables, not_a_store_message

LEAVE_FIX = "it is left untouched: choose another -o"


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
        if tables:
            return not missing_core_tables(tables)
        # no table: an empty database is rmjudge's to use, anything else in it is someone
        # else's (asked only here: listing the functions costs more than the rest together)
        others = con.execute("""
            SELECT (SELECT count(*) FROM duckdb_views() WHERE NOT internal)
                 + (SELECT count(*) FROM duckdb_sequences())
                 + (SELECT count(*) FROM duckdb_functions() WHERE NOT internal)
                 + (SELECT count(*) FROM duckdb_types() WHERE NOT internal)
                 + (SELECT count(*) FROM duckdb_schemas() WHERE NOT internal
                      AND schema_name NOT IN ('main', 'pg_catalog', 'information_schema'))
        """).fetchone()[0]
        return others == 0
    finally:
        con.close()


def refuse_foreign(path: str) -> None:
    """Refuse (StoreError) a `path` that is not an rmjudge store, or a write-ahead log left
    without its database."""
    if not os.path.exists(path) and os.path.exists(path + ".wal"):
        raise StoreError(
            f"{path}.wal exists without {path} (a write-ahead log of a database that is gone, "
            "perhaps not rmjudge's); it is left untouched: move it away or choose another -o")
    if os.path.exists(path) and not is_rmjudge_store(path):
        raise StoreError(not_a_store_message(path, LEAVE_FIX, " (rmjudge did not create it)",
                                             exists=True))


def remove_files(path: str) -> None:
    """Delete a store's database and write-ahead log (the caller holds its lock)."""
    for p in (path, path + ".wal"):
        if os.path.exists(p):
            remove_file(p)
