"""quantize/: HF -> GGUF conversion, llama.cpp quantization, GGUF LoRA, logit parity.

Tiny randomly initialized llama/qwen2/qwen3 models (built here, with a small byte-level BPE
tokenizer trained on the spot) check each family end to end in seconds; the embedded
SmolLM2-135M (GGUF -> transformers -> exporter -> GGUF) checks a real model. Tolerances are
those of `quantize.verify.THRESHOLDS` unless stated; f32 files still differ from transformers by
up to ~0.05 in logits because llama.cpp keeps its KV cache in f16.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

for _mod in ("gguf", "transformers", "peft", "torch", "llama_cpp", "tokenizers"):
    if importlib.util.find_spec(_mod) is None:
        pytest.skip(f"{_mod} is not installed (pip install '.[export]')",
                    allow_module_level=True)

from rmjudge.quantize.config import (ConvertConfig, ExportError, LoraExportConfig,  # noqa
                                    QuantizeConfig)
from rmjudge.quantize.convert import convert  # noqa: E402
from rmjudge.quantize.families import reorder_rows_for_rope  # noqa: E402
from rmjudge.quantize.lora import export_lora  # noqa: E402
from rmjudge.quantize.quant import count_fallbacks, gguf_stats, quantize  # noqa: E402
from rmjudge.quantize.verify import compare, gguf_logits  # noqa: E402
from rmjudge.quantize.vocab import detect_pre_tokenizer  # noqa: E402

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CORPUS = ["The judge compares two responses and picks the better one.",
          "Response 1 is correct: 12 * 12 = 144. Response 2 says 124, which is wrong.",
          "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"] * 20
PROMPTS = ("Which response is better, 1 or 2?", "def fib(n): return 144")


# -- fast checks, no model -----------------------------------------------------------------


def _rope_hf(x, pos):  # HF: rotate first half against second half
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
    ang = np.concatenate([pos * inv, pos * inv])
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * np.cos(ang) + np.concatenate([-x2, x1], -1) * np.sin(ang)


def _rope_interleaved(x, pos):  # llama.cpp's llama RoPE: adjacent pairs
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    out = x.copy()
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    return out


def test_row_reordering_makes_interleaved_rope_equal_hf_rope():
    rng = np.random.default_rng(0)
    n_head, d, n_in = 3, 8, 5
    w = rng.normal(size=(n_head * d, n_in))
    x = rng.normal(size=n_in)
    wp = reorder_rows_for_rope(w, n_head)
    for pos in (0, 3, 17):
        hf = _rope_hf((w @ x).reshape(n_head, d), pos)
        lc = _rope_interleaved((wp @ x).reshape(n_head, d), pos)
        # same attention scores need the same vectors up to a fixed per-head permutation
        np.testing.assert_allclose(np.sort(hf, -1), np.sort(lc, -1), atol=1e-12)
        q_hf = _rope_hf((w @ x).reshape(n_head, d), pos)
        k_hf = _rope_hf((w @ x[::-1]).reshape(n_head, d), pos + 2)
        q_lc = _rope_interleaved((wp @ x).reshape(n_head, d), pos)
        k_lc = _rope_interleaved((wp @ x[::-1]).reshape(n_head, d), pos + 2)
        np.testing.assert_allclose((q_hf * k_hf).sum(-1), (q_lc * k_lc).sum(-1), atol=1e-12)
    # without the reordering the scores differ
    q_bad = _rope_interleaved((w @ x).reshape(n_head, d), 5)
    k_bad = _rope_interleaved((w @ x[::-1]).reshape(n_head, d), 7)
    q_ref = _rope_hf((w @ x).reshape(n_head, d), 5)
    k_ref = _rope_hf((w @ x[::-1]).reshape(n_head, d), 7)
    assert not np.allclose((q_bad * k_bad).sum(-1), (q_ref * k_ref).sum(-1))


def test_pre_tokenizer_detection():
    bl = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    assert detect_pre_tokenizer({"pre_tokenizer": bl}) == "gpt-2"
    smol = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, bl]}
    assert detect_pre_tokenizer({"pre_tokenizer": smol}) == "smollm"
    qwen = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated"},
        {**bl, "use_regex": False}]}
    assert detect_pre_tokenizer({"pre_tokenizer": qwen}) == "qwen2"
    with pytest.raises(ExportError, match="--pre-tokenizer"):
        detect_pre_tokenizer({"pre_tokenizer": {"type": "Whitespace"}})


def test_bad_inputs_are_reported_with_a_fix(tmp_path):
    with pytest.raises(ExportError, match="outtype"):
        ConvertConfig(str(tmp_path), str(tmp_path / "x.gguf"), "q4")
    with pytest.raises(ExportError, match="config.json"):
        convert(ConvertConfig(str(tmp_path), str(tmp_path / "x.gguf")))
    (tmp_path / "f.gguf").write_bytes(b"GGUF")
    with pytest.raises(ExportError, match="--type"):
        QuantizeConfig(str(tmp_path / "f.gguf"), str(tmp_path / "o.gguf"), "Q3_K_XL")
    ad = tmp_path / "ad"
    ad.mkdir()
    (ad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "use_dora": True}))
    with pytest.raises(ExportError, match="DoRA"):
        export_lora(LoraExportConfig(str(ad), str(tmp_path / "l.gguf"), base=str(tmp_path)))


# -- tiny random models of each family -------------------------------------------------------


def _tokenizer(folder):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    fast.save_pretrained(str(folder))
    return fast


def _tiny_model(folder, family: str, tied: bool):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = _tokenizer(folder)
    kw = dict(vocab_size=len(tok) + 5, hidden_size=64, intermediate_size=96,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256, tie_word_embeddings=tied, initializer_range=0.3,
              eos_token_id=tok.eos_token_id, bos_token_id=None)
    if family == "qwen3":
        kw["head_dim"] = 32  # not hidden/heads: exercises key_length/value_length
    cfg = AutoConfig.for_model(family, **kw)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    if family == "qwen2":  # q/k/v biases exist; make them non-zero
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("proj.bias"):
                    p.normal_(0, 0.3)
    model.save_pretrained(str(folder))
    return model, tok


def _hf_logits(model, tok, texts):
    import torch
    ids = [tok(t)["input_ids"] for t in texts]
    with torch.no_grad():
        return ids, [model(torch.tensor([i])).logits[0].numpy() for i in ids]


@pytest.mark.slow  # builds and runs transformers models
@pytest.mark.parametrize("family,tied", [("llama", True), ("qwen2", False), ("qwen3", True)])
def test_tiny_family_round_trip(tmp_path, family, tied):
    model, tok = _tiny_model(tmp_path / "hf", family, tied)
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                     add_generation_prompt=True) for p in PROMPTS]
    ids, ref = _hf_logits(model, tok, texts)
    out = tmp_path / "m-f32.gguf"
    res = convert(ConvertConfig(str(tmp_path / "hf"), str(out), "f32"))
    assert res.architecture == family and res.pre_tokenizer == "qwen2" and res.chat_template
    got, toks = gguf_logits(str(out), ids, texts, threads=1)
    max_abs, top1, kl, n = compare(ref, got)
    assert n == sum(len(i) for i in ids)
    assert max_abs < 5e-2 and top1 == 1.0 and kl < 1e-5, (max_abs, top1, kl)
    assert toks == ids  # llama.cpp tokenizes the chat text as transformers does
    import gguf

    reader = gguf.GGUFReader(str(out))
    names = {t.name for t in reader.tensors}
    assert ("output.weight" in names) == (not tied)
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    assert types.count(int(gguf.TokenType.CONTROL)) == 3  # the three special tokens
    assert types.count(int(gguf.TokenType.UNUSED)) == 5  # vocab_size padding


@pytest.mark.slow  # builds and runs transformers models
def test_a_gguf_is_parsed_once_per_conversion_and_gives_the_same_model(tmp_path, monkeypatch):
    """load_causal_lm reads a GGUF with one gguf.GGUFReader where transformers makes three
    (config, weights, tokenizer), and the model and tokenizer are those of transformers'
    own three reads; gguf's names are put back afterwards."""
    import contextlib

    import gguf
    import torch

    from rmjudge.quantize import hfio

    _tiny_model(tmp_path / "hf", "llama", True)
    out = tmp_path / "m-f32.gguf"
    convert(ConvertConfig(str(tmp_path / "hf"), str(out), "f32"))
    made = []
    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map

    class Counted(real_reader):
        def __init__(self, *args, **kwargs):
            made.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", Counted)
    model, tok = hfio.load_causal_lm(str(out), "float32")
    assert len(made) == 1
    assert gguf.GGUFReader is Counted and gguf.get_tensor_name_map is real_map  # put back
    made.clear()
    monkeypatch.setattr(hfio, "gguf_parsed_once", contextlib.nullcontext)
    plain_model, plain_tok = hfio.load_causal_lm(str(out), "float32")
    assert len(made) == 3  # transformers' own reads, for comparison
    theirs = plain_model.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in model.state_dict().items())
    text = "<|im_start|>user\nhello 123<|im_end|>"
    assert tok(text)["input_ids"] == plain_tok(text)["input_ids"]


