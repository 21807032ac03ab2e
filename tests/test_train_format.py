"""The prompt format on the training side: the reflection prompt's wording (format 3), the
format recorded in training data, rollout caches and adapters (PEFT folder and GGUF LoRA), the
refusal of an adapter of another format at scoring, and GRPO's prompt-length filter that
keeps the Pref:Refl mix."""

from __future__ import annotations

import importlib.util
import json
import os

import orjson
import pytest
from click.testing import CliRunner

from rmjudge import prompts
from rmjudge.models.adapter_format import GGUF_KEY, check_lora, read_adapter_info
from rmjudge.models.gguf_header import gguf_metadata_value
from rmjudge.engine.fake import ScriptedEngine
from rmjudge.core.errors import ModelError
from rmjudge.prompts import PROMPT_FORMAT, completion_text
from rmjudge.training.cache import CacheError
from rmjudge.training.outputs import write_adapter_info
from rmjudge.training.data import DataConfig, build_data, read_examples, stats_path
from rmjudge.training.grpo import filter_by_length, format_length_report
from rmjudge.training.rollouts import EngineRollouts, SamplingSettings

HERE = os.path.dirname(__file__)
PANDALM = os.path.join(HERE, "data", "pandalm_5.jsonl")
HAS_GGUF = importlib.util.find_spec("gguf") is not None
CONV = [{"role": "user", "content": "Why is the sky blue?"}]


# -- (a) the reflection prompt says plainly that it compares critiques ------------------------


def test_reflection_prompt_shares_a_neutral_head_and_then_names_critiques():
    pref = prompts.pref_messages(CONV, "Rayleigh scattering.", "It reflects the sea.")[0]["content"]
    refl = prompts.refl_messages(CONV, "Rayleigh scattering.", "It reflects the sea.",
                                 "Critique one.", "Critique two.")[0]["content"]
    head = pref.split("## Your task\n")[0]
    assert refl.startswith(head)  # the prefix cache's shared opening
    # the shared head names no task: no role that judges responses, no "for Judgment" heading
    assert head.startswith("You are an impartial judge.\n\n## Context\n")
    assert "## The two responses\n" in head
    for task_word in ("AI assistant responses", "for Judgment", "ritique", "better"):
        assert task_word not in head
    # right after it, the reflection prompt says the two texts to compare are critiques
    task = refl[len(head):]
    assert task.startswith("## Your task\nBelow are two critiques, each an analysis of the two "
                           "responses above")
    assert "You are judging the two critiques, not the responses." in task
    assert task.index("## Your task") < task.index("### Critique 1\nCritique one.")
    assert task.rstrip().endswith("Critique 2 is better than Critique 1")
    assert pref[len(head):].startswith("## Your task\nDecide which of the two responses above")
    assert "critique" not in pref.lower()
    assert PROMPT_FORMAT == 3


def test_verdict_parsing_is_unchanged_by_the_format():
    assert prompts.parse_verdict("x</Analysis>\n<Result>Critique 2 is better than Critique 1"
                                 "</Result>", "refl") == 2
    assert prompts.parse_verdict("<Result>Response 2 is better than Response 1</Result>",
                                 "refl") is None


# -- (b) the format in training data, rollout caches and adapters -----------------------------


def _rollouts(samples=2):
    def respond(req, i):
        return completion_text("pref", f"analysis {i}", 1 + i % 2)

    return EngineRollouts(ScriptedEngine(respond), SamplingSettings(samples=samples))


def test_build_data_records_the_prompt_format_in_examples_stats_and_cache(tmp_path):
    out = tmp_path / "train.jsonl"
    build_data(PANDALM, out, _rollouts(), DataConfig(ratio="1:1"))
    rows = read_examples(out)
    assert rows and {r["prompt_format"] for r in rows} == {PROMPT_FORMAT}
    assert json.loads(stats_path(out).read_text())["prompt_format"] == PROMPT_FORMAT
    meta = orjson.loads((tmp_path / "train.jsonl.rollouts.jsonl").read_bytes().split(b"\n")[0])
    assert meta["meta"]["prompt_format"] == PROMPT_FORMAT


@pytest.mark.parametrize("old", [2, None])
def test_a_rollout_cache_of_another_prompt_format_is_refused(tmp_path, old):
    out = tmp_path / "train.jsonl"
    build_data(PANDALM, out, _rollouts(), DataConfig(ratio="1:1"))
    cache = tmp_path / "train.jsonl.rollouts.jsonl"
    lines = cache.read_bytes().split(b"\n")
    meta = orjson.loads(lines[0])
    if old is None:  # a cache written before formats were recorded
        del meta["meta"]["prompt_format"]
    else:
        meta["meta"]["prompt_format"] = old
    cache.write_bytes(b"\n".join([orjson.dumps(meta), *lines[1:]]))
    with pytest.raises(CacheError, match=rf"prompt_format: cached {old!r}, now {PROMPT_FORMAT}"):
        build_data(PANDALM, out, _rollouts(), DataConfig(ratio="1:1"))


