"""Every `rmjudge` command's options come from a settings dataclass (rmjudge.cli.options
generates them): no command module declares a click option by hand, and the generated options
keep the names, defaults, types and help the commands had when they were typed by hand
(tests/data/cli_options.json, written from the hand-typed commands; rewrite it with
`PYTHONPATH=$PWD python tests/test_cli_options.py` only for an intended change)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "data" / "cli_options.json"


def _commands() -> dict[str, click.Command]:
    """Every command of `rmjudge` by its full name ("review export" for a group's command)."""
    from rmjudge.cli import COMMANDS, main

    out = {}
    ctx = click.Context(main)
    for name in COMMANDS:
        cmd = main.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            for sub, c in cmd.commands.items():
                out[f"{name} {sub}"] = c
        else:
            out[name] = cmd
    return out


def _jsonable(value):
    """A parameter's value as JSON; click's "no default" (None before 8.3, its UNSET sentinel
    since) is None either way, so the record does not depend on click's version."""
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if "UNSET" in repr(value):
        return None
    return repr(value)


def _param(p: click.Parameter) -> dict:
    t = p.type
    d = {"kind": p.param_type_name, "opts": list(p.opts), "secondary": list(p.secondary_opts),
         "type": t.name, "required": p.required, "multiple": p.multiple, "nargs": p.nargs,
         "default": _jsonable(p.default), "metavar": p.metavar, "envvar": p.envvar}
    if isinstance(t, click.Choice):
        d["choices"] = list(t.choices)
    if isinstance(t, click.IntRange):
        d["range"] = [t.min, t.max]
    if isinstance(p, click.Option):
        d.update(help=p.help, is_flag=p.is_flag, flag_value=_jsonable(p.flag_value)
                 if p.is_flag else None, show_default=bool(p.show_default), hidden=p.hidden)
    return d


def surface() -> dict:
    """command -> [its parameters in order, each as a dict of what a user sees and gets]."""
    return {name: [{"name": p.name, **_param(p)} for p in cmd.params]
            for name, cmd in sorted(_commands().items())}


def test_every_command_keeps_its_options():
    """Names, defaults, types, help and order of every option and argument, as recorded from
    the hand-typed commands before they were generated from dataclasses."""
    want, got = json.loads(SNAPSHOT.read_text()), surface()
    assert sorted(got) == sorted(want)
    for name in want:
        w = {p["name"]: p for p in want[name]}
        g = {p["name"]: p for p in got[name]}
        assert sorted(g) == sorted(w), name
        for key in w:
            assert g[key] == w[key], (name, key)
        assert [p["name"] for p in got[name]] == [p["name"] for p in want[name]], name


def _hand_declared(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("option", "argument") \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "click":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} click.{node.func.attr}(")
    return found


def test_no_command_declares_an_option_by_hand():
    """Only rmjudge/cli/options.py calls click.option / click.argument: every other command
    module gets its options from a settings dataclass through `settings_options`."""
    found = [hit for path in sorted((ROOT / "rmjudge" / "cli").glob("*.py"))
             if path.name != "options.py" for hit in _hand_declared(path)]
    assert not found, "options declared by hand (declare them as dataclass fields):\n" + \
        "\n".join(found)


def test_the_hand_declaration_check_finds_one(tmp_path):
    (tmp_path / "x.py").write_text("import click\n@click.option('--a')\ndef f(a): pass\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert _hand_declared(tmp_path / "x.py") == ["x.py:2 click.option("]
    finally:
        ROOT = old


def _params(cmd) -> dict:
    return {p.name: p for p in cmd.params}


def test_the_run_options_of_every_judging_command_are_the_run_options_fields():
    """--limit, --shard, --commit-every, --overwrite and --rejudge-changed are RunOptions
    fields wherever they appear: same option, type and default; only the help may be a
    command's own wording."""
    import dataclasses

    from rmjudge.runs.setup import RunOptions

    defaults = {f.name: f.default for f in dataclasses.fields(RunOptions)}
    cmds = _commands()
    seen = {}
    for name in ("score", "eval", "rank", "bench", "ray-score"):
        for field in ("limit", "shard", "commit_every", "overwrite", "rejudge_changed"):
            p = _params(cmds[name]).get(field)
            if p is None:
                continue
            if not p.is_flag:  # a flag is off unless given
                assert p.default == defaults[field], (name, field)
            seen.setdefault(field, set()).add((tuple(p.opts), p.type.name, p.is_flag))
    assert {k: len(v) for k, v in seen.items()} == dict.fromkeys(seen, 1)
    assert set(seen) == {"limit", "shard", "commit_every", "overwrite", "rejudge_changed"}
    assert {n for n in ("rank", "bench") if "commit_every" in _params(cmds[n])} == {"rank",
                                                                                     "bench"}


def test_generated_options_read_back_as_the_fields_values():
    """A switch that turns a field off, a choice that maps to a value, a separated list, a
    repeatable option, a parsed value and a command's own help, through one command."""
    from dataclasses import dataclass

    from click.testing import CliRunner

    from rmjudge.cli.options import settings_from, settings_options
    from rmjudge.core.settings import setting

    @dataclass(frozen=True)
    class Demo:
        path: str = setting(argument=True, metavar="PATH")
        strict: bool = setting(True, "Anything goes.", flag="--lenient", dest="lenient")
        loud: bool = setting(False, "Say more.", flag="--loud", short="-l")
        keep: bool = setting(True, "Keep or drop.", option="--missing", dest="missing",
                             choices={"keep": True, "drop": False})
        cols: tuple[str, ...] = setting((), "Columns.", split=",", cli_default="")
        tags: tuple[str, ...] = setting((), "Tags.", option="--tag", multiple=True)
        shard: tuple | None = setting(None, "I/N.", type=str,
                                      parse=lambda v: None if v is None else tuple(v.split("/")))
        n: int = setting(3, "How many.", range=(1, 9))

    got = []

    @click.command()
    @settings_options(Demo, helps={"n": "How many, here."})
    def cmd(**kw):
        got.append(settings_from(Demo, kw))
        assert not kw

    r = CliRunner().invoke(cmd, ["p", "--lenient", "-l", "--missing", "drop", "--cols",
                                 " a, b,,c", "--tag", "x", "--tag", "y", "--shard", "1/4",
                                 "--n", "5"])
    assert r.exit_code == 0, r.output
    assert got[-1] == Demo("p", strict=False, loud=True, keep=False, cols=("a", "b", "c"),
                           tags=("x", "y"), shard=("1", "4"), n=5)
    r = CliRunner().invoke(cmd, ["p"])
    assert r.exit_code == 0 and got[-1] == Demo("p"), r.output
    assert "How many, here." in CliRunner().invoke(cmd, ["--help"]).output
    assert CliRunner().invoke(cmd, ["p", "--n", "10"]).exit_code == 2
    assert CliRunner().invoke(cmd, ["p", "--missing", "maybe"]).exit_code == 2


def test_a_subclass_that_changes_a_default_keeps_the_option():
    from dataclasses import dataclass

    from rmjudge.cli.options import settings_options
    from rmjudge.engine.server import ServerSettings

    @dataclass(frozen=True)
    class Other(ServerSettings):
        concurrency: int = 5

    @click.command()
    @settings_options(Other, only=("concurrency",))
    def cmd(**kw):
        pass

    (p,) = cmd.params
    assert (p.opts, p.name, p.default, p.metavar) == (["--server-concurrency"],
                                                      "server_concurrency", 5, "K")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    commands = [f'{json.dumps(name)}: [\n' + ",\n".join(
        "  " + json.dumps(p, sort_keys=True) for p in params) + "\n]"
        for name, params in surface().items()]
    SNAPSHOT.write_text("{\n" + ",\n".join(commands) + "\n}\n")  # one option a line
    print(f"wrote {SNAPSHOT}")
