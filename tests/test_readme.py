"""The README's front door: after `git clone`, exactly two set-up commands (the first installs
rmjudge and judges the example with the embedded demo judge, the second is the test command CI
runs), and (slow, embedded model) the first command's `rmjudge score` run as written shows the
method: rollouts that parse, an anchor in every pair-order, self-reflection and the vote."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import rows

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def setup_commands() -> list[str]:
    """The lines of the README's first shell block."""
    block = re.search(r"^```bash\n(.*?)^```", README, re.S | re.M)
    assert block, "the README has no shell block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_opens_with_git_clone_and_two_set_up_commands():
    lines = setup_commands()
    assert len(lines) == 3 and lines[0].startswith("git clone "), lines
    install, test = lines[1], lines[2]
    assert install == "pip install '.[model]' && rmjudge score examples/pairs.jsonl"
    assert test == "pip install '.[test]' && python -m pytest -q -rs"
    # CI runs both, as written and in this order (test_ci_runs_..._in_a_new_venv runs .ci/run)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert install in ci and test in ci and ci.index(install) < ci.index(test)
    # the front door comes before any detail: both commands within the first screen
    assert README.index(lines[2]) < len("\n".join(README.splitlines()[:20]))


# .ci/run with every program it calls replaced by a script that logs the call: the program's path,
# its arguments, the virtual environment it runs in and the folder it runs from
LOGGED = """#!/usr/bin/env bash
echo "$0 $* | ${VIRTUAL_ENV:-none} | $PWD" >> "$CI_LOG"
case "$(basename "$0") $*" in
  "rmjudge score "*) exit "${CI_SCORE_RC:-0}" ;;
  "python -m pytest "*) exit "${CI_PYTEST_RC:-0}" ;;
esac
"""
# `python -m venv DIR` outside a venv makes one whose activate script puts DIR/bin first
VENV_MAKER = LOGGED + """if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  printf 'export VIRTUAL_ENV=%q\\nexport PATH="$VIRTUAL_ENV/bin:$PATH"\\n' "$3" > "$3/bin/activate"
  for tool in python pip rmjudge; do cp "$CI_FAKES/pip" "$3/bin/$tool"; done
fi
"""


def run_ci(tmp_path: Path, **rcs: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for name, text in (("python", VENV_MAKER), ("pip", LOGGED), ("rmjudge", LOGGED),
                       ("apt-get", LOGGED), ("chromium", ""), ("chromedriver", "")):
        (fakes / name).write_text(text or "#!/bin/sh\n")
        (fakes / name).chmod(0o755)
    log = tmp_path / "calls.log"
    env = {"PATH": f"{fakes}:/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
           "CI_LOG": str(log), "CI_FAKES": str(fakes),
           **{f"CI_{k.upper()}_RC": str(v) for k, v in rcs.items()}}
    done = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True,
                          text=True, timeout=60)
    return done, log.read_text().splitlines() if log.exists() else []


def test_ci_runs_the_readmes_two_commands_as_written_in_a_new_venv(tmp_path):
    """.ci/run makes a virtual environment in a temporary folder, and in it, from the root of
    the clone, runs the README's set-up commands as the README writes them, in order; the
    folder is gone afterwards."""
    done, calls = run_ci(tmp_path)
    assert done.returncode == 0, done.stderr
    maker, *inside = calls
    venv = maker.split(" | ")[0].split(" -m venv ")[1]
    assert maker == f"{tmp_path}/fakes/python -m venv {venv} | none | {ROOT}"
    assert Path(venv).parent.parent == tmp_path and not Path(venv).parent.exists()
    want = [shlex.split(cmd) for line in setup_commands()[1:] for cmd in line.split(" && ")]
    assert inside == [f"{venv}/bin/{argv[0]} {' '.join(argv[1:])} | {venv} | {ROOT}"
                      for argv in want]
    assert [argv[0] for argv in want] == ["pip", "rmjudge", "pip", "python"]  # seen as written


@pytest.mark.parametrize("rcs,exit_code,message,tested", [
    ({"pytest": 5}, 1, "CI: pytest collected no tests; failing", True),
    ({"pytest": 1}, 1, "", True),
    ({"score": 2}, 2, "CI: the README's first command failed (exit 2)", False),
])
def test_ci_fails_when_a_command_fails_or_no_test_is_collected(tmp_path, rcs, exit_code,
                                                               message, tested):
    done, calls = run_ci(tmp_path, **rcs)
    assert done.returncode == exit_code
    assert done.stderr.strip() == message
    assert any(" -m pytest " in c for c in calls) == tested


@pytest.mark.slow
@pytest.mark.model
def test_the_first_command_shows_the_method_on_the_examples(model_path, tmp_path, monkeypatch):
    """`rmjudge score examples/pairs.jsonl` as the README writes it, from a copy of the
    example: >= 90% of the rollouts write their own verdict at the demo's budget, every
    pair-order chooses an anchor, every other rollout is reflected against it (unless all agree),
    the reflections parse, and the summary says so."""
    from rmjudge.engine.models import DEMO_ADAPTER_SHA256, ENV_VAR
    from rmjudge.prompts import parse_verdict

    command = setup_commands()[1].split(" && ")[1].split()
    assert command[:2] == ["rmjudge", "score"]
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "pairs.jsonl", tmp_path / "examples" / "pairs.jsonl")
    monkeypatch.delenv(ENV_VAR, raising=False)
    r = subprocess.run([sys.executable, "-m", "rmjudge", *command[1:]], cwd=tmp_path,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    out = str(tmp_path / "examples" / "pairs.judged.duckdb")
    texts = rows(out, "SELECT text FROM samples WHERE stage = 'rollout'")
    parsed = sum(parse_verdict(t, "pref") is not None for (t,) in texts)
    assert len(texts) == 64 and parsed / len(texts) >= 0.9, parsed  # N = 8, 4 pairs, 2 orders
    anchors = rows(out, "SELECT pair_id, \"order\", count(*) FROM samples WHERE is_anchor "
                        "GROUP BY ALL")
    assert len(anchors) == 8 and all(n == 1 for *_, n in anchors), anchors
    # each pair-order reflects every other rollout with a verdict of its own against the anchor,
    # except where all those rollouts agree (the exact unanimity shortcut: reflection could not
    # change the verdict, docs/reflectrm.md); the demo shows reflection in most pair-orders
    per_order = rows(out, """SELECT pair_id, "order",
        count(DISTINCT prediction) FILTER (stage = 'rollout' AND verdict_source = 'generated'),
        count(*) FILTER (stage = 'rollout' AND verdict_source = 'generated' AND NOT is_anchor),
        count(*) FILTER (stage = 'reflection') FROM samples GROUP BY ALL""")
    assert len(per_order) == 8
    for pair, order, verdicts, others, reflections in per_order:
        assert reflections == (others if verdicts > 1 else 0), (pair, order)
    assert sum(1 for *_, n in per_order if n) >= len(per_order) // 2, per_order
    refl = rows(out, "SELECT text FROM samples WHERE stage = 'reflection'")
    assert sum(parse_verdict(t, "refl") is not None for (t,) in refl) >= 0.9 * len(refl)
    assert rows(out, "SELECT lora_sha256 FROM runs") == [(DEMO_ADAPTER_SHA256,)]
    summary = " ".join(r.stderr.split())
    assert "rollouts 64: cut at the token limit" in summary
    assert re.search(r"reflections (\d+): unparsed", summary)
    assert "chance-level accuracy is expected" in summary