@pytest.mark.slow  # builds and runs transformers models
def test_tiny_llama_lora_and_merge_match_and_qk_reordering_is_needed(tmp_path, monkeypatch):
    import torch
    from peft import LoraConfig, get_peft_model

    from rmjudge.quantize.config import MergeConfig
    from rmjudge.quantize.merge import merge

    model, tok = _tiny_model(tmp_path / "hf", "llama", True)
    texts = [tok.apply_chat_template([{"role": "user", "content": PROMPTS[0]}], tokenize=False,
                                     add_generation_prompt=True)]
    base = tmp_path / "base-f32.gguf"
    convert(ConvertConfig(str(tmp_path / "hf"), str(base), "f32"))
    torch.manual_seed(1)
    peft_model = get_peft_model(model, LoraConfig(
        r=4, lora_alpha=8, init_lora_weights=False, use_rslora=True,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"]))
    peft_model.save_pretrained(str(tmp_path / "ad"))
    ids, merged_ref = _hf_logits(peft_model, tok, texts)
    _, base_ref = _hf_logits(peft_model.get_base_model(), tok, texts)  # adapters still on
    with peft_model.disable_adapter():
        _, plain = _hf_logits(peft_model, tok, texts)
    assert compare(merged_ref, plain)[0] > 0.5  # the adapter changes the logits

    res = export_lora(LoraExportConfig(str(tmp_path / "ad"), str(tmp_path / "ad.gguf"),
                                       base=str(base)))
    assert res.modules == 2 * 5 and res.rank == 4
    got, _ = gguf_logits(str(base), ids, texts, lora=str(tmp_path / "ad.gguf"), threads=1)
    max_abs, top1, kl, _ = compare(merged_ref, got)
    assert max_abs < 5e-2 and top1 == 1.0, (max_abs, top1)
    del base_ref

    # merge -> convert gives the same logits as the run-time LoRA
    merge(MergeConfig(str(tmp_path / "hf"), str(tmp_path / "ad"), str(tmp_path / "merged"),
                      "float32"))
    convert(ConvertConfig(str(tmp_path / "merged"), str(tmp_path / "merged.gguf"), "f32"))
    got_m, _ = gguf_logits(str(tmp_path / "merged.gguf"), ids, texts, threads=1)
    assert compare(merged_ref, got_m)[0] < 5e-2

    # negative control: without the q/k row reordering llama.cpp's logits drift away
    monkeypatch.setattr("rmjudge.quantize.convert.reorder_rows_for_rope", lambda w, n: w)
    convert(ConvertConfig(str(tmp_path / "merged"), str(tmp_path / "bad.gguf"), "f32"))
    got_bad, _ = gguf_logits(str(tmp_path / "bad.gguf"), ids, texts, threads=1)
    assert compare(merged_ref, got_bad)[0] > 10 * compare(merged_ref, got_m)[0]


# -- the embedded SmolLM2-135M -----------------------------------------------------------------


@pytest.fixture(scope="module")
def smol(tmp_path_factory, embedded_hf_dir):
    """The embedded GGUF through the GGUF -> transformers loader (its cached folder, shared with
    the training tests), then back to an f16 GGUF."""
    from rmjudge.quantize.hfio import load_causal_lm

    model, tok = load_causal_lm(embedded_hf_dir, "float32")
    d = tmp_path_factory.mktemp("smol")
    model.save_pretrained(str(d / "hf"), safe_serialization=True)
    tok.save_pretrained(str(d / "hf"))
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                     add_generation_prompt=True) for p in PROMPTS]
    ids, ref = _hf_logits(model, tok, texts)
    f16 = d / "smol-f16.gguf"
    convert(ConvertConfig(str(d / "hf"), str(f16), "f16"))
    return {"dir": d, "model": model, "tok": tok, "texts": texts, "ids": ids, "ref": ref,
            "f16": f16}


