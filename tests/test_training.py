"""GRPO + LoRA training end to end on the embedded SmolLM2 (CPU): reward on real TRL batches,
LoRA weights change, checkpoints are written and resumed, the adapter loads with peft, and the
greedy held-out evaluation runs. Unit tests of the reward itself come first (fast)."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from rmjudge.prompts import completion_text

from rmjudge.training.reward import score, verdict_reward

HERE = os.path.dirname(__file__)
HAS_TRAIN = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft", "trl"))


def scripted_grpo_data(path):
    """GRPO data built from the PandaLM fixture with scripted rollouts (Pref + Refl, 1:1)."""
    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.training.data import DataConfig, build_data
    from rmjudge.training.rollouts import EngineRollouts, SamplingSettings

    def respond(req, i):
        return completion_text("pref", f"analysis {i}", 1 + i % 2)

    build_data(os.path.join(HERE, "data", "pandalm_5.jsonl"), path,
               EngineRollouts(ScriptedEngine(respond), SamplingSettings(samples=2)),
               DataConfig(ratio="1:1"))
    return path


def test_reward_is_one_only_for_the_labelled_verdict_of_the_task():
    assert score(completion_text("pref", "a", 2), "pref", 2) == (1.0, True)
    assert score(completion_text("pref", "a", 1), "pref", 2) == (0.0, True)
    # the Refl task needs "Critique X ...": a Response verdict is a parse failure there
    assert score(completion_text("pref", "a", 1), "refl", 1) == (0.0, False)
    assert score("no verdict at all", "pref", 1) == (0.0, False)
    # cut at the first </Result>, as the engine stops there: a later verdict does not count
    text = completion_text("pref", "a", 1) + "\n<Result>Response 2 is better than Response 1"
    assert score(text, "pref", 2) == (0.0, True)
    # TRL's conversational completions
    assert score([{"role": "assistant", "content": completion_text("refl", "x", 1)}], "refl", 1)[0] == 1.0


def test_reward_function_logs_parse_failures_and_per_task_rewards():
    logged = {}
    rewards = verdict_reward(
        [completion_text("pref", "a", 1), "garbage", completion_text("refl", "c", 2)],
        task=["pref", "pref", "refl"], label=[1, 1, 1],
        log_metric=lambda k, v: logged.__setitem__(k, v))
    assert rewards == [1.0, 0.0, 0.0]
    assert logged == {"parse_failure_rate": pytest.approx(1 / 3), "reward_pref": 0.5,
                      "reward_refl": 0.0}


def scripted_rollouts(prompts, trainer):
    """One correct and one wrong verdict per group of two (whatever the label), so every group
    has reward variance and GRPO has a gradient; the model's own sampling is covered by the
    smoke command in the README."""
    tok = trainer.processing_class
    prompt_ids, completion_ids = [], []
    for i, p in enumerate(prompts):
        task = "refl" if "## The two critiques" in p else "pref"
        text = completion_text(task, "scripted analysis", 1 + i % 2)
        prompt_ids.append(tok(p).input_ids)
        completion_ids.append(tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id])
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.skipif(not HAS_TRAIN, reason="training extras missing: pip install '.[train]'")
def test_grpo_trains_lora_checkpoints_resumes_and_adapter_loads(tmp_path, small_model_path):
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.training.data import DataConfig, build_data
    from rmjudge.training.grpo import GRPOSettings, train
    from rmjudge.training.hf import ModelSource, load_base, materialize
    from rmjudge.training.rollouts import EngineRollouts, SamplingSettings

    # Data: the PandaLM fixture rows, rollouts scripted half right / half wrong -> Pref + Refl.
    def respond(req, i):
        body = req.messages[-1]["content"]
        return completion_text("pref", f"analysis {i} of {len(body)}", 1 + i % 2)

    data = tmp_path / "train.jsonl"
    stats = build_data(os.path.join(HERE, "data", "pandalm_5.jsonl"), data,
                       EngineRollouts(ScriptedEngine(respond), SamplingSettings(samples=2)),
                       DataConfig(ratio="1:1"))
    assert stats.pref_kept == 5 and stats.refl_kept == 5

    # One prompt with its two completions per step, one step, then one resumed step: what the
    # plumbing checks below need (each prompt is ~500 tokens of judge template on the CPU), on
    # the embedded model cut to its first blocks (conftest's `small_model_path`): the same
    # architecture, vocabulary and template, so the same trainer code, at a fraction of the
    # compute. What training teaches the whole model: tests/test_training_sft.py.
    settings = GRPOSettings(
        model=small_model_path, data=str(data), output_dir=str(tmp_path / "run"), max_steps=1,
        batch_size=1, num_generations=2, micro_batch=2, generation_prompts=1,
        max_completion_length=32, learning_rate=5e-3, warmup_ratio=0.0, beta=0.04,
        quantization="none", gradient_checkpointing=False, save_steps=1, eval_fraction=0.2,
        eval_max_items=2, lora_r=4, lora_alpha=8)
    summary = train(settings, rollout_func=scripted_rollouts)
    run = tmp_path / "run"
    assert summary["steps"] == 1
    # the adapter carries its data's prompt format on to `rmjudge-export lora`
    from rmjudge.models.adapter_format import read_adapter_info
    from rmjudge.prompts import PROMPT_FORMAT

    assert summary["prompt_format"] == PROMPT_FORMAT
    assert read_adapter_info(run / "adapter") == PROMPT_FORMAT
    lengths = summary["prompt_length_filter"]
    assert lengths["pref"]["too_long"] == lengths["refl"]["too_long"] == 0
    assert lengths["pref"]["kept"] + lengths["refl"]["kept"] == summary["train_examples"]
    assert (run / "checkpoint-1" / "trainer_state.json").exists()
    logs = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "reward" in r]
    assert steps and all("kl" in r and "parse_failure_rate" in r for r in steps)
    assert steps[0]["reward"] == pytest.approx(0.5)  # one of each pair is right

    # LoRA B starts at zero: non-zero B means training changed the adapter
    weights = load_file(str(run / "adapter" / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().max()) > 0 for v in lora_b)

    base = load_base(materialize(ModelSource.parse(small_model_path)), quantization="none")
    peft_model = PeftModel.from_pretrained(base, str(run / "adapter"))
    loaded = {k: v for k, v in peft_model.state_dict().items() if "lora_B" in k}
    assert loaded and any(float(v.abs().max()) > 0 for v in loaded.values())
    assert torch.isfinite(next(iter(loaded.values()))).all()

    ev = summary["eval"]
    assert ev is not None and ev["pref_items"] + ev["refl_items"] >= 1
    assert ev["positional_consistency"] <= min(ev["accuracy_ab"], ev["accuracy_ba"])

    # resume: one more step from the last checkpoint
    more = GRPOSettings(**{**settings.__dict__, "max_steps": 2})
    summary2 = train(more, resume="latest", rollout_func=scripted_rollouts)
    assert summary2["resumed_from"].endswith("checkpoint-1") and summary2["steps"] == 2
    assert (run / "checkpoint-2").exists()
    # checkpoints and the adapter were built aside and moved in whole: nothing is left aside
    assert not [n for n in os.listdir(run) if ".new-" in n or n.startswith(".old-")]
    assert json.loads((run / "trainer_state.json").read_text())["global_step"] == 2


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.skipif(not HAS_TRAIN, reason="training extras missing: pip install '.[train]'")
def test_grpo_continues_a_given_adapter(tmp_path, small_model_path):
    """--init-adapter: GRPO trains the given adapter (its rank kept, its weights the start),
    so a warm-start adapter and its GRPO continuation are one adapter of the base."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    from rmjudge.training.grpo import GRPOSettings, train
    from rmjudge.training.hf import ModelSource, load_base, materialize

    data = scripted_grpo_data(tmp_path / "train.jsonl")
    # a warm-start stand-in: rank 2 on two modules, B non-zero
    torch.manual_seed(0)
    base = load_base(materialize(ModelSource.parse(small_model_path)), quantization="none")
    warm = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                           task_type="CAUSAL_LM", init_lora_weights=False))
    warm.save_pretrained(str(tmp_path / "warm"))
    start = load_file(str(tmp_path / "warm" / "adapter_model.safetensors"))

    settings = GRPOSettings(
        model=small_model_path, data=str(data), output_dir=str(tmp_path / "run"), max_steps=1,
        batch_size=1, num_generations=2, micro_batch=2, generation_prompts=1,
        max_completion_length=32, learning_rate=1e-3, warmup_ratio=0.0, beta=0.04,
        quantization="none", gradient_checkpointing=False, save_steps=1, eval_fraction=0.0,
        init_adapter=str(tmp_path / "warm"))
    summary = train(settings, rollout_func=scripted_rollouts)
    assert summary["steps"] == 1
    from rmjudge.training.precision import precision_name, use_bf16

    # --precision auto: bfloat16 autocast where this machine computes it natively, recorded
    assert summary["precision"] == precision_name(use_bf16("auto"))
    end = load_file(str(tmp_path / "run" / "adapter" / "adapter_model.safetensors"))
    assert set(end) == set(start)  # same modules, same rank: the given adapter, continued
    assert all(end[k].shape == start[k].shape for k in start)
    assert all(end[k].shape[0] == 2 or end[k].shape[1] == 2 for k in start)
    moved = [float((end[k] - start[k]).abs().max()) for k in start]
    assert max(moved) > 0  # trained
    assert max(moved) < 0.1 * max(float(v.abs().max()) for v in start.values())  # from the start


