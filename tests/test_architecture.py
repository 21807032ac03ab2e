"""Module boundaries, checked on the source: the layers in their order (LAYERS: no import
reaches a higher layer, no two folders import each other), no private names imported across
modules, no import circle, and only the safe-file library (the package rmjudge/files/) writes,
renames, deletes or creates files and folders, or hands a folder to another library's saver."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rmjudge", "training", "quantize", "benchmarks")
STORE = "rmjudge/store/"
FILES = "rmjudge/files/"


@functools.lru_cache(maxsize=None)
def _parse(path: Path) -> ast.Module:
    """A source file's tree, parsed once per test run (the checks only read the trees)."""
    return ast.parse(path.read_text(), str(path))


def _modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path, _parse(path)


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
    """Dotted name -> file, for every module of rmjudge/, training/ and quantize/, named as it is
    imported: the folders training/ and quantize/ are the packages rmjudge.training and
    rmjudge.quantize (docs/development.md, "Building the package")."""
    names = {}
    for pkg in ("rmjudge", "training", "quantize"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names[".".join(parts if pkg == "rmjudge" else ["rmjudge", *parts])] = path
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
        for node in (imports or _top_level_imports)(_parse(path)):
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


def all_imports(top: dict[str, set[str]], deferred: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module -> every project module it imports, at its top level or inside a function, less
    the package facade `rmjudge/__init__.py`'s own imports (lazy `rmjudge.score`,
    `rmjudge.open_store`, ...: the one module that may import what imports it)."""
    return {name: (set() if name == "rmjudge" else top.get(name, set()) | deferred.get(name, set()))
            for name in top.keys() | deferred.keys()}


def test_no_import_circle_through_deferred_imports():
    """An import inside a function is an import too, only run later: no circle of modules through
    any mix of top-level and deferred imports (a circle of deferred imports alone included), so
    that each module's job sits in one place and the layers read one way."""
    cycle = find_cycle(all_imports(import_graph(), import_graph(_deferred_imports)))
    assert cycle is None, "import circle (top-level and deferred imports): " + " -> ".join(cycle)


def test_the_circle_check_sees_deferred_imports():
    """A circle made only of imports inside functions, and one that mixes both kinds, are found;
    the facade's lazy imports are not circles."""
    top = {"m.a": set(), "m.b": set(), "m.c": {"m.a"}, "rmjudge": set(), "m.d": {"rmjudge"}}
    deferred = {"m.a": {"m.b"}, "m.b": {"m.a"}, "m.c": set(), "rmjudge": {"m.d"}, "m.d": set()}
    assert find_cycle(all_imports(top, deferred)) == ["m.a", "m.b", "m.a"]
    mixed = {**deferred, "m.a": {"m.c"}, "m.b": set()}
    assert find_cycle(all_imports(top, mixed)) == ["m.a", "m.c", "m.a"]
    assert find_cycle(all_imports(top, {**mixed, "m.a": set()})) is None
    # planted in the source: two modules that import each other inside functions
    trees = {"m.a": ast.parse("def f():\n    from m.b import g\n"),
             "m.b": ast.parse("import os\ndef g():\n    import m.a\n")}
    found = {n: {(i.module if isinstance(i, ast.ImportFrom) else i.names[0].name)
                 for i in _deferred_imports(t)} for n, t in trees.items()}
    assert find_cycle(all_imports({n: set() for n in trees}, found)) == ["m.a", "m.b", "m.a"]


def test_the_circle_check_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


# The layers, lowest first: a module imports only from its own layer and the ones below it,
# at its top level or inside a function (docs/architecture.md draws them). A layer is the
# folders of rmjudge/ it names (or the package `training`, `quantize`); a folder not there yet
# is simply absent. The package facade `rmjudge` (rmjudge/__init__.py, rmjudge/__main__.py)
# sits on top; any module may still read its `__version__`, since Python has loaded the facade
# before any module of rmjudge (and the facade imports its layers only when a name is used).
LAYERS = (
    ("core",),  # shared values and small services
    ("io",),  # reading inputs
    ("files",),  # safe files: locks, atomic writes, temporaries, output guards, the cache
    ("prompts",),  # the judge's prompts, verdict parsing, the template sandbox
    ("models",),  # model files found, cached, merged, checked and read; llama.cpp's library
    ("servers",),  # OpenAI-compatible servers: the client, request bodies, prompts, responses
    ("engine",),  # the Engine protocol, the engines and their registry, the token budget
    ("judging",),  # the protocol, the run spec, the Judge
    ("store",),  # the DuckDB run store
    ("runs",),  # the run set-up, the pipeline, dry run, merge, Ray
    ("analysis",),  # judged outputs read: eval, report, filter, compare
    ("review",),  # human review
    ("publish",),  # dataset cards and uploads
    ("rank",),  # best-of-N ranking (bench's RewardBench 2 and RMB Best-of-N run through it)
    ("bench",),  # standard benchmarks
    ("view",),  # the viewer
    ("cli", "api"),  # the front doors: the commands, the Python API
    ("quantize",),  # rmjudge-export
    ("training",),  # rmjudge-train (uses quantize's HF loading)
    ("rmjudge",),  # the facade
)
ROOT_MODULES = {"rmjudge", "rmjudge.__main__"}  # all that stays at the root of rmjudge/


def drawn_layers(text: str) -> list[tuple[str, ...]]:
    """The layers docs/architecture.md draws under "## Layers", lowest first: each line of its
    first code block names the folders of one layer (`cli/  api/`; the facade's line names
    `rmjudge/__init__.py`)."""
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    layers = []
    for line in block.strip("\n").splitlines():
        if not line[:22].strip():  # a description's second line
            continue
        head = line.split("  ")[0].strip() if not line.startswith(" rmjudge/") else "rmjudge"
        names = re.findall(r"([a-z_]+)/", line[:22]) if head != "rmjudge" else ["rmjudge"]
        layers.append(tuple(names))
    return layers[::-1]


def test_the_drawn_layers_are_the_checked_layers():
    """The picture in docs/architecture.md and LAYERS name the same layers in the same order."""
    assert drawn_layers((ROOT / "docs" / "architecture.md").read_text()) == list(LAYERS)


def test_a_picture_out_of_order_is_found():
    text = (ROOT / "docs" / "architecture.md").read_text()
    swapped = text.replace(" bench/", " BENCH/", 1).replace(" rank/ ", " bench/", 1).replace(
        " BENCH/", " rank/", 1)
    assert drawn_layers(swapped) != list(LAYERS)


def _folder(module: str) -> str:
    """The layer folder of a module: `rmjudge.engine.llama` -> "engine", `rmjudge.training.sft`
    -> "training", the facade `rmjudge` and `rmjudge.__main__` -> "rmjudge"."""
    parts = module.split(".")
    if parts[0] != "rmjudge":
        return parts[0]
    return "rmjudge" if module in ROOT_MODULES else parts[1]


def _layer(module: str) -> int:
    """The index of a module's layer in LAYERS (-1 for a folder in none: the test above names
    it)."""
    folder = _folder(module)
    return next((i for i, names in enumerate(LAYERS) if folder in names), -1)


def test_every_module_is_in_a_layer_and_the_root_holds_only_the_facade():
    names = set(_module_names())
    loose = sorted(n for n in names if n.count(".") == 1 and n.startswith("rmjudge.")
                   and n not in ROOT_MODULES and (ROOT / "rmjudge" / f"{n.split('.')[1]}.py").exists())
    assert not loose, "modules at the root of rmjudge/ (move them into a layer's folder):\n" + \
        "\n".join(loose)
    known = {f for names in LAYERS for f in names}
    unplaced = sorted({_folder(n) for n in names} - known)
    assert not unplaced, "folders in no layer (add them to LAYERS and docs/architecture.md):\n" + \
        "\n".join(unplaced)


def test_no_import_reaches_a_higher_layer():
    """Top-level and deferred imports alike, a module imports from its own layer or a lower
    one; the facade's `__version__` is the one exception (see LAYERS)."""
    found = []
    for kind, graph in (("", import_graph()), ("deferred ", import_graph(_deferred_imports))):
        for name, deps in sorted(graph.items()):
            for dep in sorted(deps):
                if dep != "rmjudge" and _layer(dep) > _layer(name) >= 0:
                    found.append(f"{kind}{name} ({_folder(name)}) -> {dep} ({_folder(dep)})")
    assert not found, "imports from a lower layer to a higher one:\n" + "\n".join(found)


def test_no_loop_between_folders():
    """Folder to folder (top-level and deferred imports together), the graph has no circle:
    the layer order alone would allow two folders of one layer to import each other."""
    folders: dict[str, set[str]] = {}
    for graph in (import_graph(), import_graph(_deferred_imports)):
        for name, deps in graph.items():
            folders.setdefault(_folder(name), set()).update(
                _folder(d) for d in deps if d != "rmjudge" and _folder(d) != _folder(name))
    cycle = find_cycle(folders)
    assert cycle is None, "folders that import each other: " + " -> ".join(cycle)


def test_the_layer_check_sees_an_upward_import():
    assert _layer("rmjudge.core.errors") < _layer("rmjudge.engine.llama") < _layer("rmjudge.cli")
    assert _layer("rmjudge.rank.runner") < _layer("rmjudge.bench.runner") < _layer("rmjudge.view.app")
    assert _layer("rmjudge.cli.score") == _layer("rmjudge.api.judging") > _layer("rmjudge.view.x")
    assert _folder("rmjudge") == _folder("rmjudge.__main__") == "rmjudge"
    graph = import_graph()
    assert "rmjudge.judging.runspec" in graph["rmjudge.judging.judge"]  # the graph sees imports
    deferred = import_graph(_deferred_imports)
    assert any(_layer(d) < _layer(n) for n, deps in deferred.items() for d in deps)
    # rmjudge-train's and rmjudge-export's modules are in the graph under their import names
    assert "rmjudge.quantize.hfio" in deferred["rmjudge.training.hf"]
    assert _layer("rmjudge.cli.score") < _layer("rmjudge.quantize.hfio") < _layer("rmjudge.training.hf")



def command_modules() -> set[str]:
    """The modules of the commands: each module of rmjudge/cli/ (and training's and quantize's
    cli.py) that defines a click command or group (a function decorated with `click.command`,
    `click.group` or a group's `.command`). The other modules of cli/ (options, layout,
    common, run_options, ...) are what the commands share."""
    found = set()
    for name, path in _module_names().items():
        if not (name.startswith("rmjudge.cli.") or name.endswith(".cli")):
            continue
        for node in ast.walk(_parse(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    re.search(r"(^|\.)(command|group)$", ast.unparse(
                        d.func if isinstance(d, ast.Call) else d)) for d in node.decorator_list):
                found.add(name)
                break
    return found


def front_door_violations(graphs, commands: set[str]) -> list[str]:
    """Imports (top-level and deferred, from `graphs`) of a command module by another command
    module, and of anything in rmjudge/cli/ by rmjudge/api/."""
    found = []
    for graph in graphs:
        for name, deps in sorted(graph.items()):
            for dep in sorted(deps):
                if name in commands and dep in commands and dep != name:
                    found.append(f"{name} -> {dep} (a command module imports another)")
                if _folder(name) == "api" and _folder(dep) == "cli":
                    found.append(f"{name} -> {dep} (api imports cli)")
    return sorted(set(found))


def test_commands_are_front_doors():
    """A command parses its options, makes one library call and prints: what two commands share
    lives in the library or in a module of cli/ that is no command, so no command module
    imports another; the Python API imports nothing from cli/ (what both need is below them)."""
    commands = command_modules()
    assert {"rmjudge.cli.score", "rmjudge.cli.rank", "rmjudge.cli.bench"} <= commands
    assert "rmjudge.cli.options" not in commands and "rmjudge.cli.run_options" not in commands
    found = front_door_violations((import_graph(), import_graph(_deferred_imports)), commands)
    assert not found, "front doors that lean on each other:\n" + "\n".join(found)


def test_the_front_door_check_finds_a_planted_violation():
    commands = command_modules()
    graph = {name: set(deps) for name, deps in import_graph(_deferred_imports).items()}
    graph["rmjudge.cli.bench"].add("rmjudge.cli.score")
    graph["rmjudge.api.judging"].add("rmjudge.cli.common")
    assert front_door_violations([graph], commands) == [
        "rmjudge.api.judging -> rmjudge.cli.common (api imports cli)",
        "rmjudge.cli.bench -> rmjudge.cli.score (a command module imports another)",
    ]
    assert front_door_violations([{"rmjudge.cli.rank": {"rmjudge.cli.run_options"}}],
                                 commands) == []


WRITES = ("INSERT", "UPDATE ", "DELETE ", "CREATE TABLE", "ALTER TABLE", "COPY ", "DROP TABLE")


def test_only_the_store_writes_duckdb_files():
    """Outside rmjudge/store/, DuckDB is used to read (read_only connections, in-memory views
    over files); statements that write live in the store, and in rmjudge/files/ the one `COPY`
    of a query into a file (`write_query_file`, into a temporary it places)."""
    found = []
    for path, tree in _modules():
        rel = str(path.relative_to(ROOT))
        if rel.startswith((STORE, FILES)):
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


# Calls that write, rename or delete a file, looked for outside rmjudge/files/ (which owns every
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

# Files that are not run files, written by code outside rmjudge/files/. Each entry: the module
# and why its writes are not rmjudge/files/'s business. Keep it short.
NOT_RUN_FILES = {
    # the training rollout cache and the GRPO log: training outputs, beside the checkpoints
    # that transformers writes itself
    ("training/cache.py", "open(..., 'wb')"): "the rollout cache (training)",
    ("training/cache.py", "open(..., 'ab')"): "the rollout cache (training)",
    ("training/grpo.py", "open(..., 'ab')"): "the training log, beside the checkpoints",
    # fills the temporary that rmjudge.files.write_produced hands it, which it places
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


STORE_OWN = "duckdb.connect() for writing"


def test_only_rmjudge_files_writes_renames_or_deletes_files():
    """Only rmjudge/files/ writes, renames or deletes files (besides the few NOT_RUN_FILES).

    The run store (rmjudge/store/) may open its own DuckDB file for writing, and nothing
    else: DuckDB owns that file (its pages, its write-ahead log, its checkpoints), so the
    store hands the path to `duckdb.connect` itself; creating its folder, taking its lock,
    placing a store built aside, and removing a store, a stale log or an export all go through
    rmjudge/files/ like everyone else's files."""
    found = []
    for path, tree in _modules():
        rel = str(path.relative_to(ROOT))
        if rel.startswith(FILES) or rel.split("/")[0] not in WRITE_CHECKED:
            continue
        found += [f"{rel}:{line}: {what}" for line, what in _writes(tree)
                  if (rel, what) not in NOT_RUN_FILES
                  and not (rel.startswith(STORE) and what == STORE_OWN)]
    assert not found, ("file writes outside rmjudge/files/ (call its functions, or add the "
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


# Calls that create a file or folder, or let another library write a folder, looked for
# everywhere outside rmjudge/files/ (the library and benchmarks/ alike; no exceptions): folders
# are made by `make_dir`, `prepare_dir`, `scratch` or `TempDir`, and other
# libraries' savers (`save_pretrained`, `save_state`, `save_model`, `torch.save`) are handed as
# functions to `save_folder` or `write_folder`, which call them with a temporary folder beside
# the output and move it into place whole.
CREATE_CHECKED = ("rmjudge", "training", "quantize", "benchmarks")
CREATES = {"os": {"mkdir", "makedirs"},
           "tempfile": {"mkdtemp", "mkstemp", "TemporaryDirectory", "NamedTemporaryFile"},
           "torch": {"save"}}
SAVERS = {"save_pretrained", "save_state", "save_model"}


def _creates(tree: ast.AST):
    """(line, call text) of each call in `tree` that creates a file or folder itself, or calls
    another library's saver."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in CREATES:
            for alias in node.names:
                if alias.name in CREATES[node.module]:
                    yield node.lineno, f"from {node.module} import {alias.name}"
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        owner = f.value.id if isinstance(f.value, ast.Name) else None
        if owner in CREATES and f.attr in CREATES[owner]:
            yield node.lineno, f"{owner}.{f.attr}()"
        elif f.attr == "mkdir" or f.attr in SAVERS:
            yield node.lineno, f".{f.attr}()"


def test_only_rmjudge_files_creates_folders_and_calls_savers():
    found = []
    for path, tree in _modules():
        rel = str(path.relative_to(ROOT))
        if rel.startswith(FILES) or rel.split("/")[0] not in CREATE_CHECKED:
            continue
        found += [f"{rel}:{line}: {what}" for line, what in _creates(tree)]
    assert not found, ("folders created or savers called outside rmjudge/files/ (use "
                       "make_dir, scratch, TempDir, save_folder or write_folder):\n"
                       + "\n".join(found))


def test_the_create_check_sees_each_kind_of_create():
    """The scan above finds a direct `mkdir` and each other kind (and leaves the helpers and a
    saver handed over uncalled alone)."""
    src = """
import os, tempfile, torch
from pathlib import Path
from tempfile import mkdtemp
Path(p).mkdir(parents=True); os.mkdir(p); os.makedirs(p, exist_ok=True)
tempfile.mkdtemp(); tempfile.mkstemp(); tempfile.TemporaryDirectory(); tempfile.NamedTemporaryFile()
model.save_pretrained(d); trainer.save_state(); trainer.save_model(d); torch.save(x, p)
make_dir(p); save_folder(p, model.save_pretrained); tempfile.gettempdir(); os.path.isdir(p)
"""
    found = [what for _, what in _creates(ast.parse(src))]
    assert found == [
        "from tempfile import mkdtemp", ".mkdir()", "os.mkdir()", "os.makedirs()",
        "tempfile.mkdtemp()", "tempfile.mkstemp()", "tempfile.TemporaryDirectory()",
        "tempfile.NamedTemporaryFile()", ".save_pretrained()", ".save_state()",
        ".save_model()", "torch.save()",
    ], found
    assert [w for _, w in _creates(ast.parse("os.makedirs(out)\n"))] == ["os.makedirs()"]


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
    """Identifiers and string literals are quoted by `rmjudge.core.sql` only: no other module doubles
    quotes itself (`.replace("'", "''")`)."""
    found = []
    for path, tree in _modules():
        rel = path.relative_to(ROOT)
        if str(rel) == "rmjudge/core/sql.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "replace" and len(node.args) == 2 \
                    and all(isinstance(a, ast.Constant) for a in node.args) \
                    and [a.value for a in node.args] in (["'", "''"], ['"', '""']):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:60]}")
    assert not found, "SQL quoting outside rmjudge/core/sql.py:\n" + "\n".join(found)


def _passes_through(fn: ast.FunctionDef) -> bool:
    """`def f(a, b): return g(a, b)`: a body (past the docstring) that only hands its own
    parameters, in order and unchanged, to another function."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
        return False
    call = body[0].value
    params = [a.arg for a in fn.args.args]
    return bool(params) and not call.keywords and [
        a.id if isinstance(a, ast.Name) else None for a in call.args] == params


def test_no_module_function_is_a_one_line_alias():
    """A module-level function that only passes its parameters on to another is a second name
    for one thing: callers use the real name (methods are exempt: they implement an interface)."""
    found = [f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}"
             for path, tree in _modules() for node in tree.body
             if isinstance(node, ast.FunctionDef) and _passes_through(node)]
    assert not found, "one-line aliases:\n" + "\n".join(found)


def test_the_alias_check_finds_an_alias():
    tree = ast.parse('def export_lock(path):\n    """doc"""\n    return store_path(path)\n'
                     'def other(path):\n    return store_path(path, 1)\n')
    assert [_passes_through(f) for f in tree.body] == [True, False]


MAX_FUNCTION_LINES = 80
LENGTH_CHECKED = ("rmjudge", "training", "quantize")


def _longer_than(tree: ast.Module, limit: int, kinds: tuple[type, ...]) -> list[tuple[str, int, int]]:
    """(qualified name, first line, lines) of every definition of `kinds` in `tree` (functions,
    methods, classes; nested ones included) longer than `limit` lines from its first line to
    its last."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                lines = child.end_lineno - child.lineno + 1
                if isinstance(child, kinds) and lines > limit:
                    found.append((name, child.lineno, lines))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def long_functions(tree: ast.Module, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """Every function and method of `tree` longer than `limit` lines (`_longer_than`)."""
    return _longer_than(tree, limit, (ast.FunctionDef, ast.AsyncFunctionDef))


def test_no_function_is_longer_than_80_lines():
    """A function or method of the library (rmjudge/, training/, quantize/) fits in 80 lines:
    a longer one is split into named steps."""
    found = [f"{path.relative_to(ROOT)}:{line}: {name} ({lines} lines)"
             for pkg in LENGTH_CHECKED for path in sorted((ROOT / pkg).rglob("*.py"))
             for name, line, lines in long_functions(_parse(path))]
    assert not found, (f"functions over {MAX_FUNCTION_LINES} lines (split them into named "
                       "steps):\n" + "\n".join(found))


def test_the_length_check_finds_long_functions_and_methods():
    def source(name: str, lines: int, indent: str = "") -> str:
        return f"{indent}def {name}():\n" + "".join(f"{indent}    x = {i}\n" for i in range(lines - 1))

    tree = ast.parse(source("long", 81) + source("short", 80) + "class C:\n"
                     + source("method", 82, "    "))
    assert long_functions(tree) == [("long", 1, 81), ("C.method", 163, 82)]
    assert long_functions(tree, limit=81) == [("C.method", 163, 82)]


MAX_CLASS_LINES = 350


def large_classes(tree: ast.Module, limit: int = MAX_CLASS_LINES) -> list[tuple[str, int, int]]:
    """Every class of `tree` longer than `limit` lines (`_longer_than`)."""
    return _longer_than(tree, limit, (ast.ClassDef,))


def test_no_class_is_longer_than_350_lines():
    """A class of the library fits in 350 lines: a larger one does several jobs, and is split
    by responsibility (the llama.cpp engine's planner, scheduler, KV context and sampler; the
    store's reads and writes)."""
    found = [f"{path.relative_to(ROOT)}:{line}: {name} ({lines} lines)"
             for pkg in LENGTH_CHECKED for path in sorted((ROOT / pkg).rglob("*.py"))
             for name, line, lines in large_classes(_parse(path))]
    assert not found, (f"classes over {MAX_CLASS_LINES} lines (split them by "
                       "responsibility):\n" + "\n".join(found))


def test_the_class_size_check_finds_large_classes():
    def source(name: str, lines: int, indent: str = "") -> str:
        return f"{indent}class {name}:\n" + "".join(f"{indent}    x{i} = {i}\n"
                                                    for i in range(lines - 1))

    tree = ast.parse(source("Large", 351) + source("Small", 350)
                     + "def f():\n" + source("Inner", 352, "    "))
    assert large_classes(tree) == [("Large", 1, 351), ("f.Inner", 703, 352)]
    assert large_classes(tree, limit=351) == [("f.Inner", 703, 352)]


# -- docs/architecture.md matches the code --------------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
CODE_DIRS = ("rmjudge", "training", "quantize", "tests", "benchmarks", "examples")
# Backticked names in docs/architecture.md that are not code names, with the reason.
NOT_CODE = {"rmjudge.prompt_format": "a GGUF metadata key", "_name": "any private name"}
DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".duckdb", ".lock", ".gguf", ".md", ".csv")


def _doc_paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks, with each list item of a block on its own."""
    out = []
    for block in text.split("\n\n"):
        out += [p for p in re.split(r"\n(?=\s*- )", block) if p.strip()]
    return out


def _project_files() -> list[str]:
    return [str(p.relative_to(ROOT)) for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]


def _defined_names() -> tuple[set[str], dict[str, dict[str, set[str]]]]:
    """Every name the code defines, binds or spells as a string (columns, keys), and per module
    its top-level names ({module: {name: member names, for a class}})."""
    names: set[str] = set()
    modules: dict[str, dict[str, set[str]]] = {}
    bases: dict[str, list[str]] = {}  # class -> the names of its bases (a member of a base
    for dotted, path in _module_names().items():  # class is a member of the class too)
        tree = _parse(path)
        docs = _docstrings(tree)
        top: dict[str, set[str]] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                top[node.name] = set()
            elif isinstance(node, ast.ClassDef):
                top[node.name] = {n.name for n in ast.walk(node)
                                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} | {
                    t.id for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    if isinstance(t, ast.Name)}
                bases[node.name] = [ast.unparse(b).split(".")[-1] for b in node.bases]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    top.update((n.id, set()) for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                top.update(((a.asname or a.name).split(".")[0], set()) for a in node.names)
        modules[dotted] = top
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docs:
                names.update(re.findall(r"[A-Za-z_]\w*", node.value))
    classes: dict[str, set[str]] = {}  # class name -> its own members, any module
    for top in modules.values():
        for cls in set(top) & set(bases):
            classes.setdefault(cls, set()).update(top[cls])

    def inherited(cls: str, seen: frozenset = frozenset()) -> set[str]:
        """The members of the bases of `cls`, and of theirs."""
        found = set()
        for base in bases.get(cls, ()):
            if base in classes and base not in seen:
                found |= classes[base] | inherited(base, seen | {cls})
        return found

    for top in modules.values():
        for cls in set(top) & set(bases):
            top[cls] = top[cls] | inherited(cls)
    return names, modules


def _resolves(dotted: str, modules: dict[str, dict[str, set[str]]]) -> bool:
    """`a.b.c`: a project module (`rmjudge.runs.setup`, or named from inside its package:
    `runs.setup`, `io.intake`), then a name it defines, then a member of that class; or `Class.member`."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        head = ".".join(parts[:k])
        found = [m for m in modules if m == head or m.endswith("." + head)]
        if not found:
            continue
        rest = parts[k:]
        for m in found:
            if not rest or (rest[0] in modules[m] and (
                    len(rest) == 1 or (len(rest) == 2 and rest[1] in modules[m][rest[0]]))):
                return True
            if rest and f"{m}.{rest[0]}" in modules:
                if _resolves(".".join([f"{m}.{rest[0]}"] + rest[1:]), modules):
                    return True
        return False
    members = {m for top in modules.values() for m in top.get(parts[0], ())}
    if len(parts) == 2 and parts[1] in members:
        return True
    return _external(parts)


def _external(parts: list[str]) -> bool:
    """A name of the standard library the doc cites (`os.replace`, `Path.write_text`)."""
    import importlib
    import pathlib

    try:
        obj = pathlib if parts[0] == "Path" else importlib.import_module(parts[0])
        for a in parts[1:] if parts[0] != "Path" else parts:
            obj = getattr(obj, a)
    except (ImportError, AttributeError):
        return False
    return parts[0] not in _module_names()


def _doc_code_names(text: str) -> list[str]:
    return re.findall(r"`([^`\s]+)`", text)


def test_architecture_names_every_module():
    """Each module of rmjudge/, training/ and quantize/ is named in docs/architecture.md: by its
    path (`rmjudge/runs/setup.py`, `files/paths.py`), or by its file name in a paragraph that names its
    package folder (`rmjudge/engine/`: ... `vocab.py`)."""
    text = ARCHITECTURE.read_text()
    paragraphs = _doc_paragraphs(text)
    missing = []
    for dotted, path in _module_names().items():
        rel = path.relative_to(ROOT)
        if rel.name == "__init__.py" and len(rel.parts) > 2:
            continue  # a subpackage: named by its folder
        inner = "/".join(rel.parts[1:])
        if str(rel) in text or (len(rel.parts) > 2 and inner in text):
            continue
        folder = "/".join(rel.parts[:-1]) + "/"
        if any(folder in p and re.search(rf"(?<![\w/]){re.escape(rel.name)}", p)
               for p in paragraphs):
            continue
        missing.append(str(rel))
    assert not missing, "modules docs/architecture.md does not name:\n" + "\n".join(missing)


def test_architecture_names_only_what_exists():
    """Every file, module and code name docs/architecture.md cites in backticks exists: a
    `x.py` is a file of the project, a `module.name` is defined by that module, a `name` is
    defined (or spelled as a column or key) somewhere in the code."""
    names, modules = _defined_names()
    for path in sorted((ROOT / "tests").glob("*.py")):  # the checks the doc names
        names.update(n.id for n in ast.walk(_parse(path)) if isinstance(n, ast.Name))
    files = _project_files()
    stale = []
    for token in _doc_code_names(ARCHITECTURE.read_text()):
        token = token.removesuffix("()")
        if token in NOT_CODE or token.startswith(("-", ".", "~")) or token.endswith(DATA_SUFFIXES):
            continue
        if token.endswith(".py"):
            ok = any(f == token or f.endswith("/" + token) for f in files)
        elif token.endswith("/"):
            ok = (ROOT / token).is_dir() or any(f"/{token}" in f"/{f}" for f in files)
        elif not re.fullmatch(r"[A-Za-z_][\w.]*", token):
            continue
        elif "." in token:
            ok = _resolves(token, modules)
        else:
            ok = token in names or token in modules or any(
                m.endswith("." + token) for m in modules)
        if not ok:
            stale.append(token)
    assert not stale, "docs/architecture.md names what the code does not have:\n" + "\n".join(
        sorted(set(stale)))


def test_the_doc_checks_find_stale_names():
    _, modules = _defined_names()
    assert _resolves("runs.setup.open_input", modules) and _resolves("rmjudge.store.Store", modules)
    assert _resolves("Store.commit", modules) and _resolves("io.intake.checked_rows", modules)
    assert not _resolves("io.intake.open_intake", modules)
    assert not _resolves("store.export_lock", modules) and not _resolves("Store.nothing", modules)
