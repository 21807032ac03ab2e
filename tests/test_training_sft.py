"""The format warm-start stage: target building (fast, scripted rollouts), settings and CLI
errors, and (slow, embedded model) that training lowers the parse-failure rate."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os

import pytest
from click.testing import CliRunner

from rmjudge.prompts import ASSISTANT_PREFIX, extract_analysis, parse_verdict
from rmjudge.training.cache import CachedRollouts
from rmjudge.training.rollouts import Item
from rmjudge.training.sft import SFTError, SFTSettings, check_prompts
from rmjudge.training.sft_data import SFTStats, cut_analysis, sft_examples, swap_slots

HERE = os.path.dirname(__file__)
HAS_TRAIN = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft",
                                                         "datasets"))
CONV = ({"role": "user", "content": "Name a prime number."},)


def item(label=1, iid="x"):
    return Item(iid, CONV, "Seven.", "Nine.", label)


def build(rollout_texts, label=1, tasks=("pref", "refl"), iid="x"):
    st = SFTStats()
    ex = sft_examples(item(label, iid), CachedRollouts(rollout_texts, ["stop"] * len(rollout_texts)),
                      "", tasks, 120, 0, st)
    return ex, st


def test_cut_analysis_stops_at_a_sentence_end_and_drops_format_tags():
    text = "Response 1 is prime. Response 2 is not prime because 9 = 3 x 3. " * 4
    cut = cut_analysis("<Analysis>\n" + text + "</Analysis>", 100)
    assert len(cut) <= 100 and cut.endswith(".") and "<" not in cut
    assert cut == "Response 1 is prime. Response 2 is not prime because 9 = 3 x 3. Response 1 is prime."
    # no sentence end in reach: a word boundary, closed with a period
    assert cut_analysis("word " * 50, 23) == "word word word word."


def test_swap_slots_swaps_response_and_critique_numbers_only():
    assert swap_slots("Response 1 beats response 2; Critique 2 < 1.") == \
        "Response 2 beats response 1; Critique 1 < 1."


def test_pref_targets_cover_both_orders_with_the_gold_verdict_and_the_base_analysis():
    base = "Response 1 names seven, which is prime. Response 2 names nine, which is not prime."
    ex, st = build([base + "\n</Analysis>\n<Result>nonsense", "", "x"], label=1, tasks=("pref",))
    assert [e["order"] for e in ex] == ["ab", "ba"] and [e["label"] for e in ex] == [1, 2]
    ab, ba = ex
    assert parse_verdict(ab["completion"], "pref") == 1
    assert parse_verdict(ba["completion"], "pref") == 2
    assert extract_analysis(ab["completion"]) == base
    assert extract_analysis(ba["completion"]) == swap_slots(base)  # still refers correctly
    # the swapped prompt really has the responses in the other slots
    assert "### Response 1\nNine." in ba["prompt"][0]["content"]
    assert "### Response 1\nSeven." in ab["prompt"][0]["content"]
    assert st.analyses_used == 2 and st.analyses_short == 0
    # the completion is what follows ASSISTANT_PREFIX: it must not repeat it
    assert not ab["completion"].startswith(ASSISTANT_PREFIX)


def test_empty_analyses_fall_back_to_a_short_one_naming_the_gold_response():
    ex, st = build(["", "   ", "</Analysis>"], label=2, tasks=("pref",))
    assert st.analyses_short == 2
    assert extract_analysis(ex[0]["completion"]).startswith("Response 2 follows")
    assert parse_verdict(ex[0]["completion"], "pref") == 2
    assert extract_analysis(ex[1]["completion"]).startswith("Response 1 follows")  # swapped


def test_a_rollout_that_already_matches_the_label_is_preferred_and_wrong_ones_avoided():
    right = "Seven is prime, so Response 2 is correct.\n</Analysis>\n<Result>Response 2 is better than Response 1</Result>"
    wrong = "I like nine.\n</Analysis>\n<Result>Response 1 is better than Response 2</Result>"
    for texts in ([wrong, right], [right, wrong]):
        ex, _ = build(texts, label=2, tasks=("pref",))
        assert extract_analysis(ex[0]["completion"]) == "Seven is prime, so Response 2 is correct."


def test_refl_targets_label_the_critique_concluding_for_the_gold_response():
    a1 = "Seven is prime and answers the question."
    a2 = "Nine is a fine number."
    ex, st = build([a1, a2], label=1, tasks=("refl",))
    assert [e["label"] for e in ex] == [1, 2]
    for e in ex:
        body = e["prompt"][0]["content"]
        c1 = body.split("### Critique 1\n", 1)[1].split("\n\n### Critique 2", 1)[0]
        c2 = body.split("### Critique 2\n", 1)[1].split("\n\n## Your verdict", 1)[0]
        good = [c1, c2][e["label"] - 1]
        bad = [c1, c2][2 - e["label"]]
        assert good.endswith("Overall, Response 1 is better.")
        assert bad.endswith("Overall, Response 2 is better.")
        assert parse_verdict(e["completion"], "refl") == e["label"]
        assert parse_verdict(e["completion"], "pref") is None  # a Critique verdict
        # the critiques judge the responses in the item's slots
        assert "### Response 1\nSeven." in body


def test_labels_are_balanced_over_any_data():
    st = SFTStats()
    for i in range(7):
        sft_examples(item(1 + i % 3 // 2, f"i{i}"), CachedRollouts(["some analysis here."], ["stop"]),
                     "", ("pref", "refl"), 100, 0, st)
    assert st.label_1 == st.label_2 == 14
    assert st.pref_examples == st.refl_examples == 14


def test_grpo_generation_gets_the_engine_token_ids_of_known_prompts():
    from rmjudge.training.grpo import engine_tokenized_trainer

    class Base:
        def _tokenize_prompts(self, prompts):
            return [[0] for _ in prompts], None, {"from": "base"}

    cls = engine_tokenized_trainer(Base, {"p1": [5, 6], "p2": [7]})
    assert cls()._tokenize_prompts(["p1", "p2"]) == ([[5, 6], [7]], None, {})
    # a prompt it does not know (or a conversational one) goes to the trainer's own step
    assert cls()._tokenize_prompts(["p1", "other"])[2] == {"from": "base"}


def test_check_prompts_takes_pref_examples_of_the_first_items():
    ex = build(["a usable analysis."], iid="a")[0] + build(["another one here."], iid="b")[0]
    chosen = check_prompts(ex, 1)
    assert [(e["source_id"], e["task"]) for e in chosen] == [("a", "pref"), ("a", "pref")]


def test_settings_errors_name_the_option():
    with pytest.raises(SFTError, match="--micro-batch 3 must divide --batch-size 8"):
        SFTSettings(source="x", output_dir="o", micro_batch=3)
    with pytest.raises(SFTError, match="--tasks"):
        SFTSettings(source="x", output_dir="o", tasks="pref,critique")
    with pytest.raises(SFTError, match="--method"):
        SFTSettings(source="x", output_dir="o", method="qlora")


def test_a_negative_rollout_temperature_is_refused():
    """Before, --rollout-temperature -1 ran the whole warm start."""
    with pytest.raises(SFTError, match="--rollout-temperature must be between 0 and 5"):
        SFTSettings(source="x", output_dir="o", rollout_temperature=-1.0)


def test_target_modules_the_model_lacks_are_one_error_naming_its_modules():
    """A typo in --target-modules was peft's NoMatchingPeftModuleError traceback."""
    torch = pytest.importorskip("torch")
    from rmjudge.training.hf import ModelLoadError, check_target_modules

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.up_proj = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

    model = torch.nn.Sequential(Block())
    settings = dataclasses.make_dataclass("S", [("target_modules", str)])
    check_target_modules(model, settings("q_proj, 0.up_proj"))  # names and dotted suffixes
    check_target_modules(model, settings("all-linear"))
    with pytest.raises(ModelLoadError, match="--target-modules q_projj: no such module in the "
                       "model; its linear modules are q_proj, up_proj"):
        check_target_modules(model, settings("q_projj,up_proj"))