def test_grpo_refuses_an_init_adapter_that_is_not_one(tmp_path):
    from rmjudge.training.grpo import GRPOSettings, TrainError

    with pytest.raises(TrainError, match="not a PEFT adapter folder"):
        GRPOSettings(model="m", data="d", output_dir=str(tmp_path), init_adapter=str(tmp_path))


@pytest.mark.parametrize("field,value,message", [
    ("eval_max_items", -1, "--eval-max-items must be 0 or more"),  # was held[:-1]
    ("temperature", -1.0, "--temperature must be above 0"),
    ("temperature", 0.0, "--temperature must be above 0"),
])
def test_grpo_refuses_settings_that_would_train_on_nonsense(tmp_path, field, value, message):
    from rmjudge.training.grpo import GRPOSettings, TrainError

    with pytest.raises(TrainError, match=message):
        GRPOSettings(model="m", data="d", output_dir=str(tmp_path), **{field: value})


@pytest.mark.parametrize("args,message", [
    (["--max-tokens", "0"], "Error: --max-tokens must be at least 1"),  # was a traceback
    (["--batch", "0"], "Error: --batch must be at least 1"),  # was a traceback
    (["--limit", "-1"], "Error: --limit must be at least 1"),  # left the last example out
    (["--adapter", "nowhere"], "Error: --adapter nowhere: not a PEFT adapter folder"),
    (["--data", "EMPTY"], "holds no examples to evaluate"),  # was accuracy 0.0 of nothing
])
def test_train_eval_bad_values_are_one_error_line(tmp_path, monkeypatch, args, message):
    from click.testing import CliRunner

    from rmjudge.training.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "EMPTY").write_text("")
    (tmp_path / "d.jsonl").write_text(json.dumps({"task": "pref"}) + "\n")
    data = [] if "--data" in args else ["--data", "d.jsonl"]
    res = CliRunner().invoke(main, ["eval", "--model", "no-model", *data, *args])
    assert res.exit_code == 1, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.output


