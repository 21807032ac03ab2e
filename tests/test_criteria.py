"""`--criteria` and `--prompt-template` (docs/scoring.md, "Criteria and prompt templates"): the
rubric in both prompts, the plain prompts unchanged without it, resumes with other criteria
refused, bad templates refused before any model loads, `--label safer` judging by `harmless`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import orjson
import pytest
from helpers import judge_with, pref, refl

from rmjudge.engine.fake import ScriptedEngine
from rmjudge.core.errors import EXIT_USER
from rmjudge.runs.pipeline import score
from rmjudge.prompts import (PromptStyle, pref_messages, prompt_style, refl_messages,
                             verdict_lines)
from rmjudge.prompts.criteria import BUILTIN
from rmjudge.core.settings import JudgeSettings
from rmjudge.files import StoreError

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
CONV = ({"role": "user", "content": "How do I boil an egg?"},)

# The prompts as rmjudge 0.5 (prompt format 3) words them: without criteria they must not
# change by a byte (stores resume, samples stay reproducible).
PLAIN_PREF = (
    "You are an impartial judge.\n\n## Context\nHow do I boil an egg?\n\n"
    "## The two responses\n### Response 1\nR-one\n\n### Response 2\nR-two\n\n"
    "## Your task\nDecide which of the two responses above is the better answer to the "
    "conversation. First write your analysis inside <Analysis>...</Analysis>. Then give your "
    "verdict inside <Result>...</Result> as exactly one of:\nResponse 1 is better than "
    "Response 2\nResponse 2 is better than Response 1 /no_think")
PLAIN_REFL = (
    "You are an impartial judge.\n\n## Context\nHow do I boil an egg?\n\n"
    "## The two responses\n### Response 1\nR-one\n\n### Response 2\nR-two\n\n"
    "## Your task\nBelow are two critiques, each an analysis of the two responses above that "
    "ends in a judgment of which response is better. Decide which critique is better: which "
    "one analyses the two responses more accurately and reaches the right judgment. You are "
    "judging the two critiques, not the responses.\n\n## The two critiques\n### Critique 1\n"
    "C-one\n\n### Critique 2\nC-two\n\n## Your verdict\nCompare the two critiques above. First "
    "write your analysis inside <Analysis>...</Analysis>. Then give your verdict inside "
    "<Result>...</Result> as exactly one of:\nCritique 1 is better than Critique 2\nCritique 2 "
    "is better than Critique 1 /no_think")

GOOD_TEMPLATE = """{% if task == "pref" %}Which answer is better? Rubric: {{ criteria }}
Q: {{ context }}
A1: {{ response1 }}
A2: {{ response2 }}
{{ answer_format }}{% else %}Which critique is better? Rubric: {{ criteria }}
Q: {{ context }}
A1: {{ response1 }}
A2: {{ response2 }}
Critique 1: {{ critique1 }}
Critique 2: {{ critique2 }}
{{ answer_format }}{% endif %}"""


def both(style: PromptStyle) -> tuple[str, str]:
    p = pref_messages(CONV, "R-one", "R-two", " /no_think", style)[0]["content"]
    r = refl_messages(CONV, "R-one", "R-two", "C-one", "C-two", " /no_think", style)[0]["content"]
    return p, r


def test_without_criteria_the_prompts_are_unchanged():
    assert both(PromptStyle()) == (PLAIN_PREF, PLAIN_REFL)
    assert both(prompt_style(None, None)) == (PLAIN_PREF, PLAIN_REFL)


@pytest.mark.parametrize("how", ["builtin", "file", "text"])
def test_criteria_go_into_both_prompts_and_keep_the_verdict_format(tmp_path, how):
    text = "Prefer the answer a food-safety inspector would sign off.\nShorter wins ties."
    if how == "builtin":
        value, text = "honest", BUILTIN["honest"]
    elif how == "file":
        f = tmp_path / "rubric.txt"
        f.write_text(text + "\n")
        value = f"@{f}"
    else:
        value = text
    p, r = both(prompt_style(value))
    for body, task in ((p, "pref"), (r, "refl")):
        assert f"## Criteria\nJudge by these criteria:\n{text}\n\n## Your task\n" in body
        assert body.endswith("\n".join(verdict_lines(task)) + " /no_think")
    # the shared head (prefix cache) still holds: both prompts open with the same text
    head = p.split("## Your task")[0]
    assert r.startswith(head) and text in head
    # and apart from the criteria block they are the plain prompts
    block = f"## Criteria\nJudge by these criteria:\n{text}\n\n"
    assert (p.replace(block, ""), r.replace(block, "")) == (PLAIN_PREF, PLAIN_REFL)


def test_a_template_renders_both_tasks_with_the_criteria(tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text(GOOD_TEMPLATE)
    p, r = both(prompt_style("harmless", str(f)))
    assert p.startswith("Which answer is better? Rubric: " + BUILTIN["harmless"])
    assert r.startswith("Which critique is better? Rubric: " + BUILTIN["harmless"])
    assert "Critique 1: C-one" in r and "A2: R-two" in p
    assert p.endswith("Response 2 is better than Response 1 /no_think")
    assert r.endswith("Critique 2 is better than Critique 1 /no_think")


def resume_settings(**kw) -> JudgeSettings:
    return JudgeSettings(samples=2, seed=1, max_tokens=64, **kw)


def judge(req, i):
    return refl(1) if req.share_key[2] == "reflection" else pref(1 + i % 2)


def test_a_resume_with_other_criteria_is_refused(tmp_path):
    src, out = str(DATA / "pandalm_5.jsonl"), str(tmp_path / "o.duckdb")
    eng = ScriptedEngine(judge)
    score(src, eng, resume_settings(criteria="helpful"), output=out, limit=1)
    prompts = [r.messages[0]["content"] for batch in eng.calls for r in batch]
    assert prompts and all(BUILTIN["helpful"] in p for p in prompts)
    assert {r.share_key[2] for batch in eng.calls for r in batch} == {"rollout", "reflection"}
    con = duckdb.connect(out, read_only=True)
    stored = orjson.loads(con.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()[0])
    con.close()
    assert stored["criteria"] == BUILTIN["helpful"]
    with pytest.raises(StoreError, match=r"other settings \(criteria helpful -> honest\); "):
        score(src, ScriptedEngine(judge), resume_settings(criteria="honest"), output=out)
    with pytest.raises(StoreError, match=r"other settings \(criteria helpful -> none\); "):
        score(src, ScriptedEngine(judge), resume_settings(), output=out)
    s = score(src, ScriptedEngine(judge), resume_settings(criteria="helpful"), output=out)
    assert s.skipped == 1 and s.judged == 4


def test_the_criteria_refusal_names_both_rubrics_briefly_on_one_line(tmp_path, monkeypatch):
    """A resume with other criteria is one short Error line: a built-in by its name, a given
    rubric by its first words and sha256 prefix (never the whole text), and the fix."""
    import hashlib

    from click.testing import CliRunner

    from rmjudge.cli import main

    judge_with(monkeypatch, lambda: ScriptedEngine(judge))
    rubric = "Prefer the answer a careful domain\nexpert would give; " + "all else equal. " * 40
    (tmp_path / "rubric.txt").write_text(rubric)
    out = str(tmp_path / "o.duckdb")
    base = ["score", str(DATA / "pandalm_5.jsonl"), "-o", out, "--samples", "2", "--limit", "1"]
    assert CliRunner().invoke(main, base + ["--criteria", "helpful"]).exit_code == 0
    r = CliRunner().invoke(main, base + ["--criteria", f"@{tmp_path / 'rubric.txt'}"])
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    sha = hashlib.sha256(rubric.strip().encode()).hexdigest()[:12]
    assert r.exit_code == 1 and errors == [
        f"Error: {out} holds results made with other settings (criteria helpful -> 'Prefer the "
        f"answer a careful domain ...' (sha256 {sha})); rerun with the same settings to "
        "resume, use -o to write elsewhere, or --overwrite to start again"], r.output
    assert "all else equal" not in r.output and "The better response" not in r.output


def test_a_run_without_criteria_records_the_same_settings_as_before(tmp_path):
    src, out = str(DATA / "pandalm_5.jsonl"), str(tmp_path / "o.duckdb")
    score(src, ScriptedEngine(judge), resume_settings(), output=out, limit=1)
    con = duckdb.connect(out, read_only=True)
    stored = orjson.loads(con.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()[0])
    con.close()
    assert "criteria" not in stored and "prompt_template" not in stored
    assert "prompt_template_sha256" not in stored


def test_a_template_is_recorded_by_its_hash_and_another_is_refused(tmp_path):
    src, out = str(DATA / "pandalm_5.jsonl"), str(tmp_path / "o.duckdb")
    f = tmp_path / "t.jinja"
    f.write_text(GOOD_TEMPLATE)
    score(src, ScriptedEngine(judge), resume_settings(prompt_template=str(f)), output=out, limit=1)
    f.write_text(GOOD_TEMPLATE.replace("Which answer", "What answer"))
    with pytest.raises(StoreError, match=r"other settings \(prompt_template_sha256 "):
        score(src, ScriptedEngine(judge), resume_settings(prompt_template=str(f)), output=out)


def rmjudge(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rmjudge", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


BAD_TEMPLATES = {
    "syntax": ("{% if task == 'pref' %}{{ response1 }", r"has a syntax error \(line 1: "),
    "slot": (GOOD_TEMPLATE.replace("A2: {{ response2 }}\n{{ answer_format }}{% else %}",
                                   "{{ answer_format }}{% else %}"),
             r"the response-preference prompt \(task == \"pref\"\) lacks the slot "
             r"\{\{ response2 \}\}"),
    "critique": (GOOD_TEMPLATE.replace("Critique 2: {{ critique2 }}\n", ""),
                 r"the reflection prompt \(task == \"refl\"\) lacks the slot \{\{ critique2 \}\}"),
    "criteria": (GOOD_TEMPLATE.replace("Rubric: {{ criteria }}", ""),
                 r"lacks the slot \{\{ criteria \}\}"),
    "verdict": (GOOD_TEMPLATE.replace("{{ answer_format }}{% endif %}",
                                      "Say which.{% endif %}"),
                r"the reflection prompt \(task == \"refl\"\) lacks the verdict format \(the line "
                r"\"Critique 1 is better than Critique 2\""),
    "sandbox": ("{{ response1.__class__.__mro__ }}" + GOOD_TEMPLATE,
                r"does something rmjudge's template sandbox blocks"),
}


@pytest.mark.parametrize("kind", sorted(BAD_TEMPLATES))
def test_a_bad_template_fails_before_the_model_loads(tmp_path, kind):
    text, message = BAD_TEMPLATES[kind]
    f = tmp_path / "t.jinja"
    f.write_text(text)
    out = tmp_path / "o.duckdb"
    # a model that does not exist: the template is refused before any load is tried
    r = rmjudge("score", DATA / "pandalm_5.jsonl", "-o", out, "--model",
                tmp_path / "missing.gguf", "--criteria", "helpful", "--prompt-template", f)
    assert r.returncode == EXIT_USER, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    import re

    assert re.search(rf"^Error: --prompt-template {re.escape(str(f))}(:| )", errors[0])
    assert re.search(message, errors[0]), errors[0]
    assert "missing.gguf" not in r.stderr and not out.exists()


def test_an_unreadable_criteria_file_is_one_error_line(tmp_path):
    r = rmjudge("score", DATA / "pandalm_5.jsonl", "-o", tmp_path / "o.duckdb", "--model",
                tmp_path / "missing.gguf", "--criteria", f"@{tmp_path / 'nope.txt'}")
    assert r.returncode == EXIT_USER
    assert r.stderr.strip().splitlines()[-1].startswith(
        f"Error: --criteria @{tmp_path / 'nope.txt'}: cannot read ")
    assert "missing.gguf" not in r.stderr


def test_label_safer_judges_by_the_harmless_criterion(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from rmjudge.cli import main

    engines = []

    def load():
        engines.append(ScriptedEngine(judge))
        return engines[-1]

    judge_with(monkeypatch, load)
    src = DATA / "schemas" / "pku_saferlhf.jsonl"
    r = CliRunner().invoke(main, ["score", str(src), "-o", str(tmp_path / "a.duckdb"),
                                  "--label", "safer", "--samples", "2", "--limit", "1"],
                           env={"COLUMNS": "1000"})  # the note's whole line
    assert r.exit_code == 0, r.output
    assert ("rmjudge: criteria: harmless (the built-in that --label safer comes with; "
            "--criteria changes it)") in r.output
    sent = [q.messages[0]["content"] for batch in engines[-1].calls for q in batch]
    assert sent and all(BUILTIN["harmless"] in p for p in sent)
    # an explicit --criteria wins
    r = CliRunner().invoke(main, ["score", str(src), "-o", str(tmp_path / "b.duckdb"),
                                  "--label", "safer", "--criteria", "helpful", "--samples", "2",
                                  "--limit", "1"])
    assert r.exit_code == 0, r.output
    sent = [q.messages[0]["content"] for batch in engines[-1].calls for q in batch]
    assert all(BUILTIN["helpful"] in p and BUILTIN["harmless"] not in p for p in sent)
    # the better label comes with no criteria
    r = CliRunner().invoke(main, ["score", str(src), "-o", str(tmp_path / "c.duckdb"),
                                  "--samples", "2", "--limit", "1"])
    sent = [q.messages[0]["content"] for batch in engines[-1].calls for q in batch]
    assert r.exit_code == 0 and not any("## Criteria" in p for p in sent)


@pytest.mark.parametrize("criteria", ["harmless", "Prefer answers in French.\nBe strict."])
def test_the_dataset_card_names_the_criteria_and_the_template(tmp_path, criteria):
    from analysis_fixture import build
    from click.testing import CliRunner

    from rmjudge.cli import main

    f = tmp_path / "t.jinja"
    template = GOOD_TEMPLATE.replace("Critique 1: {{ critique1 }}\nCritique 2: {{ critique2 }}",
                                     "### Critique 1\n{{ critique1 }}\n\n### Critique 2\n"
                                     "{{ critique2 }}")
    f.write_text(template)
    judged = build(tmp_path, criteria=criteria, prompt_template=str(f))
    folder = tmp_path / "upload"
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(tmp_path / "dpo.parquet"),
                                  "--push-to-hub", "my-org/x", "--dry-run", str(folder)])
    assert r.exit_code == 0, r.output
    text = (folder / "README.md").read_text()
    if criteria == "harmless":
        assert "- judging criteria (`--criteria` harmless, a built-in), in both prompts:" in text
        assert f"  > {BUILTIN['harmless']}\n" in text
    else:
        assert "- judging criteria (`--criteria`), in both prompts:\n\n" \
               "  > Prefer answers in French.\n  > Be strict.\n" in text
    import hashlib

    sha = hashlib.sha256(template.encode()).hexdigest()
    assert f"- prompts worded by a `--prompt-template`, sha256 `{sha}`" in text


def test_a_plain_run_has_no_criteria_lines_on_its_card(tmp_path):
    from rmjudge.publish.card import criteria_lines

    assert criteria_lines({"samples": 8, "prompt_format": 3}) == []


def test_the_greedy_baseline_prompts_with_the_run_criteria_and_refuses_a_template(tmp_path):
    from analysis_fixture import FIXTURE
    from analysis_fixture import respond as scripted

    from rmjudge.analysis.greedy import run_greedy
    from rmjudge.analysis.tables import TableError, open_judged

    out = str(tmp_path / "judged.duckdb")
    run_engine = ScriptedEngine(scripted)
    score(str(FIXTURE), run_engine, JudgeSettings(samples=2, seed=0, criteria="honest"),
          output=out)
    sampled = {(r.share_key[0], r.share_key[1]): r.messages for c in run_engine.calls for r in c
               if r.share_key[2] == "rollout"}
    greedy = ScriptedEngine(lambda req, i: scripted(req, 0))
    with open_judged(out) as t:
        run_greedy(t, greedy)
    got = {(r.share_key[0], r.share_key[1]): r.messages for c in greedy.calls for r in c}
    assert got == sampled and all(BUILTIN["honest"] in m[0]["content"] for m in got.values())

    f = tmp_path / "t.jinja"
    f.write_text(GOOD_TEMPLATE.replace("Critique 1: {{ critique1 }}\nCritique 2: {{ critique2 }}",
                                       "### Critique 1\n{{ critique1 }}\n\n### Critique 2\n"
                                       "{{ critique2 }}"))
    out2 = str(tmp_path / "t.duckdb")
    score(str(FIXTURE), ScriptedEngine(scripted), JudgeSettings(samples=2, prompt_template=str(f)),
          output=out2)
    with open_judged(out2) as t, pytest.raises(TableError, match="judged with a --prompt-template"):
        run_greedy(t, ScriptedEngine(lambda req, i: scripted(req, 0)))


# -- training accepts the same criteria --------------------------------------------------------

def training_engine():
    from rmjudge.prompts import completion_text

    def respond(req, i):
        return completion_text("pref", f"analysis {i}", 1 + i % 2)  # mixed outcomes

    return ScriptedEngine(respond)


def test_build_data_prompts_and_records_the_criteria(tmp_path):
    from rmjudge.training.cache import CacheError
    from rmjudge.training.data import DataConfig, build_data, read_examples
    from rmjudge.training.rollouts import EngineRollouts, SamplingSettings

    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(orjson.dumps({"id": f"p{i}", "prompt": f"question {i}",
                                         "chosen": f"GOOD {i}", "rejected": f"BAD {i}"}).decode()
                           + "\n" for i in range(4)))
    eng = training_engine()
    rollouts = EngineRollouts(eng, SamplingSettings(samples=2, max_tokens=32,
                                                    criteria=BUILTIN["harmless"]))
    out = tmp_path / "train.jsonl"
    build_data(str(src), out, rollouts, DataConfig(ratio="1:1"))
    sent = [r.messages[0]["content"] for c in eng.calls for r in c]
    assert sent and all(BUILTIN["harmless"] in p for p in sent)
    ex = read_examples(out)
    assert {e["task"] for e in ex} == {"pref", "refl"}
    for e in ex:
        assert e["criteria"] == BUILTIN["harmless"]
        assert f"## Criteria\nJudge by these criteria:\n{BUILTIN['harmless']}\n\n" in \
            e["prompt"][0]["content"]
    # the rollout cache was prompted with these criteria: other criteria do not reuse it
    plain = EngineRollouts(training_engine(), SamplingSettings(samples=2, max_tokens=32))
    with pytest.raises(CacheError, match="criteria"):
        build_data(str(src), tmp_path / "t2.jsonl", plain, DataConfig(ratio="1:1"),
                   cache_path=str(out) + ".rollouts.jsonl")
    # without criteria the data has no such field (as before)
    build_data(str(src), tmp_path / "t3.jsonl", plain, DataConfig(ratio="1:1"))
    assert all("criteria" not in e and "## Criteria" not in e["prompt"][0]["content"]
               for e in read_examples(tmp_path / "t3.jsonl"))


def test_sft_targets_and_the_held_out_swap_keep_the_criteria():
    from rmjudge.training.cache import CachedRollouts
    from rmjudge.training.evaluate import swapped_prompt
    from rmjudge.training.rollouts import Item
    from rmjudge.training.sft_data import SFTStats, sft_examples

    item = Item("i1", CONV, "R-one", "R-two", 1)
    ex = sft_examples(item, CachedRollouts(["some analysis."], ["stop"]), "", ("pref", "refl"),
                      200, 0, SFTStats(), BUILTIN["honest"])
    assert len(ex) == 4 and all(BUILTIN["honest"] in e["prompt"][0]["content"] for e in ex)
    swapped = swapped_prompt({"responses": ["R-one", "R-two"], "conversation": list(CONV),
                              "suffix": "", "criteria": BUILTIN["honest"]})
    assert BUILTIN["honest"] in swapped[0]["content"]
    assert swapped_prompt({"responses": ["R-one", "R-two"], "conversation": list(CONV),
                           "suffix": " /no_think"})[0]["content"] == PLAIN_PREF.replace(
        "R-one", "\0").replace("R-two", "R-one").replace("\0", "R-two")


def test_build_data_refuses_an_unreadable_criteria_file_before_loading(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rmjudge.training.cli", "build-data",
                        str(DATA / "pandalm_5.jsonl"), "-o", str(tmp_path / "t.jsonl"),
                        "--model", str(tmp_path / "missing.gguf"), "--criteria",
                        f"@{tmp_path / 'nope.txt'}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == EXIT_USER
    assert r.stderr.strip().splitlines()[-1].startswith(
        f"Error: --criteria @{tmp_path / 'nope.txt'}: cannot read "), r.stderr
    assert "missing.gguf" not in r.stderr


def test_the_documented_template_passes_the_check(tmp_path):
    doc = (ROOT / "docs" / "scoring.md").read_text()
    text = doc.split("```jinja\n", 1)[1].split("```", 1)[0]
    f = tmp_path / "doc.jinja"
    f.write_text(text)
    for criteria in (None, "helpful"):
        p, r = both(prompt_style(criteria, str(f)))
        assert "Response 2: R-two" in p and "Critique 2: C-two" in r
        assert (BUILTIN["helpful"] in p) == (criteria is not None)
