"""Shared test helpers: scripted outputs in ReflectRM's format."""

from __future__ import annotations

import duckdb

from rmjudge.engine.fake import ScriptedEngine, stage_of
from rmjudge.prompts import completion_text
from rmjudge.core.types import Generation, GenRequest, Pair


def pair(pid: str = "p1", label: str | None = "A", a: str = "good answer", b: str = "bad answer",
         row: int = 1) -> Pair:
    return Pair(pid, row, ({"role": "user", "content": "What is 2+2?"},), a, b, label)


def pref(pred: int, conf_lp: float = -0.5, analysis: str = "analysis") -> Generation:
    """A parseable rollout predicting `pred` whose tokens all have log-prob `conf_lp`."""
    return Generation(completion_text("pref", analysis, pred), [conf_lp] * 5, "stop")


def refl(pred: int) -> Generation:
    return Generation(completion_text("refl", "meta", pred), [-0.1] * 5, "stop")


def unparsed(lp: float = -0.5) -> Generation:
    return Generation("I cannot decide", [lp] * 5, "length")


def first_slot_response(req: GenRequest) -> str:
    """The response shown in slot 1 of a preference prompt."""
    body = req.messages[-1]["content"]
    return body.split("### Response 1\n", 1)[1].split("\n\n### Response 2", 1)[0]


def critique_slot(req: GenRequest, analysis: str) -> int:
    """Which slot (1|2) holds a critique whose text is `analysis`."""
    body = req.messages[-1]["content"]
    c1 = body.split("### Critique 1\n", 1)[1].split("\n\n### Critique 2", 1)[0]
    return 1 if c1 == analysis else 2


class Script:
    """Per (order, stage) queues of outputs; reflections may be a function of the request."""

    def __init__(self, rollouts: dict[str, list], reflect=None):
        self.rollouts = {k: list(v) for k, v in rollouts.items()}
        self.reflect = reflect

    def __call__(self, req: GenRequest, i: int):
        pid, order, stage = req.share_key
        if stage_of(req) == "rollout":
            return self.rollouts[order].pop(0)
        return self.reflect(req, order)


def engine(rollouts, reflect=None, **kw) -> ScriptedEngine:
    return ScriptedEngine(Script(rollouts, reflect), **kw)


def slot_responses(req: GenRequest) -> tuple[str, str]:
    """The responses shown in slots 1 and 2 of a preference prompt."""
    body = req.messages[-1]["content"]
    two = body.split("### Response 2\n", 1)[1].split("\n\n", 1)[0]
    return first_slot_response(req), two


def quality_engine(flip: set[str] = frozenset(), **kw) -> ScriptedEngine:
    """A scripted judge that prefers the response whose text holds the larger `q=N`; rollouts
    of a pair whose slot-1 text is in `flip` always pick slot 1 (so its two orders disagree)."""
    import re

    def q(text: str) -> int:
        return int(re.search(r"q=(\d+)", text).group(1))

    def respond(req: GenRequest, i: int):
        if stage_of(req) != "rollout":
            return refl(1)
        a, b = slot_responses(req)
        if a in flip:
            return pref(1)
        return pref(1 if q(a) > q(b) else 2)

    return ScriptedEngine(respond, **kw)


# A preamble for kill_after_commits: `rmjudge` judges with quality_engine (tests/ on sys.path).
SCRIPTED_CLI = """
import sys, rmjudge.runs.setup
sys.path.insert(0, %r)
from helpers import quality_engine
rmjudge.runs.setup.load_judge_engine = lambda *a, **k: quality_engine()
""" % __import__("os").path.dirname(__import__("os").path.abspath(__file__))


def judge_with(monkeypatch, make_engine) -> None:
    """`rmjudge` commands run in this process judge with `make_engine()` instead of a model: the
    engine loader and the model resolver are patched for the test. The modules that bind
    `resolve_model` when imported (the llama.cpp engine and its vocabulary) are imported
    first: imported for the first time while patched, they would keep the stand-in after the
    test, and a later test's model would resolve to "<scripted>"."""
    import rmjudge.engine
    import rmjudge.engine.llama  # noqa: F401 - see above
    import rmjudge.models.resolve

    monkeypatch.setattr(rmjudge.engine, "load_engine", lambda *a, **k: make_engine())
    monkeypatch.setattr(rmjudge.models.resolve, "resolve_model", lambda m: "<scripted>")


def rows(db: str, sql: str) -> list[tuple]:
    """All rows of `sql` on a run store, opened read-only and closed again."""
    con = duckdb.connect(db, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cmd: list[str], log, probe: str, name: str, interval: float = 0.5):
    """Start a server process (output into the file `log`) and wait until GET `probe` answers
    200; its exit or 90 s without an answer fail the test's set-up. Returns the process."""
    import subprocess
    import time

    import httpx

    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(probe, timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(interval)
    proc.kill()
    raise RuntimeError(f"{name} did not start within 90 s")


def stop_server(proc) -> None:
    """SIGTERM a server process, then SIGKILL it if it has not ended within 10 s."""
    import signal
    import subprocess

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# `python -m rmjudge` in a fresh interpreter that also says on stdout when a chunk of judged
# pairs is committed, so a test can kill it right after a commit instead of after a guessed
# delay (rmjudge itself writes nothing to stdout while it scores).
_ANNOUNCING_CLI = """
import sys
from rmjudge.store import Store
commit = Store.commit
def announced(self, results, *args, **kwargs):
    commit(self, results, *args, **kwargs)
    if results:
        print(f"committed {len(results)}", flush=True)
Store.commit = announced
from rmjudge.cli import main
main(prog_name="rmjudge")
"""


def kill_after_commits(args: list, commits: int, preamble: str = "", **popen) -> int:
    """Run `rmjudge ARGS`, SIGKILL it right after its `commits`-th commit of judged pairs (or
    let it end first); returns the number of commits it made. `preamble`: Python code run
    first in that interpreter (e.g. `rmjudge.runs.setup.load_judge_engine` replaced by a scripted
    engine)."""
    import signal
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", preamble + "\n" + _ANNOUNCING_CLI,
                          *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **popen)
    seen = 0
    for line in p.stdout:
        seen += line.startswith("committed ")
        if seen >= commits:
            p.send_signal(signal.SIGKILL)
            break
    p.stdout.close()
    p.wait()
    return seen