def test_build_data_lora_needs_a_gguf_model(tmp_path):
    from click.testing import CliRunner

    from rmjudge.training.cli import main

    r = CliRunner().invoke(main, ["build-data", os.path.join(HERE, "data", "pandalm_5.jsonl"),
                                  "-o", str(tmp_path / "d.jsonl"), "--backend", "transformers",
                                  "--lora", str(tmp_path / "a.gguf")])
    assert r.exit_code == 1
    assert "Error:" in r.output and "--lora is a GGUF LoRA" in r.output


def test_rollout_cache_fingerprint_names_the_lora_adapter():
    from dataclasses import replace

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.training.rollouts import EngineRollouts, SamplingSettings

    plain = ScriptedEngine(lambda req, i: "x")
    with_lora = ScriptedEngine(lambda req, i: "x")
    with_lora.info = replace(plain.info, lora="/a.gguf", lora_sha256="ab" * 32)
    fp_plain = EngineRollouts(plain, SamplingSettings(samples=2)).fingerprint()
    fp_lora = EngineRollouts(with_lora, SamplingSettings(samples=2)).fingerprint()
    assert "lora_sha256" not in fp_plain  # caches written before adapters stay valid
    assert fp_lora["lora_sha256"] == "ab" * 32 and fp_lora != fp_plain


