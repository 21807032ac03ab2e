"""Rows written as a whole Parquet/JSONL file through an in-memory DuckDB table (the greedy
baseline's and a ranking's exports)."""

from __future__ import annotations

from rmjudge.core.sql import quote_ident
from rmjudge.files.atomic import write_query_file
from rmjudge.store.bulk import insert_rows
from rmjudge.store.schema import ddl


def write_rows_file(columns: list[tuple[str, str]], rows: list[list], path: str, fmt: str,
                    key: tuple[str, ...] = ()) -> None:
    """Write `rows` (later rows win on the same `key`) as a Parquet/JSONL file of `columns`."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        pk = f", PRIMARY KEY ({', '.join(quote_ident(k) for k in key)})" if key else ""
        con.execute(ddl("t", columns, pk))
        insert_rows(con, "t", rows, replace=bool(key))
        order = f" ORDER BY {', '.join(quote_ident(k) for k in key)}" if key else ""
        write_query_file(con, f"SELECT * FROM t{order}", path, fmt)
    finally:
        con.close()
