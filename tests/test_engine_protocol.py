"""The one `Engine` protocol (rmjudge/engine/base.py): every engine implements each of its
members with the protocol's signature, the registry `ENGINES` is the one list of engine kinds,
and no code outside the engines probes an engine for a member with getattr/hasattr."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from rmjudge.core.settings import ENGINE_KINDS, EngineSettings, SettingsError
from rmjudge.core.types import GenRequest
from rmjudge.engine import ENGINES, load_engine
from rmjudge.engine.base import Engine, RequestSource
from rmjudge.engine.fake import ScriptedEngine
from rmjudge.engine.llama import LlamaEngine
from rmjudge.engine.naive import NaiveEngine
from rmjudge.engine.server import ServerEngine

ROOT = Path(__file__).resolve().parent.parent
ENGINE_CLASSES = (LlamaEngine, NaiveEngine, ServerEngine, ScriptedEngine)


def protocol_members() -> dict[str, object]:
    """Each member of `Engine`: its annotation (a data member) or its function or property."""
    members: dict[str, object] = dict(Engine.__annotations__)
    for name, value in vars(Engine).items():
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)):
            members[name] = value
    return members


def _params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


MISSING = object()


def missing_members(cls: type) -> list[str]:
    """What `cls` lacks or declares otherwise than `Engine`: a method with other parameters, a
    property that is a plain method, a data member neither set in `__init__` nor on the class."""
    wrong = []
    init = "".join(inspect.getsource(c.__init__) for c in cls.__mro__ if "__init__" in vars(c)
                   and c not in (object, Engine) and inspect.isfunction(c.__init__))
    for name, spec in protocol_members().items():
        found = inspect.getattr_static(cls, name, MISSING)
        if inspect.isfunction(spec):
            if not inspect.isfunction(found) or _params(found) != _params(spec):
                wrong.append(f"{cls.__name__}.{name}{inspect.signature(spec)}")
        elif isinstance(spec, property):
            if not isinstance(found, property):
                wrong.append(f"{cls.__name__}.{name} (a property)")
        elif found is MISSING and f"self.{name} =" not in init:
            wrong.append(f"{cls.__name__}.{name}")
    return wrong


@pytest.mark.parametrize("cls", ENGINE_CLASSES, ids=lambda c: c.__name__)
def test_every_engine_implements_the_protocol_in_full(cls):
    assert Engine in cls.__mro__  # the protocol's defaults are the engine's own
    assert missing_members(cls) == []


def test_the_protocol_check_finds_a_missing_or_different_member():
    class NoSteps:  # an engine written before the protocol named everything
        def __init__(self):
            self.info = None

        def generate(self, requests):
            return []

        def preferred_pairs_in_flight(self, settings):
            return 1

        def count_tokens(self, requests):
            return []

        generated_tokens = 0

    wrong = missing_members(NoSteps)
    assert "NoSteps.generated_tokens (a property)" in wrong
    assert any(w.startswith("NoSteps.steps(") for w in wrong)
    assert any(w.startswith("NoSteps.close(") for w in wrong)
    assert "NoSteps.tokens_sent" in wrong and "NoSteps.info" not in wrong

    class OtherSignature(ScriptedEngine):
        def count_tokens(self, requests, limit):
            return []

    assert missing_members(OtherSignature) == [
        "OtherSignature.count_tokens(self, requests: 'list[GenRequest]') -> 'list[int]'"]


def test_the_defaults_serve_in_calls_and_count_nothing():
    """An engine without members of its own for them: `steps` serves a source in `generate`
    calls, `close` does nothing, the server counters are None and the others 0."""
    engine = ScriptedEngine(lambda req, i: "one two")
    req = GenRequest(messages=({"role": "user", "content": "hi"},), max_tokens=8,
                     temperature=1.0, top_p=1.0, seed=0, n=2)

    class Source(RequestSource):
        def __init__(self):
            self.todo, self.got = [[req]], []

        def take(self):
            return self.todo.pop() if self.todo else []

        def done(self, request, generations):
            self.got.append((request, [g.text for g in generations]))

    source = Source()
    assert list(engine.steps(source)) == [None]
    assert source.got == [(req, ["one two", "one two"])] and len(engine.calls) == 1
    assert engine.close() is None
    assert (engine.tokens_sent, engine.tokens_received, engine.throughput_device) == (None,) * 3
    assert (engine.prompt_tokens_evaluated, engine.decode_rows, engine.generated_tokens) == (0, 0, 4)


def test_the_engine_kinds_are_the_registry():
    """`--engine`'s kinds are the registry's in-process ones, in its order; each loader takes
    the engine settings and the server settings; an unknown kind is refused by name."""
    assert tuple(k for k in ENGINES if k != "server") == ENGINE_KINDS
    assert "server" in ENGINES
    for loader in ENGINES.values():
        assert list(inspect.signature(loader).parameters) == ["settings", "server"]
    with pytest.raises(SettingsError, match="no engine 'vllm': one of batched, naive, server"):
        load_engine(EngineSettings(), kind="vllm")
    with pytest.raises(SettingsError, match="the server engine needs --server URL"):
        load_engine(EngineSettings(), kind="server")


CHECKED = ("rmjudge", "training", "quantize")
ENGINE_CODE = ("rmjudge/engine/",)


def engine_probes(tree: ast.AST) -> list[str]:
    """`getattr(x, ...)` and `hasattr(x, ...)` calls whose object is an engine: a name or
    attribute named engine (`engine`, `self.engine`, `self._engine`, `eng`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and node.args:
            target = node.args[0]
            name = target.attr if isinstance(target, ast.Attribute) else \
                target.id if isinstance(target, ast.Name) else ""
            if name.lstrip("_") in ("engine", "eng") or ast.unparse(target).startswith(
                    ("engine.", "self.engine.", "self._engine.")):
                found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [f"{line}: {text}" for line, _, text in sorted(found)]


def test_no_caller_probes_an_engine():
    """Outside rmjudge/engine/, code uses the `Engine` members it needs, which every engine
    has: no getattr/hasattr on an engine (the protocol gives each member a default)."""
    found = []
    for pkg in CHECKED:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel.startswith(ENGINE_CODE):
                continue
            found += [f"{rel}:{p}" for p in engine_probes(ast.parse(path.read_text()))]
    assert not found, "engines probed for members (use the Engine protocol):\n" + "\n".join(found)


def test_the_probe_check_finds_a_probe():
    src = """
steps = getattr(self.engine, "steps", None)
if hasattr(engine, "on_gpu"): pass
scale = getattr(getattr(self.engine, "settings", None), "lora_scale", 1.0)
x = getattr(self._engine, "close", None)
y = getattr(options, "engine", None)
z = getattr(row, "steps", None)
"""
    found = [f.split(": ", 1)[1] for f in engine_probes(ast.parse(src))]
    assert found == ["getattr(self.engine, 'steps', None)", "hasattr(engine, 'on_gpu')",
                     "getattr(self.engine, 'settings', None)",  # the inner probe of line 4
                     "getattr(self._engine, 'close', None)"]