@pytest.mark.hf
def test_the_trl_pin_is_the_first_version_with_what_grpo_uses():
    """pyproject's train extra asks for the TRL that training/grpo.py needs (TRL_MIN), and the
    installed TRL has the hooks it uses."""
    import tomllib
    from pathlib import Path

    from rmjudge.training.grpo import TRL_MIN

    meta = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    trl = [r for r in meta["project"]["optional-dependencies"]["train"] if r.startswith("trl")]
    assert trl == [f"trl>={TRL_MIN}"]
    if importlib.util.find_spec("trl") is None:
        pytest.skip("TRL is not installed")
    import inspect

    from trl import GRPOTrainer

    assert callable(getattr(GRPOTrainer, "_tokenize_prompts", None))
    assert "rollout_func" in inspect.signature(GRPOTrainer.__init__).parameters


@pytest.mark.hf
def test_a_loss_type_trl_does_not_name_is_refused_before_the_model_loads(tmp_path, model_path):
    """Before, `rmjudge-train grpo --loss-type nope` loaded the model, generated the first
    completions and then stopped in TRL's loss ("Unknown loss type")."""
    if importlib.util.find_spec("trl") is None:
        pytest.skip("TRL is not installed")
    from rmjudge.training.grpo import GRPOSettings, TrainError, train, trl_loss_types

    names = trl_loss_types()
    assert {"dapo", "grpo", "dr_grpo", "bnpo"} <= set(names)  # the losses docs/reflectrm.md names

    data = scripted_grpo_data(tmp_path / "train.jsonl")
    settings = GRPOSettings(model=model_path, data=str(data),
                            output_dir=str(tmp_path / "run"), max_steps=1, batch_size=1,
                            num_generations=2, micro_batch=2, generation_prompts=1,
                            loss_type="nope")
    with pytest.raises(TrainError, match=r"^--loss-type nope: TRL \S+ knows .*dapo"):
        train(settings)
    assert not (tmp_path / "run").exists()


def test_a_trl_without_the_prompt_tokenization_hook_is_refused():
    from rmjudge.training.grpo import TRL_MIN, TrainError, engine_tokenized_trainer

    class OldTrainer:  # a GRPOTrainer from before the hook existed
        pass

    with pytest.raises(TrainError, match=rf"needs TRL {TRL_MIN} or newer \(installed: "):
        engine_tokenized_trainer(OldTrainer, {})

    class Trainer:
        def _tokenize_prompts(self, prompts):
            return [[0] for _ in prompts], None, {}

    hooked = engine_tokenized_trainer(Trainer, {"known": [5, 6]})()
    assert hooked._tokenize_prompts(["known"]) == ([[5, 6]], None, {})
    assert hooked._tokenize_prompts(["other"]) == ([[0]], None, {})
