"""Quoting for the SQL rmjudge builds: identifiers and string literals are never pasted raw."""

from __future__ import annotations


def quote_ident(name: str) -> str:
    """A DuckDB identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


def sql_literal(value: str) -> str:
    """A DuckDB string literal, quoted (for statements that take no parameters, e.g. COPY)."""
    return "'" + value.replace("'", "''") + "'"