@pytest.mark.hf  # grpo's checks import trl
@pytest.mark.parametrize("old", [2, None])
def test_grpo_refuses_training_data_of_another_prompt_format(tmp_path, old):
    from rmjudge.training.cli import main

    out = tmp_path / "train.jsonl"
    build_data(PANDALM, out, _rollouts(), DataConfig(ratio="1:1"))
    rows = read_examples(out)
    for r in rows:
        if old is None:
            del r["prompt_format"]
        else:
            r["prompt_format"] = old
    out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    r = CliRunner().invoke(main, ["grpo", "--model", str(tmp_path / "no-model"), "--data",
                                  str(out), "-o", str(tmp_path / "run"), "--batch-size", "2",
                                  "--generation-prompts", "2", "--num-generations", "2",
                                  "--micro-batch", "2"])
    assert r.exit_code == 1, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and str(out) in lines[0]
    assert f"prompt format {PROMPT_FORMAT}; rebuild it with `rmjudge-train build-data`" in lines[0]
    assert not (tmp_path / "run").exists()


def test_grpo_refuses_training_data_that_mixes_prompt_formats(tmp_path):
    from rmjudge.training.data import DataError, check_prompt_format

    rows = [{"prompt_format": PROMPT_FORMAT}, {"prompt_format": 2}]
    with pytest.raises(DataError, match="mixes examples of prompt formats 2, 3"):
        check_prompt_format(rows, "d.jsonl")
    assert check_prompt_format([{"prompt_format": PROMPT_FORMAT}], "d.jsonl") == PROMPT_FORMAT


def test_adapter_info_beside_a_peft_adapter(tmp_path):
    assert read_adapter_info(tmp_path) is None  # an adapter made elsewhere
    write_adapter_info(tmp_path, PROMPT_FORMAT)
    assert read_adapter_info(tmp_path) == PROMPT_FORMAT
    (tmp_path / "rmjudge.json").write_text("not json")
    assert read_adapter_info(tmp_path) is None


