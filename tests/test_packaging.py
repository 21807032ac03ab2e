"""The package as published: every imported package declared, the version written once, the
Windows refusal, and (slow) the sdist and wheel built, checked by twine and installed in a
fresh virtual environment where `rmjudge score` judges the example outside the source tree."""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the folders of the packages: training/ and quantize/ install as rmjudge.training and
# rmjudge.quantize (rmjudge/training and rmjudge/quantize link to them)
PACKAGES = ("rmjudge", "training", "quantize")


def pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    return normalize(re.match(r"[A-Za-z0-9._-]+", req.strip()).group(0))


def declared() -> dict[str, set[str]]:
    """{"": base dependencies, extra: its packages} as normalized distribution names."""
    project = pyproject()["project"]
    out = {"": {requirement_name(r) for r in project["dependencies"]}}
    for extra, reqs in project["optional-dependencies"].items():
        out[extra] = {requirement_name(r) for r in reqs if requirement_name(r) != "rmjudge"}
    return out


def third_party_imports(paths, root: Path = ROOT) -> dict[str, set[str]]:
    """{top-level module: files importing it} for the imports (anywhere in a file, functions
    included) of modules outside the standard library and the project."""
    found: dict[str, set[str]] = {}
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top and top not in sys.stdlib_module_names and top not in PACKAGES:
                    found.setdefault(top, set()).add(str(path.relative_to(root)))
    return found


# import name -> distribution, where they differ, for modules not installed here
DISTRIBUTIONS = {"llama_cpp": "llama-cpp-python"}


@functools.lru_cache(maxsize=1)
def installed_modules() -> dict[str, list[str]]:
    from importlib.metadata import packages_distributions

    return packages_distributions()


def distribution_of(module: str) -> set[str]:
    """The distributions that install `module` (by their metadata when installed)."""
    return {normalize(d) for d in installed_modules().get(module, [])} or {
        normalize(DISTRIBUTIONS.get(module, module))}


def undeclared(imports: dict[str, set[str]], decl: dict[str, set[str]]) -> list[str]:
    everything = set().union(*decl.values())
    return sorted(f"{m} (imported by {', '.join(sorted(files)[:3])})"
                  for m, files in imports.items() if not distribution_of(m) & everything)


def test_every_imported_package_is_declared():
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    imports = third_party_imports(files)
    assert {"duckdb", "jinja2", "orjson", "torch"} <= set(imports)  # the scan sees imports
    decl = declared()
    assert not undeclared(imports, decl), undeclared(imports, decl)
    # what every run imports is a base dependency, not an extra
    assert {"jinja2", "duckdb", "orjson", "click", "llama-cpp-python"} <= decl[""]


