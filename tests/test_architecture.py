"""Module boundaries, checked on the source: no private names imported across modules, no
import circle, and only the run store writes DuckDB files."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rmjudge", "training", "quantize", "benchmarks")


def _modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path, ast.parse(path.read_text(), str(path))


def _project_import(node: ast.ImportFrom) -> bool:
    return bool(node.level) or (node.module or "").split(".")[0] in PACKAGES


def test_no_private_name_is_imported_from_another_module():
    """No `from m import _name` (absolute or relative), and no `m._name` on a name bound by an
    import of the project (`import rmjudge.x as m`, `from rmjudge import x`, a class imported
    from another module)."""
    found = []
    for path, tree in _modules():
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PACKAGES:
                        imported.add(alias.asname or alias.name.split(".")[0])
                        if any(_private(part) for part in alias.name.split(".")):
                            found.append(f"{path.relative_to(ROOT)}: import {alias.name}")
            if isinstance(node, ast.ImportFrom) and _project_import(node):
                for alias in node.names:
                    imported.add(alias.asname or alias.name)
                    if _private(alias.name) or any(_private(p) for p in (node.module or "").split(".")):
                        found.append(f"{path.relative_to(ROOT)}: from {'.' * node.level}"
                                     f"{node.module or ''} import {alias.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and (
                        base.id in imported
                        or base.id in ("store", "engine", "table", "llama", "tables")):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "private names used across modules:\n" + "\n".join(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_names() -> dict[str, Path]:
    """Dotted name -> file, for every module of rmjudge/, training/ and quantize/."""
    names = {}
    for pkg in ("rmjudge", "training", "quantize"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names[".".join(parts)] = path
    return names


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _top_level_imports(tree: ast.Module):
    """Import statements run when the module is imported: at module level, in module-level
    `if`/`try` blocks and class bodies, not in functions nor under `if TYPE_CHECKING`."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                or _type_checking(node):
            continue
        else:
            stack.extend(ast.iter_child_nodes(node))


def import_graph(imports=None) -> dict[str, set[str]]:
    """Module -> the project modules its top-level imports (or those `imports` yields) load.
    `from pkg import mod` counts as an import of `pkg.mod`; `from pkg import name` as one of
    `pkg`. A parent package that Python imports on the way is not counted (every submodule
    would depend on it)."""
    names = _module_names()
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in (imports or _top_level_imports)(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base
                           for alias in node.names]
            for target in targets:
                while target and target not in names:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (a -> b -> ... -> a), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    assert "rmjudge.io.rows" in graph["rmjudge.io.huggingface"]  # the graph sees imports
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def _deferred_imports(tree: ast.Module):
    """Import statements inside functions (run when the function is called)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    yield inner


def test_no_deferred_import_closes_a_circle():
    """An import inside a function that loads a module which imports this one back (at its top
    level) is a circle too, only hidden until the call. The package facade `rmjudge/__init__.py`
    (lazy `rmjudge.Judge`, `rmjudge.score`, ...) is the one module that may do that."""
    top = import_graph()
    deferred = import_graph(_deferred_imports)
    found = []
    for name, deps in deferred.items():
        if name == "rmjudge":
            continue
        for dep in sorted(deps - top[name]):
            back = find_cycle({**top, name: top[name] | {dep}})
            if back is not None and name in back:
                found.append(" -> ".join(back))
    assert not found, "deferred imports that close a circle:\n" + "\n".join(found)


def test_the_circle_check_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


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


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            ids.add(id(node.body[0].value))
    return ids


def test_the_verdict_markup_is_spelled_only_in_prompts():
    """`<Result>` and `</Result>` (the verdict tags, and the stop string) come from
    `rmjudge.prompts`: no other module spells them in code (docstrings may name them)."""
    found = []
    for path, tree in _modules():
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("rmjudge", "prompts"):
            continue
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docs and ("<Result>" in node.value or "</Result>" in node.value):
                found.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    assert not found, "verdict tags outside rmjudge/prompts:\n" + "\n".join(found)


def test_sql_quoting_is_written_once():
    """Identifiers and string literals are quoted by `rmjudge.sql` only: no other module doubles
    quotes itself (`.replace("'", "''")`)."""
    found = []
    for path, tree in _modules():
        rel = path.relative_to(ROOT)
        if str(rel) == "rmjudge/sql.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "replace" and len(node.args) == 2 \
                    and all(isinstance(a, ast.Constant) for a in node.args) \
                    and [a.value for a in node.args] in (["'", "''"], ['"', '""']):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:60]}")
    assert not found, "SQL quoting outside rmjudge/sql.py:\n" + "\n".join(found)
