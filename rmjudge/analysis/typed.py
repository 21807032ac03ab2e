"""Recover the types of passthrough columns for the datasets `rmjudge filter` writes.

The run store keeps every passthrough input column as VARCHAR: strings as they were, any other
value JSON-encoded (`3`, `true`, `[1, 2]`, `{"k": "v"}`). On output each kept passthrough
column is converted back when, and only when, *every* non-null value of the column in the whole
judged table (not only the kept rows, so the schema does not depend on the filter) reads as the
same kind of JSON value:

- all `true`/`false` -> BOOLEAN;
- all JSON integers that fit 64 bits -> BIGINT;
- all JSON numbers -> DOUBLE (an integer beyond 64 bits keeps the column a string);
- all JSON arrays, or all JSON objects, whose merged structure has one type per place ->
  lists / structs (DuckDB `json_group_structure` + `from_json`); elements or fields whose
  types differ between rows (`[1, "a"]`) keep the column a string;
- all JSON string literals (`"2024-05-01T10:00:00"`: dates and other values the store wrote
  as JSON strings) -> VARCHAR without the quotes.

Anything else stays the string it was: a column where only some rows look like JSON, an empty
column, or text such as `0012`. The store cannot tell the string "3" from the number 3, so a
string column in which every value is a number (or `true`/`false`) comes back as numbers.
"""

from __future__ import annotations

import duckdb

from rmjudge.sql import quote_ident, sql_literal

_INT = r"-?(0|[1-9][0-9]*)"
_NUM = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"


def _structure(con: duckdb.DuckDBPyConnection, table: str, col: str) -> str | None:
    """The merged JSON structure of a column of arrays/objects as a DuckDB type string for
    `from_json`, or None when its rows disagree on a type somewhere."""
    q = quote_ident(col)
    s = con.execute(f"SELECT json_group_structure({q}::JSON) FROM {table} "
                    f"WHERE {q} IS NOT NULL").fetchone()[0]
    if s is None or '"JSON"' in str(s):
        return None
    # a place that is null in every row (an empty list, a field never set) reads as text;
    # unsigned integers become signed ones so that any consumer can read them
    return str(s).replace('"NULL"', '"VARCHAR"').replace('"UBIGINT"', '"BIGINT"')


def column_expression(con: duckdb.DuckDBPyConnection, table: str, col: str) -> str:
    """The SQL expression that reads passthrough column `col` of `table` with its type."""
    q = quote_ident(col)
    n, n_bool, n_int, n_int_fit, n_num, n_list, n_obj, n_str = con.execute(f"""
        SELECT count({q}),
               count(*) FILTER (WHERE {q} IN ('true', 'false')),
               count(*) FILTER (WHERE regexp_full_match({q}, '{_INT}')),
               count(*) FILTER (WHERE regexp_full_match({q}, '{_INT}')
                                AND TRY_CAST({q} AS BIGINT) IS NOT NULL),
               count(*) FILTER (WHERE regexp_full_match({q}, '{_NUM}')
                                AND TRY_CAST({q} AS DOUBLE) IS NOT NULL),
               count(*) FILTER (WHERE starts_with({q}, '[') AND json_valid({q})),
               count(*) FILTER (WHERE starts_with({q}, '{{') AND json_valid({q})),
               count(*) FILTER (WHERE starts_with({q}, '"') AND json_valid({q}))
        FROM {table}""").fetchone()
    if n == 0:
        return q
    if n_bool == n:
        return f"CAST({q} AS BOOLEAN)"
    if n_int == n and n_int_fit == n:
        return f"CAST({q} AS BIGINT)"
    if n_num == n and n_int_fit == n_int:
        return f"CAST({q} AS DOUBLE)"
    if n_str == n:
        return f"json_extract_string({q}, '$')"
    if n_list == n or n_obj == n:
        struct = _structure(con, table, col)
        if struct is None:
            return q
        expr = f"from_json({q}, {sql_literal(struct)})"
        try:  # a structure DuckDB cannot build (an empty key, ...) keeps the column a string
            con.execute(f"SELECT count({expr}) FROM {table}").fetchone()
        except duckdb.Error:
            return q
        return expr
    return q


def typed_columns(con: duckdb.DuckDBPyConnection, table: str,
                  columns: list[str]) -> dict[str, str]:
    """`column_expression` for each of `columns` (each sniffed over every row of `table`)."""
    return {c: column_expression(con, table, c) for c in columns}