def _gguf_lora(path, prompt_format):
    """A GGUF with an adapter's header (and `rmjudge.prompt_format` when given), no tensors:
    enough for the format check, which runs before llama.cpp loads anything."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])  # arrays before the key are skipped
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 8.0)
    if prompt_format is not None:
        w.add_uint32(GGUF_KEY, prompt_format)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return str(path)


@pytest.mark.skipif(not HAS_GGUF, reason="gguf is not installed (pip install '.[export]')")
def test_gguf_lora_format_check(tmp_path):
    same = _gguf_lora(tmp_path / "same.gguf", PROMPT_FORMAT)
    assert gguf_metadata_value(same, GGUF_KEY) == PROMPT_FORMAT
    assert gguf_metadata_value(same, "adapter.type") == "lora"
    assert check_lora(same) is None
    other = _gguf_lora(tmp_path / "other.gguf", 2)
    with pytest.raises(ModelError, match=f"trained on prompt format 2, but this rmjudge prompts "
                                         f"in format {PROMPT_FORMAT}"):
        check_lora(other)
    none = _gguf_lora(tmp_path / "none.gguf", None)
    assert gguf_metadata_value(none, GGUF_KEY) is None
    warning = check_lora(none)
    assert warning.startswith("warning: ") and "\n" not in warning and "records no prompt" in warning
    (tmp_path / "torn.gguf").write_bytes(open(same, "rb").read()[:40])  # cut mid-header
    assert gguf_metadata_value(tmp_path / "torn.gguf", GGUF_KEY) is None


@pytest.mark.skipif(not HAS_GGUF, reason="gguf is not installed (pip install '.[export]')")
def test_score_refuses_a_lora_of_another_prompt_format_before_judging(tmp_path, model_path):
    from rmjudge.cli import main

    lora = _gguf_lora(tmp_path / "old.gguf", 2)
    out = tmp_path / "o.jsonl"
    r = CliRunner().invoke(main, ["score", PANDALM, "-o", str(out), "--lora", lora,
                                  "--model", model_path, "--samples", "2", "--max-tokens", "8"])
    assert r.exit_code == 1, r.output
    errors = [ln for ln in r.output.splitlines() if "Error" in ln]
    assert len(errors) == 1 and errors[0].startswith("Error: "), r.output
    assert lora in errors[0] and "prompt format 2" in errors[0] and "retrain it" in errors[0]
    assert "judging" not in r.output.replace(errors[0], "")  # refused before any pair
    assert not out.exists() and not list(tmp_path.glob("*.duckdb"))


@pytest.mark.skipif(not HAS_GGUF, reason="gguf is not installed (pip install '.[export]')")
def test_a_lora_without_a_recorded_format_is_used_with_one_warning(tmp_path, model_path):
    from rmjudge.cli import main

    lora = _gguf_lora(tmp_path / "foreign.gguf", None)
    r = CliRunner().invoke(main, ["score", PANDALM, "--dry-run", "--limit", "1", "--lora", lora,
                                  "--model", model_path, "--samples", "2", "--max-tokens", "8"])
    assert r.exit_code == 0, r.output
    warnings = [ln for ln in r.output.splitlines() if "records no prompt format" in ln]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: the LoRA adapter {lora}")


@pytest.mark.hf
@pytest.mark.skipif(importlib.util.find_spec("peft") is None or not HAS_GGUF,
                    reason="export extras missing: pip install '.[export]'")
def test_export_lora_copies_the_adapter_prompt_format_into_the_gguf(tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from rmjudge.quantize.config import LoraExportConfig
    from rmjudge.quantize.lora import export_lora

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(str(tmp_path / "base"))
    model = get_peft_model(LlamaForCausalLM.from_pretrained(str(tmp_path / "base")),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    model.save_pretrained(str(tmp_path / "ad"))
    base = str(tmp_path / "base")

    plain = export_lora(LoraExportConfig(str(tmp_path / "ad"), str(tmp_path / "plain.gguf"), base))
    assert plain.prompt_format is None  # nothing recorded: nothing written, never guessed
    assert gguf_metadata_value(plain.path, GGUF_KEY) is None

    write_adapter_info(tmp_path / "ad", PROMPT_FORMAT)
    res = export_lora(LoraExportConfig(str(tmp_path / "ad"), str(tmp_path / "ad.gguf"), base))
    assert res.prompt_format == PROMPT_FORMAT
    assert gguf_metadata_value(res.path, GGUF_KEY) == PROMPT_FORMAT
    assert check_lora(res.path) is None


# -- (c) GRPO's prompt-length filter keeps the Pref:Refl mix ----------------------------------


def _synthetic(n_pref, n_refl, long_refl):
    """Pref prompts of 10 words; Refl prompts of 30 words, `long_refl` of them of 200."""
    ex = [{"id": f"p{i}#pref", "task": "pref", "label": 1 + i % 2, "prompt": "w " * 10}
          for i in range(n_pref)]
    ex += [{"id": f"r{i}#refl", "task": "refl", "label": 1 + i % 2,
            "prompt": "w " * (200 if i < long_refl else 30)} for i in range(n_refl)]
    return ex


def _words(e):
    return len(e["prompt"].split())


def test_length_filter_counts_per_task_and_keeps_the_mix():
    ex = _synthetic(40, 10, long_refl=4)
    kept, rep = filter_by_length(ex, _words, max_prompt_tokens=64, keep_mix=True, seed=0)
    assert rep["refl"] == {"examples": 10, "too_long": 4, "dropped_for_mix": 0, "kept": 6}
    assert rep["pref"] == {"examples": 40, "too_long": 0, "dropped_for_mix": 16, "kept": 24}
    assert rep["ratio_before"] == "4.00:1" and rep["ratio_after"] == "4.00:1"
    assert sum(e["task"] == "pref" for e in kept) == 24 and len(kept) == 30
    assert all(_words(e) <= 64 for e in kept)
    again, _ = filter_by_length(ex, _words, 64, True, 0)
    assert {e["id"] for e in again} == {e["id"] for e in kept}  # seeded
    line = format_length_report(rep)
    assert "Refl kept 6 of 10 (4 over 64 prompt tokens, 0 left out to keep the mix)" in line
    assert "Pref kept 24 of 40 (0 over 64 prompt tokens, 16 left out" in line
    assert line.endswith("Pref:Refl 4.00:1 -> 4.00:1")


def test_length_filter_without_keep_mix_reports_the_drift():
    ex = _synthetic(40, 10, long_refl=4)
    kept, rep = filter_by_length(ex, _words, 64, keep_mix=False, seed=0)
    assert len(kept) == 46 and rep["pref"]["kept"] == 40 and rep["refl"]["kept"] == 6
    assert rep["ratio_after"] == "6.67:1"


def test_length_filter_leaves_data_that_fits_untouched():
    ex = _synthetic(8, 2, long_refl=0)
    kept, rep = filter_by_length(ex, _words, 64, True, 0)
    assert kept == ex and rep["pref"]["dropped_for_mix"] == rep["refl"]["dropped_for_mix"] == 0
    only_pref = _synthetic(8, 0, 0)
    kept, rep = filter_by_length(only_pref, _words, 5, True, 0)  # all too long, no crash
    assert kept == [] and rep["pref"]["too_long"] == 8 and rep["ratio_after"] == "0:0"


def test_resuming_a_format_2_run_is_refused_with_one_error_line(tmp_path, model_path):
    import duckdb

    from rmjudge.cli import main

    out = str(tmp_path / "o.duckdb")
    args = ["score", PANDALM, "-o", out, "--model", model_path, "--limit", "1", "--samples", "2",
            "--max-tokens", "8", "--orders", "ab"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    con = duckdb.connect(out)  # as rmjudge 0.4.0 (format 2) would have recorded it
    old = orjson.loads(con.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()[0])
    assert old["prompt_format"] == PROMPT_FORMAT
    old["prompt_format"] = 2
    con.execute("UPDATE meta SET value = ? WHERE key = 'settings'", [orjson.dumps(old).decode()])
    con.close()
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    errors = [ln for ln in r.output.splitlines() if "Error" in ln or "Traceback" in ln]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {out} holds results made with "
                                                      "other settings (prompt_format 2 -> 3)")