def test_sft_cli_reports_bad_settings_without_traceback(tmp_path):
    from rmjudge.training.cli import main

    res = CliRunner().invoke(main, ["sft", str(tmp_path / "p.jsonl"), "-o", str(tmp_path / "o"),
                                    "--tasks", "both"])
    assert res.exit_code == 1 and "Error: --tasks 'both'" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(main, ["sft", "--help"])
    assert "--max-analysis-chars" in res.output and "--resume" in res.output


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.skipif(not HAS_TRAIN, reason="training extras missing: pip install '.[train]'")
def test_sft_on_input_without_a_labelled_pair_is_refused_before_the_model_or_the_folder(
        tmp_path):
    """It loaded the model and made its folder before its `Error:` line."""
    import json

    from rmjudge.training.cli import main

    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"prompt": "q", "response_a": "a", "response_b": "b"}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for given, read in ((src, "1 row read, 1 unlabelled"), (empty, "0 rows read, 0 unlabelled")):
        res = CliRunner().invoke(main, ["sft", str(given), "-o", str(tmp_path / "out"),
                                        "--model", str(tmp_path / "missing.gguf")])
        assert res.exit_code == 1, res.output
        assert res.output == (f"Error: {given}: no warm-start example can be built: no "
                              f"labelled pair ({read}, 0 bad); give labelled pairs "
                              "(chosen/rejected or a label column); nothing was written\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl", "p.jsonl"]


