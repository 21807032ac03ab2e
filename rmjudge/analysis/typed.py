"""Recover the types of passthrough columns for the datasets `rmjudge filter` writes.

Judged tables hold passthrough input columns in one of two ways:
- stores written by rmjudge 0.2.0 and later type them: numbers, booleans and strings as such,
  lists and objects as JSON, and VARCHAR (non-strings JSON-encoded) for a column whose values
  are of mixed kinds or of kinds JSON has no type for (dates...);
- older stores keep every passthrough column as VARCHAR, strings as they were and any other
  value JSON-encoded (`3`, `true`, `[1, 2]`, `{"k": "v"}`).

On output each kept passthrough column gets its type back:
- a number or boolean column is written as that type;
- a JSON, list or struct column becomes lists / structs (DuckDB `json_group_structure` +
  `from_json`) when the rows agree on one type per place (`[1, "a"]` next to `[2]` does not:
  such a column stays JSON text);
- a VARCHAR column is sniffed over *every* non-null value in the whole judged table (not only
  the kept rows, so the schema does not depend on the filter), and converted only when all of
  them read as the same kind of JSON value: all JSON string literals (`"2024-05-01T10:00:00"`,
  a date the store JSON-encoded) -> text without the quotes; and, for older stores (or exports
  whose store is gone) only, all `true`/`false` -> BOOLEAN, all JSON integers that fit 64 bits
  -> BIGINT, all JSON numbers -> DOUBLE (an integer beyond 64 bits keeps the column text), all
  arrays or all objects -> lists / structs as above.
Anything else stays the string it was: a column where only some rows look like JSON, an empty
column, or text such as `0012`. An older store cannot tell the string "3" from the number 3, so
there a string column in which every value is a number (or `true`/`false`) comes back as
numbers; stores of 0.2.0 and later keep that difference.
"""

from __future__ import annotations

import duckdb

from rmjudge.core.sql import quote_ident, sql_literal

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


def _nested(con: duckdb.DuckDBPyConnection, table: str, col: str) -> str | None:
    """`from_json` of a column of arrays or objects, or None when it cannot be typed."""
    struct = _structure(con, table, col)
    if struct is None:
        return None
    expr = f"from_json({quote_ident(col)}, {sql_literal(struct)})"
    try:  # a structure DuckDB cannot build (an empty key, ...) keeps the column a string
        con.execute(f"SELECT count({expr}) FROM {table}").fetchone()
    except duckdb.Error:
        return None
    return expr


def column_expression(con: duckdb.DuckDBPyConnection, table: str, col: str,
                      declared: str = "VARCHAR", sniff: bool = True) -> str:
    """The SQL expression that reads passthrough column `col` of `table` (where it is VARCHAR)
    with its type: `declared` is its type in the judged file, `sniff` whether a VARCHAR column
    may hold JSON-encoded numbers, booleans, lists and objects (stores older than 0.2.0)."""
    from rmjudge.analysis.tables import is_nested_type

    q = quote_ident(col)
    if declared == "JSON" or is_nested_type(declared):
        return _nested(con, table, col) or q
    if declared != "VARCHAR":
        return f"TRY_CAST({q} AS {declared})"
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
    if n_str == n:
        return f"json_extract_string({q}, '$')"
    if not sniff:
        return q
    if n_bool == n:
        return f"CAST({q} AS BOOLEAN)"
    if n_int == n and n_int_fit == n:
        return f"CAST({q} AS BIGINT)"
    if n_num == n and n_int_fit == n_int:
        return f"CAST({q} AS DOUBLE)"
    if n_list == n or n_obj == n:
        return _nested(con, table, col) or q
    return q


TYPED_SINCE = (0, 2, 0)


def _version(text: str | None) -> tuple[int, ...] | None:
    parts = []
    for p in str(text or "").split("."):
        digits = "".join(ch for ch in p if ch.isdigit()) if p[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def store_types_passthrough(table) -> bool:
    """True when the judged table's store typed its passthrough columns (every run by rmjudge
    0.2.0 or later); False for older stores and exports whose runs are unknown."""
    versions = [_version(r.get("version")) for r in table.runs()]
    return bool(versions) and all(v is not None and v >= TYPED_SINCE for v in versions)


def typed_columns(table, columns: list[str]) -> dict[str, str]:
    """`column_expression` for each of `columns` of a JudgedTable's `pairs` view."""
    sniff = not store_types_passthrough(table)
    return {c: column_expression(table.con, "pairs", c, table.source_types.get(c, "VARCHAR"),
                                 sniff) for c in columns}
