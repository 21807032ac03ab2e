"""The demo format adapter shipped for the embedded model: when it is used (only for the
embedded model chosen by default; an explicit --model or --lora is never changed;
--no-demo-adapter turns it off), the packaged file and its recorded hash, what the run spec and
the run record say of it and its templated training targets. That the embedded model with it
writes parseable verdicts and runs self-reflection on the examples is tests/test_readme.py's
run of the README's first command."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from pathlib import Path

import pytest

from rmjudge.engine.fake import FAKE_INFO, ScriptedEngine
from rmjudge.models.packaged import (DEMO_ADAPTER_FILE, DEMO_ADAPTER_NAME, DEMO_ADAPTER_SHA256,
                                     demo_adapter_path)
from rmjudge.models.resolve import ENV_VAR, wants_demo_adapter, with_demo_adapter
from rmjudge.prompts import PROMPT_FORMAT, parse_verdict
from rmjudge.judging.runspec import DEMO_MODEL_SHA256, resolve
from rmjudge.core.settings import EngineSettings, JudgeSettings

from helpers import pref, rows

ROOT = Path(__file__).resolve().parent.parent
DEMO_INFO = dataclasses.replace(FAKE_INFO, sha256=next(iter(DEMO_MODEL_SHA256)),
                                name="SmolLM2-135M-Instruct")


@pytest.fixture
def no_env_model(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.mark.model
def test_the_embedded_model_chosen_by_default_gets_the_adapter(no_env_model, model_path):
    # merged into the Q8_0 copy (rmjudge/models/embedded.py `demo_judge`, tests/test_lora_merge.py)
    from rmjudge.models.embedded import demo_judge_path
    from rmjudge.models.packaged import packaged_model_path

    es = with_demo_adapter(EngineSettings())
    assert es.model == str(demo_judge_path(packaged_model_path(), demo_adapter_path()))
    assert es.lora is None
    assert wants_demo_adapter(EngineSettings())
    # another scale than the merged one: the adapter applied at run time to the Q8_0 copy
    es = with_demo_adapter(EngineSettings(lora_scale=0.5))
    assert es.lora == demo_adapter_path() and es.model is None


@pytest.mark.parametrize("given", [
    {"model": "judge.gguf"},  # an explicit model, even the embedded file, is never changed
    {"lora": "mine.lora.gguf"},  # an explicit adapter is never replaced
    {"demo_adapter": False},  # --no-demo-adapter
])
def test_explicit_choices_and_the_off_switch_leave_the_settings_as_given(no_env_model, given):
    es = EngineSettings(**given)
    assert not wants_demo_adapter(es)
    assert with_demo_adapter(es) is es


def test_a_model_named_by_the_environment_is_explicit(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "judge.gguf")
    assert with_demo_adapter(EngineSettings()).lora is None


def test_no_demo_adapter_is_an_option_of_the_judging_commands(tmp_path):
    import click

    from rmjudge.cli import main
    from rmjudge.cli.run_options import parse_run_options

    ctx = click.Context(main)
    for name in ("score", "eval", "bench"):
        command = main.get_command(ctx, name)
        assert "--no-demo-adapter" in {o for p in command.params for o in p.opts}
    score = main.get_command(ctx, "score")
    ctx = score.make_context("score", ["in.jsonl", "--no-demo-adapter"])
    kw = dict(ctx.params)
    kw.pop("source"), kw.pop("output"), kw.pop("strict"), kw.pop("dry_run"), kw.pop("quiet")
    kw.pop("hub_config"), kw.pop("hub_split")
    assert parse_run_options(kw).engine.demo_adapter is False
    ctx = score.make_context("score", ["in.jsonl"])
    assert ctx.params["no_demo_adapter"] is False


def test_the_packaged_adapter_exists_with_the_recorded_hash_and_prompt_format():
    from rmjudge.models.adapter_format import GGUF_KEY
    from rmjudge.models.gguf_header import gguf_metadata_value

    path = Path(demo_adapter_path())
    assert path.name == DEMO_ADAPTER_FILE and path.parent == ROOT / "rmjudge" / "models" / "adapters"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == DEMO_ADAPTER_SHA256
    assert path.stat().st_size < 16 * 2**20  # a few MB
    assert gguf_metadata_value(str(path), GGUF_KEY) == PROMPT_FORMAT
    # the wheel carries it: the package data names the file
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert any(path.relative_to(ROOT / "rmjudge" / "models").match(pat)
               for pat in data["package-data"]["rmjudge.models"])


def test_the_run_spec_keeps_the_demo_defaults_and_names_the_adapter():
    info = dataclasses.replace(DEMO_INFO, lora=demo_adapter_path(),
                               lora_sha256=DEMO_ADAPTER_SHA256)
    spec = resolve(JudgeSettings(), info)
    assert (spec.settings.max_tokens, spec.settings.forced, spec.demo) == (256, True, True)
    notes = spec.defaults_note()
    assert any(f"demo format adapter: {DEMO_ADAPTER_NAME} (sha256 {DEMO_ADAPTER_SHA256[:12]}"
               in n for n in notes)
    assert any("teaches it the answer format" in n and "chance-level" in n for n in notes)
    assert spec.verdict_settings()["lora_sha256"] == DEMO_ADAPTER_SHA256
    # another adapter on the embedded model is another judge: the paper's defaults
    other = dataclasses.replace(info, lora_sha256="1" * 64)
    assert resolve(JudgeSettings(), other).demo is False
    # the demo adapter on another base is not the demo judge either
    assert resolve(JudgeSettings(), dataclasses.replace(info, sha256="2" * 64)).demo is False


def test_the_run_record_names_the_adapter_and_its_hash(tmp_path):
    from rmjudge.runs.pipeline import score

    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "p", "prompt": "q", "chosen": "a", "rejected": "b"}) + "\n")
    eng = ScriptedEngine(lambda req, i: pref(1))
    eng.info = dataclasses.replace(DEMO_INFO, lora=demo_adapter_path(),
                                   lora_sha256=DEMO_ADAPTER_SHA256)
    out = str(tmp_path / "o.duckdb")
    summary = score(str(src), eng, JudgeSettings(samples=2), output=out)
    assert rows(out, "SELECT lora_path, lora_sha256 FROM runs") == [
        (demo_adapter_path(), DEMO_ADAPTER_SHA256)]
    assert any(DEMO_ADAPTER_NAME in n for n in summary.notes)


def test_templated_targets_describe_both_responses_and_end_in_the_gold_verdict():
    from rmjudge.training.rollouts import Item
    from rmjudge.training.sft_templates import pref_analysis, template_examples

    conv = ({"role": "user", "content": "Is it safe to mix bleach and ammonia?"},)
    long = " ".join(["word"] * 90)
    it = Item("x", conv, "No, it makes toxic chloramine gas.", "I'm sorry, I can't help. " + long,
              2)
    ex = template_examples(it, "", ("pref", "refl"))
    assert [(e["task"], e["order"], e["label"]) for e in ex] == [
        ("pref", "ab", 2), ("pref", "ba", 1), ("refl", "ab", 1), ("refl", "ba", 2)]
    ab = ex[0]["completion"]
    assert ab.startswith('Response 1 opens with "No, it makes toxic chloramine gas.", is short.')
    assert 'Response 2 opens with "I\'m sorry, I can\'t help. word ...", is long and declines' in ab
    assert parse_verdict(ab, "pref") == 2 and "Overall, Response 2 is better." in ab
    ba = ex[1]["completion"]  # the swapped order describes the swapped slots
    assert ba.startswith('Response 1 opens with "I\'m sorry') and parse_verdict(ba, "pref") == 1
    # reflection: the critiques differ in their conclusion only; the label is the slot of the one
    # that concludes for the gold response, in both critique orders
    for e in ex[2:]:
        body = e["prompt"][0]["content"]
        assert pref_analysis(it.r1, it.r2, 2) in body and pref_analysis(it.r1, it.r2, 1) in body
        assert parse_verdict(e["completion"], "refl") == e["label"]
        assert (f"Critique {e['label']} concludes that Response 2 is better"
                in e["completion"])
    # format tags and quotes inside a response never reach the target's markup
    tricky = Item("y", conv, '<Result>"Response 1 is better"</Result>', "ok", 1)
    done = template_examples(tricky, "", ("pref",))[0]["completion"]
    assert done.count("<Result>") == 1 and parse_verdict(done, "pref") == 1


def test_sft_takes_templated_analyses_without_a_model(tmp_path):
    from rmjudge.training.sft import SFTError, SFTSettings, build_examples
    from rmjudge.training.sft_templates import TemplateSource

    src = tmp_path / "p.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"q{i}", "chosen": "yes",
                                       "rejected": "no"}) + "\n" for i in range(3)))
    s = SFTSettings(str(src), str(tmp_path / "o"), analyses="template")
    ex, stats, read = build_examples(s, TemplateSource(""))
    assert len(ex) == 12 and stats.analyses_templated == 12 and stats.rollouts == 0
    assert (stats.label_1, stats.label_2, stats.items) == (6, 6, 3)
    assert read["rows_read"] == 3 and not (tmp_path / "o" / "rollouts.jsonl").exists()
    with pytest.raises(SFTError, match="--analyses"):
        SFTSettings(str(src), str(tmp_path / "o"), analyses="teacher")


# -- the embedded model with the adapter ------------------------------------------------------


@pytest.mark.model
def test_loading_the_embedded_model_applies_the_adapter(model_path, no_env_model):
    from rmjudge.engine import load_engine

    info = load_engine(EngineSettings(), vocab_only=True).info
    assert (info.lora, info.lora_sha256) == (demo_adapter_path(), DEMO_ADAPTER_SHA256)
    assert resolve(JudgeSettings(), info).demo
    assert load_engine(EngineSettings(demo_adapter=False), vocab_only=True).info.lora is None
    assert load_engine(EngineSettings(model=model_path), vocab_only=True).info.lora is None


def test_another_lora_scale_is_another_judge_on_resume(tmp_path):
    """The adapter's scale changes every sample: a store judged at one scale is refused at
    another, naming it; at scale 1 nothing new is recorded, so stores of earlier versions
    resume as before."""
    from rmjudge.files import StoreError
    from rmjudge.runs.pipeline import score

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{i}", "prompt": "q", "chosen": "a",
                                       "rejected": "b"}) + "\n" for i in range(2)))
    out = str(tmp_path / "o.duckdb")

    def engine(scale):
        eng = ScriptedEngine(lambda req, i: pref(1))
        eng.info = dataclasses.replace(FAKE_INFO, lora="/x/mine.lora.gguf", lora_sha256="3" * 64,
                                       lora_scale=scale)
        return eng

    score(str(src), engine(0.5), JudgeSettings(samples=2), output=out, limit=1)
    with pytest.raises(StoreError, match=r"other settings \(lora_scale 0\.5 -> 1\.0\)"):
        score(str(src), engine(1.0), JudgeSettings(samples=2), output=out)
    assert score(str(src), engine(0.5), JudgeSettings(samples=2), output=out).judged == 1
    plain = resolve(JudgeSettings(), dataclasses.replace(FAKE_INFO, lora="/x/a.gguf",
                                                         lora_sha256="3" * 64, lora_scale=1.0))
    assert "lora_scale" not in plain.verdict_settings()
