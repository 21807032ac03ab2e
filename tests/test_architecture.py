"""Module boundaries, checked on the source: no private names imported across modules, and
only the run store writes DuckDB files."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rmjudge", "training", "quantize", "benchmarks")


def _modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path, ast.parse(path.read_text(), str(path))


def test_no_private_name_is_imported_from_another_module():
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if not node.module.split(".")[0] in PACKAGES:
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(ROOT)}: from {node.module} import {alias.name}")
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name) \
                    and node.value.id in ("store", "engine", "table", "llama", "tables"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, "private names used across modules:\n" + "\n".join(found)


WRITES = ("INSERT", "UPDATE ", "DELETE ", "CREATE TABLE", "ALTER TABLE", "COPY ", "DROP TABLE")


def test_only_the_store_writes_duckdb_files():
    """Outside rmjudge/store.py, DuckDB is used to read (read_only connections, in-memory views
    over files); statements that write live in the store."""
    found = []
    for path, tree in _modules():
        rel = str(path.relative_to(ROOT))
        if rel == "rmjudge/store.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value.upper().lstrip()
                if any(text.startswith(w) for w in WRITES):
                    found.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
            if isinstance(node, ast.JoinedStr):
                first = node.values[0] if node.values else None
                if isinstance(first, ast.Constant) and isinstance(first.value, str) and \
                        any(first.value.upper().lstrip().startswith(w) for w in WRITES):
                    found.append(f"{rel}:{node.lineno}: f{first.value[:60]!r}")
    assert not found, "DuckDB writes outside the store:\n" + "\n".join(found)
