"""The README's front door: after `git clone`, exactly two set-up commands (the first installs
rmjudge and judges the example with the embedded demo judge, the second is the test command CI
runs), and (slow, embedded model) the first command's `rmjudge score` run as written shows the
method: rollouts that parse, an anchor in every pair-order, self-reflection and the vote.

One demo story: every figure the README, docs/quickstart.md and docs/view.md state about the
demo is that of one recorded run, docs/demo-run.json (the judged pair the README shows
included), and on the record's own CPU a fresh run writes the recorded samples.
`python tests/test_readme.py STORE` prints a demo store's figures in the record's form."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
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


@pytest.fixture(scope="module")
def demo_run(model_path, tmp_path_factory) -> tuple[str, str]:
    """`rmjudge score examples/pairs.jsonl` as the README writes it, from a copy of the example,
    once for the module's slow tests (one worker runs them): the store and what it printed."""
    from rmjudge.models.resolve import ENV_VAR

    command = setup_commands()[1].split(" && ")[1].split()
    assert command[:2] == ["rmjudge", "score"]
    work = tmp_path_factory.mktemp("demo")
    (work / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "pairs.jsonl", work / "examples" / "pairs.jsonl")
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    r = subprocess.run([sys.executable, "-m", "rmjudge", *command[1:]], cwd=work, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return str(work / "examples" / "pairs.judged.duckdb"), r.stderr


@pytest.mark.slow
@pytest.mark.model
def test_the_first_command_shows_the_method_on_the_examples(demo_run):
    """`rmjudge score examples/pairs.jsonl` as the README writes it, from a copy of the
    example: >= 90% of the rollouts write their own verdict at the demo's budget, every
    pair-order chooses an anchor, every other rollout is reflected against it (unless all agree),
    the reflections parse, and the summary says so."""
    from rmjudge.models.packaged import DEMO_ADAPTER_SHA256
    from rmjudge.prompts import parse_verdict

    out, stderr = demo_run
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
    summary = " ".join(stderr.split())
    assert "rollouts 64: cut at the token limit" in summary
    assert re.search(r"reflections (\d+): unparsed", summary)
    assert "chance-level accuracy is expected" in summary


# -- one demo story: the figures the README, docs/quickstart.md and docs/view.md state about the
# demo are those of one recorded run of the README's first command, docs/demo-run.json ----------

RECORD_PATH = ROOT / "docs" / "demo-run.json"
RECORD = json.loads(RECORD_PATH.read_text())
# the pages' text about the demo run lies between these two markers (HTML comments: not shown)
START, END = "<!-- demo run: docs/demo-run.json -->", "<!-- end of demo run -->"
DEMO_PAGES = ("README.md", "docs/quickstart.md", "docs/view.md")
# a number standing alone: not part of a name (SmolLM2-135M, Q8_0, AVX-512), a version or a date
_NUMBER = re.compile(r"(?<![\w.\-/])\d[\d,]*(?:\.\d+)?(?!\.?\d|[\w\-/])")
_ISA = re.compile(r"^(?:avx|amx|fma|f16c|sse|ssse3|vnni)")


def demo_sections(text: str) -> list[str]:
    """A page's marked passages about the demo run."""
    return re.findall(re.escape(START) + r"(.*?)" + re.escape(END), text, re.S)


def numbers(text: str) -> list[str]:
    """The figures a passage states: its numbers standing alone, outside code spans, HTML
    comments and link targets (thousands separators dropped)."""
    text = re.sub(r"<!--.*?-->|`[^`\n]*`|\]\([^)]*\)", " ", text, flags=re.S)
    return [n.replace(",", "") for n in _NUMBER.findall(text)]


def recorded_numbers(value) -> set[str]:
    """Every number the record holds, in its values (and in the texts among them)."""
    if isinstance(value, dict):
        return set().union(*map(recorded_numbers, value.values()))
    if isinstance(value, list):
        return set().union(*map(recorded_numbers, value))
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, (int, float)):
        return {str(value), f"{value:g}"}
    return set(numbers(str(value)))


