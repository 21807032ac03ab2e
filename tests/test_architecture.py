"""Module boundaries, checked on the source: no private names imported across modules, and
only the run store (the package rmjudge/store/) writes, renames or deletes files."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rmjudge", "training", "quantize", "benchmarks")
STORE = "rmjudge/store/"


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
    """Outside rmjudge/store/, DuckDB is used to read (read_only connections, in-memory views
    over files); statements that write live in the store."""
    found = []
    for path, tree in _modules():
        rel = str(path.relative_to(ROOT))
        if rel.startswith(STORE):
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


# Calls that write, rename or delete a file, looked for outside rmjudge/store/ (which owns every
# such call): `open` with a writing mode, these `os`/`shutil` functions, the writing `Path`
# methods, and DuckDB connections that are not read-only (an in-memory one writes no file).
FILE_WRITES = {
    "os": {"remove", "unlink", "rename", "renames", "replace", "rmdir", "removedirs",
           "truncate"},
    "shutil": {"rmtree", "move", "copy", "copy2", "copyfile", "copytree"},
}
WRITE_CHECKED = ("rmjudge", "training", "quantize")  # the library; benchmarks/ are scripts
PATH_WRITES = {"write_text", "write_bytes", "unlink", "rmdir", "touch"}
PATH_MOVES = {"rename", "replace"}  # Path.rename(target): one argument (str.replace takes two)

# Files that are not run files, written by code outside the store. Each entry: the module and
# why its writes are not the store's business. Keep it short.
NOT_RUN_FILES = {
    # rmjudge's own caches under ~/.cache/rmjudge (measured throughput, Hub lookups)
    ("rmjudge/cache.py", ".write_text()"): "a cache in ~/.cache",
    ("rmjudge/cache.py", "os.replace()"): "a cache in ~/.cache",
    # a Ray worker's private copy of an input file's bytes, in its own TemporaryDirectory
    ("rmjudge/ray_runner.py", "open(..., 'wb')"): "a scratch copy of input, in a temp folder",
    # the training rollout cache and the GRPO log: training outputs, beside the checkpoints
    # that transformers writes itself
    ("training/cache.py", "open(..., 'wb')"): "the rollout cache (training)",
    ("training/cache.py", "open(..., 'ab')"): "the rollout cache (training)",
    ("training/grpo.py", "open(..., 'ab')"): "the training log, beside the checkpoints",
    # the converted Hugging Face copy of a GGUF model, in ~/.cache
    ("training/hf.py", ".write_text()"): "a model conversion cache in ~/.cache",
    # fills the temporary that rmjudge.store.write_produced hands it, which the store places
    ("training/data.py", "open(..., 'wb')"): "the store's temporary (write_produced)",
}


def _mode(call: ast.Call):
    """The mode of an `open(...)` call: its text, None when read-only by default, or "?"."""
    mode = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    if mode is None:
        return None
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "?"


def _writes(tree: ast.AST):
    """(line, call text) of each call in `tree` that writes, renames or deletes a file."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in FILE_WRITES:
            for alias in node.names:
                if alias.name in FILE_WRITES[node.module]:
                    yield node.lineno, f"from {node.module} import {alias.name}"
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            mode = _mode(node)
            if mode is not None and (mode == "?" or set(mode) & set("wax+")):
                yield node.lineno, f"open(..., {mode!r})"
        if not isinstance(f, ast.Attribute):
            continue
        owner = f.value.id if isinstance(f.value, ast.Name) else None
        if owner in FILE_WRITES and f.attr in FILE_WRITES[owner]:
            yield node.lineno, f"{owner}.{f.attr}()"
        elif owner == "duckdb" and f.attr == "connect":
            target = node.args[0] if node.args else None
            in_memory = target is None or (isinstance(target, ast.Constant)
                                           and target.value in (":memory:", ""))
            # read_only given, and not as a literal False (readers pass e.g. `path != ":memory:"`)
            read_only = any(k.arg == "read_only" and not (isinstance(k.value, ast.Constant)
                                                          and not k.value.value)
                            for k in node.keywords)
            if not (in_memory or read_only):
                yield node.lineno, "duckdb.connect() for writing"
        elif owner not in FILE_WRITES and owner != "duckdb":
            if f.attr in PATH_WRITES or (f.attr in PATH_MOVES and len(node.args) == 1
                                         and not node.keywords):
                yield node.lineno, f".{f.attr}()"


def test_only_the_store_writes_renames_or_deletes_files():
    found = []
    for path, tree in _modules():
        rel = str(path.relative_to(ROOT))
        if rel.startswith(STORE) or rel.split("/")[0] not in WRITE_CHECKED:
            continue
        found += [f"{rel}:{line}: {what}" for line, what in _writes(tree)
                  if (rel, what) not in NOT_RUN_FILES]
    assert not found, ("file writes outside rmjudge/store/ (call its functions, or add the "
                       "call to NOT_RUN_FILES with the reason):\n" + "\n".join(found))


def test_the_write_check_sees_each_kind_of_write():
    """The scan above finds what it looks for (and leaves reads alone)."""
    src = """
import os, shutil, duckdb
from pathlib import Path
from os import remove
open(p, "w"); open(p, mode="ab"); open(p, "r+"); open(p, m)
os.replace(a, b); os.remove(a); shutil.rmtree(d); shutil.move(a, b)
Path(p).write_text("x"); Path(p).unlink(); Path(p).rename(q)
duckdb.connect(p)
open(p); open(p, "rb"); "a-b".replace("-", "+"); duckdb.connect(p, read_only=True)
duckdb.connect(); duckdb.connect(":memory:"); os.path.exists(p)
"""
    found = [what for _, what in _writes(ast.parse(src))]
    assert found == [
        "from os import remove", "open(..., 'w')", "open(..., 'ab')", "open(..., 'r+')",
        "open(..., '?')", "os.replace()", "os.remove()", "shutil.rmtree()", "shutil.move()",
        ".write_text()", ".unlink()", ".rename()", "duckdb.connect() for writing",
    ], found