@pytest.mark.slow
@pytest.mark.model
def test_smollm2_f16_round_trip_matches_transformers(smol):
    got, toks = gguf_logits(str(smol["f16"]), smol["ids"], smol["texts"], threads=1)
    max_abs, top1, kl, _ = compare(smol["ref"], got)
    # f16 weights and f16 activations in llama.cpp's CPU matmuls: logits span about +-35
    assert max_abs < 0.5 and top1 >= 0.97 and kl < 1e-3, (max_abs, top1, kl)
    assert toks == smol["ids"]  # digits split one by one (smollm pre-tokenizer) on both sides


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K_M"])
def test_smollm2_quantized_files_load_and_generate(smol, qtype):
    from rmjudge.engine import load_engine
    from rmjudge.core.settings import EngineSettings
    from rmjudge.core.types import GenRequest

    out = smol["dir"] / f"smol-{qtype}.gguf"
    res = quantize(QuantizeConfig(str(smol["f16"]), str(out), qtype, threads=1))
    assert res.out.file_bytes < 0.6 * res.src.file_bytes
    assert res.out.bpw < res.src.bpw
    fb, matrices = count_fallbacks(str(out), qtype)
    assert matrices == 211 and fb == res.fallbacks
    if qtype == "Q4_K_M":  # 576-wide rows cannot take 256-blocks: all but ffn_down fall back
        assert res.fallbacks == 181 and res.llama_fallbacks == 180
        assert gguf_stats(str(out)).type_counts.get("Q4_K", 0) > 0
    else:
        assert res.fallbacks == 0
    eng = load_engine(EngineSettings(model=str(out), parallel=1, threads=1))
    gens = eng.generate([GenRequest(({"role": "user", "content": "Say hi."},), n=1,
                                    max_tokens=8, temperature=0.0)])
    assert len(gens[0]) == 1 and gens[0][0].text.strip()


@pytest.mark.slow
@pytest.mark.model
def test_smollm2_gguf_lora_at_run_time_matches_merged_model(smol, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    pm = get_peft_model(smol["model"], LoraConfig(
        r=4, lora_alpha=8, init_lora_weights=False,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"]))
    try:
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_" in n:
                    p.copy_(torch.randn_like(p) * 0.05)
        pm.save_pretrained(str(tmp_path / "ad"))
        _, merged = _hf_logits(pm, smol["tok"], smol["texts"])
    finally:
        pm.unload()  # give the shared model back without adapters
    res = export_lora(LoraExportConfig(str(tmp_path / "ad"), str(tmp_path / "ad.gguf"),
                                       base=str(smol["f16"])))
    assert res.modules == 30 * 7
    got, _ = gguf_logits(str(smol["f16"]), smol["ids"], smol["texts"],
                         lora=str(tmp_path / "ad.gguf"), threads=1)
    max_abs, top1, kl, _ = compare(merged, got)
    assert max_abs < 0.5 and top1 >= 0.97 and kl < 1e-3, (max_abs, top1, kl)
    assert compare(merged, smol["ref"])[0] > 2.0  # the adapter matters