def stray_figures(text: str, record: dict) -> list[str]:
    """The figures of a page's demo passages that the record's measured parts (not its machine's
    flags, its commit or the digest of its samples) do not hold."""
    measured = {k: v for k, v in record.items() if k not in ("about", "commit", "machine")}
    measured["run"] = {k: v for k, v in measured.get("run", {}).items()
                       if k not in ("samples_sha256", "model_sha256", "lora_sha256")}
    held = recorded_numbers(measured) | recorded_numbers(record.get("machine", {}).get("cores"))
    return [n for part in demo_sections(text) for n in numbers(part) if n not in held]


def cpu_kind() -> dict:
    """This machine's CPU as the record names it: the model name and the instruction-set
    extensions llama.cpp chooses its kernels by (Linux; {} elsewhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    name = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    flags = re.search(r"^flags\s*:\s*(.*)$", info, re.M)
    isa = sorted(f for f in (flags.group(1).split() if flags else []) if _ISA.match(f))
    return {"model_name": name.group(1).strip() if name else "", "isa": isa}


def wrap(line: str, width: int = 80) -> list[str]:
    """A line wrapped to `width` columns, indented by two, words whole, a word of punctuation
    alone (an ellipsis) kept with the word before it."""
    words = []
    for word in line.split():
        if words and not any(c.isalnum() for c in word):
            words[-1] += "\x00" + word
        else:
            words.append(word)
    lines = textwrap.wrap(" ".join(words), width, initial_indent="  ", subsequent_indent="  ",
                          break_long_words=False, break_on_hyphens=False)
    return [text.replace("\x00", " ") for text in lines] or [""]


def example_block(pairs, samples, pair_id: str) -> str:
    """The README's judged pair, as `rmjudge.open_store`'s tables give it: the verdicts, the
    responses, the vote share, order (A, B)'s anchor (its analysis wrapped to 80 columns) and
    how its self-reflection went."""
    p = pairs.set_index("id").loc[pair_id]
    ab = samples[(samples.pair_id == pair_id) & (samples.order == "ab")]
    rollouts = ab[ab.stage == "rollout"]
    anchor = rollouts[rollouts.is_anchor.fillna(False).astype(bool)].iloc[0]
    others = rollouts[~rollouts.is_anchor.fillna(False).astype(bool)]
    won = int(others.won_reflection.fillna(False).astype(bool).sum())
    reflections = int((ab.stage == "reflection").sum())
    lines = [f"id: {pair_id}    gold: {p.label}    verdict: {p.verdict}    (A, B) order: "
             f"{p.verdict_ab}    (B, A) order: {p.verdict_ba}",
             f"response_a: {p.response_a}", f"response_b: {p.response_b}",
             f"p_a {p.p_a:.2f} (the votes' share for A), consistent {bool(p.consistent)}, "
             f"correct {bool(p.correct)}",
             f"samples, order (A, B): {len(rollouts)} rollouts, {reflections} reflections; the "
             f"anchor (rollout {int(anchor.idx)}) wrote:"]
    for line in anchor.text.splitlines():
        lines += wrap(line)
    lines.append(f"self-reflection: {won} of the other {len(others)} analyses beat the anchor; "
                 f"the order's vote: {p.verdict_ab}")
    return "\n".join(lines)


def demo_figures(store_path: str, pair_id: str = "ex-capital") -> dict:
    """What a run of the demo judged, read back with `rmjudge.open_store`: the counts its
    summary prints, each pair's verdicts, the README's judged pair and a digest of every
    generation (equal digests: byte-identical samples)."""
    import rmjudge

    store = rmjudge.open_store(store_path)
    pairs, s, (run,) = store.pairs, store.samples, store.runs.itertuples()
    rollouts, reflections = s[s.stage == "rollout"], s[s.stage == "reflection"]
    own = rollouts.verdict_source == "generated"
    generations = s.sort_values(["pair_id", "order", "stage", "idx"])
    digest = hashlib.sha256()
    for g in generations.itertuples():
        digest.update(json.dumps([g.pair_id, g.order, g.stage, int(g.idx), g.text]).encode())
    return {
        "rollouts": len(rollouts), "rollouts_parsed": int(own.sum()),
        "forced": int((rollouts.verdict_source == "forced").sum()),
        "cut_at_max_tokens": int((rollouts.finish_reason == "length").sum()),
        "anchors": int(rollouts.is_anchor.fillna(False).astype(bool).sum()),
        "reflections": len(reflections),
        "reflections_parsed": int((reflections.verdict_source == "generated").sum()),
        "flips": int((pairs.verdict_ab != pairs.verdict_ba).sum()),
        "pairs": {p.id: {"gold": p.label, "verdict": p.verdict, "verdict_ab": p.verdict_ab,
                         "verdict_ba": p.verdict_ba, "p_a": round(float(p.p_a), 4)}
                  for p in pairs.itertuples()},
        "example_pair": example_block(pairs, s, pair_id),
        "generated_tokens": int(run.generated_tokens),
        "model_sha256": run.model_sha256, "lora_sha256": run.lora_sha256,
        "samples_sha256": digest.hexdigest(),
    }


def test_the_demo_record_is_one_run_on_one_named_machine():
    """The record names the machine, version, date and commands of its run, and its figures
    hold together (counts within their totals, the example pair one of the pairs)."""
    run, machine = RECORD["run"], RECORD["machine"]
    assert machine["cpu"]["model_name"] and machine["cpu"]["isa"], machine
    assert machine["avx512"] == any(f.startswith("avx512") for f in machine["cpu"]["isa"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", RECORD["rmjudge"]), RECORD["rmjudge"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", RECORD["date"]), RECORD["date"]
    assert RECORD["commands"]["score"] == setup_commands()[1].split(" && ")[1]
    settings = RECORD["settings"]
    assert run["rollouts"] == settings["pairs"] * settings["samples"] * 2  # both orders
    assert run["anchors"] == settings["pairs"] * 2
    assert run["rollouts_parsed"] <= run["rollouts"]
    assert run["reflections_parsed"] <= run["reflections"] <= run["rollouts"] - run["anchors"]
    assert len(run["pairs"]) == settings["pairs"]
    assert run["flips"] == sum(p["verdict_ab"] != p["verdict_ba"] for p in run["pairs"].values())
    assert run["example_pair"].startswith(f"id: {RECORD['example_pair_id']} ")


@pytest.mark.parametrize("page", DEMO_PAGES)
def test_the_demo_pages_state_the_recorded_run_and_its_machine(page):
    """Each page's passages about the demo name the reference run (version, date, the CPU and
    whether it has AVX-512), say that on another CPU the figures may differ, state the parsed
    rollouts and reflections, and state no figure the record does not hold."""
    text = (ROOT / page).read_text()
    parts = demo_sections(text)
    assert parts, f"{page}: no passage between {START!r} and {END!r}"
    demo = " ".join(" ".join(parts).split())
    run, machine = RECORD["run"], RECORD["machine"]
    for want in (f"rmjudge {RECORD['rmjudge']}", RECORD["date"], machine["cpu"]["model_name"],
                 "with AVX-512" if machine["avx512"] else "without AVX-512",
                 "on another CPU", "docs/demo-run.json" if page == "README.md" else
                 "(demo-run.json)"):
        assert want.lower() in demo.lower(), f"{page}: the demo passage does not say {want!r}"
    if page != "docs/view.md":
        assert f"{run['rollouts_parsed']} of {run['rollouts']} rollouts parsed" in demo, page
        assert f"{run['reflections']} reflections" in demo, page
    stray = stray_figures(text, RECORD)
    assert not stray, f"{page}: figures about the demo that docs/demo-run.json does not hold: " \
                      f"{stray} (state the recorded run's, or record a new run)"


def test_the_readmes_judged_pair_is_the_recorded_one():
    """The README's judged pair block is the recorded run's, line for line, and the sentence
    after it says what the two orders did."""
    block = re.search(r"^```text\n(id: .*?)\n```\n\n(.*?)\n\n", README, re.S | re.M)
    assert block, "the README shows no judged pair"
    assert block.group(1) == RECORD["run"]["example_pair"]
    pair = RECORD["run"]["pairs"][RECORD["example_pair_id"]]
    after = " ".join(block.group(2).split())
    if pair["verdict_ab"] != pair["verdict_ba"]:
        assert after.startswith("The two orders disagree here, so the combined verdict is a "
                                f"{pair['verdict']}"), after
    else:
        assert after.startswith(f"Both orders name {pair['verdict']} here"), after
    assert max(map(len, block.group(1).splitlines())) <= 80


def test_a_figure_the_record_does_not_hold_is_found():
    record = {"run": {"rollouts": 64, "rollouts_parsed": 63, "reflections": 55},
              "eval": {"ReflectRM": "50.0 [12.5, 87.5]"}, "rmjudge": "0.14.0"}
    page = (f"Intro 62.5%. {START}\n63 of 64 rollouts parsed, 55 reflections, SmolLM2-135M, "
            "Q8_0, AVX-512, rmjudge 0.14.0 (2026-12-07), accuracy 50.0% [12.5, 87.5], "
            f"`--samples 8`, [a](docs/x2.md).\n{END} Outside: 7 s.")
    assert stray_figures(page, record) == []
    assert stray_figures(page.replace("55 reflections", "48 reflections"), record) == ["48"]
    assert stray_figures(page.replace("50.0%", "62.5%"), record) == ["62.5"]
    assert stray_figures("no markers: 62.5%", record) == []


@pytest.mark.slow
@pytest.mark.model
def test_a_fresh_demo_run_on_the_records_cpu_matches_the_record(demo_run):
    """On the recorded run's CPU (its model name and instruction-set extensions) with the same
    llama-cpp-python, the demo writes the recorded samples byte for byte, so the figures the pages
    state hold, and `eval` prints the recorded figures. Elsewhere llama.cpp's kernels, and so the
    samples, may differ: the test says so and is skipped."""
    import llama_cpp

    here, there = cpu_kind(), RECORD["machine"]["cpu"]
    if here != there or llama_cpp.__version__ != RECORD["llama_cpp_python"]:
        pytest.skip(f"the demo record (docs/demo-run.json) was made on {there['model_name']} "
                    f"{'with' if RECORD['machine']['avx512'] else 'without'} AVX-512 and "
                    f"llama-cpp-python {RECORD['llama_cpp_python']}; this machine has "
                    f"{here.get('model_name') or 'another CPU'} "
                    f"{'with' if any('avx512' in f for f in here.get('isa', [])) else 'without'}"
                    f" AVX-512 and llama-cpp-python {llama_cpp.__version__}, whose samples may "
                    "differ")
    out, _ = demo_run
    assert demo_figures(out, RECORD["example_pair_id"]) == RECORD["run"], (
        "on the record's own machine the demo's samples differ from docs/demo-run.json: if a "
        "change meant to change them, run the README's first command on a clean clone and "
        "record it (`python tests/test_readme.py examples/pairs.judged.duckdb` prints the "
        "figures), with the pages that state them")
    r = subprocess.run([sys.executable, "-m", "rmjudge", "eval", out], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    printed = " ".join(r.stdout.split())
    for measure in ("accuracy", "correct_in_both_orders"):
        for row, figure in RECORD["eval"][measure].items():
            assert figure in printed, (measure, row, figure)


if __name__ == "__main__":  # a demo store's figures, as docs/demo-run.json records them ("run")
    print(json.dumps(demo_figures(sys.argv[1]), indent=2))