def test_the_declaration_check_finds_an_undeclared_import(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("import os\nimport duckdb\n\ndef f():\n    from notapackage.sub import x\n")
    imports = third_party_imports([src], tmp_path)
    assert imports == {"duckdb": {"mod.py"}, "notapackage": {"mod.py"}}
    assert undeclared(imports, {"": {"duckdb"}}) == ["notapackage (imported by mod.py)"]


def bare_imports(paths, root: Path = ROOT) -> list[str]:
    """Where a file imports `training` or `quantize` as a top-level package, or names one of
    their modules that way in a string (`python -m training.cli`, a monkeypatch target): the
    wheel installs them only as rmjudge.training and rmjudge.quantize."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                m = re.fullmatch(r"(training|quantize)\.(\w+)(\.\w+)*", node.value)
                # a module of the folder (not a file name such as "training.json")
                names = [node.value] if m and (ROOT / m[1] / f"{m[2]}.py").exists() else []
            else:
                continue
            found += [(str(path.relative_to(root)), node.lineno, name) for name in names
                      if name.split(".")[0] in ("training", "quantize")]
    return [f"{file}:{line}: {name}" for file, line, name in sorted(found)]


def test_the_training_and_export_packages_are_named_as_the_wheel_installs_them():
    """Every import of rmjudge-train's and rmjudge-export's code, in the packages, tests,
    benchmarks and examples, says rmjudge.training or rmjudge.quantize (a top-level `training`
    imports only from the root of a checkout), and a checkout imports those names from the
    folders training/ and quantize/, as the console scripts do."""
    import importlib

    code = [p for d in (*PACKAGES, "tests", "benchmarks", "examples")
            for p in sorted((ROOT / d).rglob("*.py"))]
    assert not bare_imports(code), bare_imports(code)
    for script, target in pyproject()["project"]["scripts"].items():
        module, _, func = target.partition(":")
        mod = importlib.import_module(module)
        assert callable(getattr(mod, func)), script
        package = module.split(".")[1]
        folder = ROOT / (package if package in PACKAGES else "rmjudge")
        assert Path(mod.__file__).resolve().is_relative_to(folder), (script, mod.__file__)
    scripts = pyproject()["project"]["scripts"]
    assert (scripts["rmjudge-train"], scripts["rmjudge-export"]) == (
        "rmjudge.training.cli:main", "rmjudge.quantize.cli:main")


def test_the_bare_import_check_finds_top_level_imports(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("import training.cli\nfrom quantize import hfio\n"
                   "from rmjudge.training.cli import main\nimport rmjudge.quantize.lora\n"
                   "run(['python', '-m', 'training.cli'])\nopen('training.json')\n"
                   "setattr('quantize.convert.x', 1)\n")
    assert bare_imports([src], tmp_path) == [
        "mod.py:1: training.cli", "mod.py:2: quantize", "mod.py:5: training.cli",
        "mod.py:7: quantize.convert.x"]


def test_the_version_is_written_once():
    project = pyproject()["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "rmjudge.__version__"}
    written = [str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
               if re.search(r"^__version__\s*=", p.read_text(), re.M)]
    assert written == ["rmjudge/__init__.py"]
    from click.testing import CliRunner

    import rmjudge
    from rmjudge.cli import main

    assert CliRunner().invoke(main, ["--version"]).output.strip().endswith(rmjudge.__version__)


def test_the_version_is_the_changelogs_newest():
    """The package says the version whose changes CHANGELOG.md lists first."""
    import rmjudge

    newest = re.search(r"^## (\S+) \(", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert newest and newest.group(1) == rmjudge.__version__


def test_the_metadata_is_complete():
    project = pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert project["readme"] == "README.md" and project["description"]
    assert any(c.startswith("Programming Language :: Python :: 3.1") for c in
               project["classifiers"])
    # no project URL is published (docs/development.md says why): none may be a placeholder
    for url in project.get("urls", {}).values():
        assert not re.search(r"example|your-?org|TODO|XXX", url, re.I), url


WINDOWS = """
import sys
sys.modules["fcntl"] = None  # as on Windows: the module does not exist
import rmjudge, rmjudge.store, rmjudge.cli
from click.testing import CliRunner
r = CliRunner().invoke(rmjudge.cli.main, ["score", "pairs.jsonl"])
print(r.exit_code, r.output.strip())
assert CliRunner().invoke(rmjudge.cli.main, ["score", "--help"]).exit_code == 0
from rmjudge.engine.fake import ScriptedEngine
try:
    rmjudge.score([{"prompt": "p", "chosen": "a", "rejected": "b"}],
                  engine=ScriptedEngine(lambda r, i: "x"))
except rmjudge.UserError as exc:
    print(type(exc).__name__)
"""


def test_without_fcntl_every_command_stops_with_one_line_naming_what_is_missing(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", WINDOWS], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == ("1 Error: rmjudge needs POSIX file locks (fcntl.flock) to keep two runs "
                      "from writing one output, and this system has none (Windows): run rmjudge "
                      "under WSL2 (Windows Subsystem for Linux), or on Linux or macOS")
    assert out[1] == "PlatformError"
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


# -- the built package ---------------------------------------------------------------------------

def source_copy(dest: Path) -> Path:
    """The files a release is built from (tracked and new files, not the ignored ones), links
    (rmjudge/training -> ../training) as links."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_symlink() or src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dest / name)
        elif src.is_file():
            shutil.copy2(src, dest / name)
    return dest


def outer_site_dirs() -> list[str]:
    """The site-packages folders of the interpreter running the tests: a virtual environment's
    own (and the base's, where it was made with --system-site-packages), else the system's,
    and the user's where that interpreter reads it."""
    import site

    dirs = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE
                                     else [])
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def fresh_venv(venv: Path, env: dict) -> Path:
    """A new venv that sees the packages of the interpreter running the tests, so that
    llama-cpp-python is not compiled again: a .pth file runs `site.addsitedir` on that
    interpreter's site folders (their own .pth files included), after the venv's own
    site-packages, where the wheel goes. `--system-site-packages` would give the base
    interpreter's packages, which are not these when the tests run in a venv. No pip in the
    venv (ensurepip alone takes half a minute here): the outer pip installs into it."""
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=env)
    py = venv / "bin" / "python"
    own = run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
              env=env).stdout.strip()
    lines = [f"import site; site.addsitedir({d!r})\n" for d in outer_site_dirs()]
    (Path(own) / "zz_outer_site_packages.pth").write_text("".join(lines))
    return py


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.slow
@pytest.mark.model
def test_the_built_wheel_installs_in_a_fresh_venv_and_scores_the_example(tmp_path):
    """`python -m build` (sdist, then the wheel built from it), `twine check`, the wheel
    holding one top-level package (rmjudge, with rmjudge.training and rmjudge.quantize),
    installed in a new venv (that sees the packages of the environment running the tests, a
    venv or not, so llama.cpp is not compiled again), its console scripts and `rmjudge score`
    run from outside the source tree on the example file."""
    import rmjudge

    src = source_copy(tmp_path / "src")
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
        env=env)
    version = rmjudge.__version__
    sdist = dist / f"rmjudge-{version}.tar.gz"
    wheel = dist / f"rmjudge-{version}-py3-none-any.whl"
    assert sdist.exists() and wheel.exists(), sorted(os.listdir(dist))
    run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)], env=env)

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"rmjudge-{version}.dist-info/METADATA").decode()
        entry_points = z.read(f"rmjudge-{version}.dist-info/entry_points.txt").decode()
    assert {"rmjudge/__init__.py", "rmjudge/api/__init__.py", "rmjudge/io/memory.py",
            "rmjudge/training/cli.py", "rmjudge/training/__main__.py",
            "rmjudge/quantize/cli.py", "rmjudge/quantize/__main__.py"} <= names
    # one top-level package: no `training` or `quantize` beside other projects' packages
    assert {n.split("/")[0] for n in names} == {"rmjudge", f"rmjudge-{version}.dist-info"}
    training = {n.removeprefix("rmjudge/") for n in names if n.startswith("rmjudge/training/")}
    assert training == {f"training/{p.name}" for p in (ROOT / "training").glob("*.py")}
    assert "rmjudge-train = rmjudge.training.cli:main" in entry_points
    assert "rmjudge-export = rmjudge.quantize.cli:main" in entry_points
    assert f"rmjudge-{version}.dist-info/licenses/LICENSE" in names
    tracked_data = subprocess.run(["git", "ls-files", "rmjudge"], cwd=ROOT, capture_output=True,
                                  text=True, check=True).stdout.split()
    shipped = [n for n in tracked_data if not n.endswith(".py") and not (ROOT / n).is_symlink()]
    assert set(shipped) <= names, set(shipped) - names  # package data files travel too
    assert "License-Expression: Apache-2.0" in meta and "Requires-Dist: jinja2" in meta
    assert "Provides-Extra: notebook" in meta and "# rmjudge" in meta  # the README

    venv = tmp_path / "venv"
    py = fresh_venv(venv, env)
    run([sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", "--no-index",
         "--no-deps", "--ignore-installed", str(wheel)], env=env)
    work = tmp_path / "elsewhere"
    work.mkdir()
    # the package imported is the installed wheel, and every dependency it declares is there
    where = run([str(py), "-c", DEPENDENCIES_MET], cwd=work, env=env).stdout.strip()
    assert where.startswith(str(venv)), where
    for script, usage in (("rmjudge-train", "Usage: rmjudge-train"),
                          ("rmjudge-export", "Usage: rmjudge-export")):
        shown = run([str(venv / "bin" / script), "--help"], cwd=work, env=env).stdout
        assert shown.startswith(usage), shown

    example = ROOT / "examples" / "pairs.jsonl"
    run([str(venv / "bin" / "rmjudge"), "score", str(example), "-o", "out.duckdb", "--samples",
         "1", "--orders", "ab", "--max-tokens", "8", "--quiet"], cwd=work, env=env)
    count = run([str(py), "-c", "import rmjudge; s = rmjudge.open_store('out.duckdb'); "
                 "print(len(s.pairs), len(s.errors), s.runs['version'][0])"],
                cwd=work, env=env).stdout.split()
    n_rows = len(example.read_text().splitlines())
    assert count == [str(n_rows), "0", version]


DEPENDENCIES_MET = """
from importlib.metadata import PackageNotFoundError, requires, version
from packaging.requirements import Requirement
missing = []
for text in requires("rmjudge"):
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # an extra's requirement
    try:
        if not req.specifier.contains(version(req.name), prereleases=True):
            missing.append(f"{req} (installed: {version(req.name)})")
    except PackageNotFoundError:
        missing.append(f"{req} (not installed)")
assert not missing, missing
import rmjudge
print(rmjudge.__file__)
"""