def test_warm_start_lowers_the_parse_failure_rate(tmp_path, model_path, embedded_engine):
    """Three PandaLM rows (in the repo), two base rollouts each through llama.cpp, targets for
    both tasks, a short LoRA fine-tune on one thread (one epoch of three steps: the base's
    check generations never parse, the tuned model's all did in trials, at learning rates
    3e-3 and 5e-3 too); greedy generations on
    the rows' Pref prompts (both orders) must parse more often than the base's."""
    import torch

    from rmjudge.training.rollouts import EngineRollouts, SamplingSettings
    from rmjudge.training.sft import run

    torch.set_num_threads(1)
    s = SFTSettings(source=os.path.join(HERE, "data", "pandalm_5.jsonl"),
                    output_dir=str(tmp_path / "warm"), model=model_path, limit=3, samples=2,
                    rollout_max_tokens=48, max_analysis_chars=80, method="lora", lora_r=8,
                    lora_alpha=16, epochs=1, batch_size=4, micro_batch=4, learning_rate=4e-3,
                    warmup_ratio=0.0, save_steps=1, check_items=3, check_max_tokens=48,
                    threads=1)
    src = EngineRollouts(embedded_engine, SamplingSettings(samples=2, max_tokens=48))
    summary = run(s, src)
    before, after = summary["check_before"], summary["check_after"]
    assert before["prompts"] == after["prompts"] == 6
    assert after["parse_failure_rate"] < before["parse_failure_rate"]
    assert after["parse_failure_rate"] <= 0.5
    assert summary["last_loss"] < summary["first_loss"]
    from rmjudge.training.precision import precision_name, use_bf16

    assert summary["precision"] == precision_name(use_bf16("auto"))  # bf16 where native
    st = summary["stats"]
    assert st["label_1"] == st["label_2"] == 6  # 3 items x 2 tasks x 2 orders, balanced
    log = [json.loads(x) for x in (tmp_path / "warm" / "log.jsonl").read_text().splitlines()]
    assert any("loss" in r for r in log)
    assert (tmp_path / "warm" / "model" / "config.json").exists()
    assert (tmp_path / "warm" / "adapter" / "adapter_config.json").exists()
    assert summary["steps"] == 3 and (tmp_path / "warm" / "checkpoint-3").exists()

    # resume: one more step from the latest checkpoint, rollouts from the cache (no sampling)
    calls = []
    src.rollouts = lambda items: calls.append(items) or []
    more = dataclasses.replace(s, max_steps=4, check_items=0)
    summary2 = run(more, src, resume="latest")  # the later of the two kept: checkpoint-2, -3
    assert summary2["resumed_from"].endswith("checkpoint-3") and summary2["steps"] == 4
    assert not calls
    # checkpoints (the newest 2 kept), adapter/ and model/ were built aside and moved in whole
    warm = tmp_path / "warm"
    assert sorted(n for n in os.listdir(warm) if n.startswith("checkpoint-")) == [
        "checkpoint-3", "checkpoint-4"]
    assert not [n for n in os.listdir(warm) if ".new-" in n or n.startswith(".old-")]
    assert json.loads((warm / "trainer_state.json").read_text())["global_step"] == 4
