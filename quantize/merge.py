"""Merging a trained (Q)LoRA adapter into its base model, saved as a Hugging Face folder.

The base is reloaded in bf16/fp16/fp32, never in 4-bit: merging into NF4 weights would
re-quantize the sum and lose most of what the adapter learned. The merged folder holds
safetensors weights, the tokenizer (the adapter's own when it saved one, else the base's) and
the chat template, ready for `convert`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from rmjudge.quantize.config import ExportError, MergeConfig
from rmjudge.quantize.hfio import load_causal_lm
from rmjudge.files import write_folder


@dataclass
class MergeResult:
    out_dir: str
    dtype: str
    modules: int  # adapted modules merged
    parameters: int


def merge(cfg: MergeConfig) -> MergeResult:
    from peft import PeftModel
    from transformers import AutoTokenizer

    acfg = json.loads((Path(cfg.adapter) / "adapter_config.json").read_text())
    if acfg.get("peft_type", "LORA") != "LORA":
        raise ExportError(f"adapter type {acfg.get('peft_type')!r} is not a LoRA adapter")
    model, tokenizer = load_causal_lm(cfg.base, cfg.dtype)
    try:
        peft_model = PeftModel.from_pretrained(model, cfg.adapter)
    except (ValueError, RuntimeError, KeyError) as exc:
        raise ExportError(f"the adapter does not fit the base model {cfg.base} ({exc}): pass the "
                          "base it was trained on") from None
    modules = sum(1 for n, _ in peft_model.named_modules() if n.endswith(".lora_A"))
    merged = peft_model.merge_and_unload()
    if getattr(merged.config, "quantization_config", None) is not None:
        del merged.config.quantization_config
    out = Path(cfg.out_dir)

    tok = AutoTokenizer.from_pretrained(cfg.adapter) \
        if (Path(cfg.adapter) / "tokenizer_config.json").exists() else tokenizer
    write_folder(str(out), "rmjudge-export merge",
                 functools.partial(merged.save_pretrained, safe_serialization=True),
                 tok.save_pretrained, overwrite=cfg.overwrite)
    return MergeResult(out_dir=str(out), dtype=cfg.dtype, modules=modules,
                       parameters=sum(p.numel() for p in merged.parameters()))
