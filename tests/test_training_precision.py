"""`--precision` of training and its greedy generations (training/precision.py): auto means
bfloat16 exactly where the device computes it natively, the explicit choices are obeyed, a bad
value is one error naming the option, and the greedy generations run under the autocast the
run chose (the slow SFT and GRPO tests check that runs record it)."""

from __future__ import annotations

import importlib.util

import pytest

HAS_TRAIN = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft"))
pytestmark = [pytest.mark.hf,
              pytest.mark.skipif(not HAS_TRAIN, reason="training extras missing: pip install "
                                                       "'.[train]'")]


@pytest.mark.parametrize("native", [True, False])
def test_auto_is_bf16_exactly_where_the_cpu_computes_it(monkeypatch, native):
    import torch

    from rmjudge.training.precision import use_bf16

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert use_bf16("auto") is native
    assert use_bf16("bf16") is True and use_bf16("fp32") is False


def test_amx_alone_counts_as_native_and_a_missing_probe_as_not(monkeypatch):
    import torch

    from rmjudge.training.precision import cpu_has_native_bf16

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert cpu_has_native_bf16()
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert not cpu_has_native_bf16()


def test_auto_on_cuda_follows_the_gpu(monkeypatch):
    import torch

    from rmjudge.training.precision import use_bf16

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for supported in (True, False):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda s=supported: s)
        assert use_bf16("auto") is supported
    # bf16 asked of a GPU without it is one error naming the option, not a failure mid-run
    from rmjudge.training.sft import SFTError

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    with pytest.raises(SFTError, match=r"^--precision bf16: Tesla T4 does not compute bfloat16; "
                                       r"use --precision auto or fp32$"):
        use_bf16("bf16", SFTError)
    assert use_bf16("fp32", SFTError) is False


def test_a_bad_precision_is_one_error_naming_the_option(tmp_path):
    from rmjudge.training.data import DataError
    from rmjudge.training.evaluate import EvalJudgeSettings
    from rmjudge.training.sft import SFTError, SFTSettings

    with pytest.raises(SFTError, match=r"^--precision fp64: expected one of auto, bf16, fp32$"):
        SFTSettings(source="x.jsonl", output_dir=str(tmp_path / "o"), precision="fp64")
    with pytest.raises(DataError, match="--precision half"):
        EvalJudgeSettings(model="m.gguf", data="d.jsonl", precision="half")


def test_autocast_computes_products_in_bf16_and_keeps_weights_fp32():
    import torch

    from rmjudge.training.precision import autocast

    layer = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8)
    with autocast(layer, True):
        y = layer(x)
    assert y.dtype == torch.bfloat16 and layer.weight.dtype == torch.float32
    with autocast(layer, False):
        assert layer(x).dtype == torch.float32


@pytest.mark.parametrize("bf16", [True, False])
def test_greedy_generations_run_under_the_chosen_precision(monkeypatch, bf16):
    import torch

    import rmjudge.training.hf as hf

    seen = []

    def fake_generate(model, tokenizer, prompts, **gen):
        seen.append((torch.is_autocast_enabled("cpu"), len(prompts), gen["do_sample"]))
        return ["x"] * len(prompts), ["stop"] * len(prompts)

    monkeypatch.setattr(hf, "_generate", fake_generate)
    prompts = [[{"role": "user", "content": str(i)}] for i in range(5)]
    out = hf.greedy_completions(torch.nn.Linear(2, 2), None, prompts, 8, batch_size=2,
                                bf16=bf16)
    assert out == ["x"] * 5
    assert seen == [(bf16, 2, False), (bf16, 2, False), (bf16, 1, False)]
    assert not torch.is_autocast_enabled("cpu")  # left as it was
