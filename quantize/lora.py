"""PEFT LoRA adapter -> llama.cpp GGUF LoRA, applied to a base GGUF at run time.

The file llama.cpp reads (`llama_adapter_lora_init`): general.type = "adapter",
adapter.type = "lora", adapter.lora.alpha, general.architecture equal to the base model's,
and for each adapted matrix `<gguf name>.lora_a` (shape r x in, PEFT's lora_A) and
`<gguf name>.lora_b` (shape out x r, PEFT's lora_B), e.g. `blk.0.attn_q.weight.lora_a`.
llama.cpp adds `scale * alpha / r * B @ A` to the matrix, r being read from each B.

- rsLoRA (alpha / sqrt(r)) is written as alpha * sqrt(r), which gives the same scale;
  per-module ranks/alphas (rank_pattern, alpha_pattern) are folded into B so that one alpha
  fits every module.
- For the llama architecture the rows of q/k are reordered for llama.cpp's RoPE layout in the
  base model (see `quantize.families`); a LoRA's delta B @ A lives in the same row space, so
  the rows of B for q_proj/k_proj get the same reordering (A is untouched).
- The prompt format the adapter was trained on (`rmjudge.json` in the adapter folder, written
  by `rmjudge-train`) is copied to the metadata key `rmjudge.prompt_format`; scoring with
  `--lora` refuses an adapter of another format (rmjudge/models/adapter_format.py).
- Not representable in this format, refused with a message: DoRA, LoRA biases, modules_to_save
  (full replacement weights), embedding LoRAs, and an lm_head LoRA on a model with tied
  embeddings. Merge such adapters instead (`merge`, then `convert`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rmjudge.models.adapter_format import GGUF_KEY, read_adapter_info
from rmjudge.models.gguf_header import read_gguf_header

from rmjudge.quantize.config import ExportError, LoraExportConfig, check_lora_output
from rmjudge.quantize.convert import encode, nbytes, to_numpy
from rmjudge.quantize.families import (Dims, family_for, gguf_tensor_name, qk_heads,
                                      reorder_rows_for_rope)
from rmjudge.quantize.hfio import read_config, text_config
from rmjudge.files import make_dir, write_produced

_PREFIX = "base_model.model."


@dataclass
class LoraResult:
    path: str
    architecture: str
    alpha: float
    rank: int
    modules: int
    bytes: int
    prompt_format: int | None = None  # from the adapter folder's rmjudge.json; None: unrecorded


def base_config(base: str) -> dict[str, Any]:
    """A config dict for the base model, from its Hugging Face folder or its GGUF file."""
    p = Path(base)
    if p.is_dir():
        return read_config(p)
    header = read_gguf_header(p)
    val = header.get

    arch = val("general.architecture")
    cfg = {
        "model_type": arch,
        "num_hidden_layers": val(f"{arch}.block_count"),
        "hidden_size": val(f"{arch}.embedding_length"),
        "num_attention_heads": val(f"{arch}.attention.head_count"),
        "num_key_value_heads": val(f"{arch}.attention.head_count_kv"),
        "intermediate_size": val(f"{arch}.feed_forward_length"),
        "vocab_size": val(f"{arch}.vocab_size") or len(val("tokenizer.ggml.tokens") or []),
        "head_dim": val(f"{arch}.attention.key_length"),
        "tie_word_embeddings": not any(t.name == "output.weight" for t in header.tensors),
        "_gguf_tensors": {t.name: t.shape for t in header.tensors},
    }
    return cfg


def _resolve_base(cfg: LoraExportConfig, adapter_cfg: dict[str, Any]) -> str:
    if cfg.base:
        return cfg.base
    named = adapter_cfg.get("base_model_name_or_path")
    if named and Path(named).exists():
        return named
    raise ExportError(f"the adapter's base model {named!r} is not a local folder or file: pass "
                      "--base (the base model's Hugging Face folder or its GGUF)")


def _check_supported(acfg: dict[str, Any]) -> None:
    if acfg.get("peft_type", "LORA") != "LORA":
        raise ExportError(f"adapter type {acfg.get('peft_type')!r} is not LoRA")
    refusals = {
        "use_dora": "DoRA adapters",
        "lora_bias": "LoRA biases (lora_bias=True)",
        "modules_to_save": "modules_to_save (fully trained modules)",
        "trainable_token_indices": "trainable token embeddings",
        "fan_in_fan_out": "fan_in_fan_out (Conv1D) layers",
        "alora_invocation_tokens": "activated LoRA (aLoRA)",
    }
    for key, what in refusals.items():
        if acfg.get(key):
            raise ExportError(f"{what} cannot be expressed as a llama.cpp GGUF LoRA: merge the "
                              "adapter (`merge`) and convert the merged model instead")


def _pattern_value(patterns: dict[str, Any], module: str, default):
    for key, value in (patterns or {}).items():
        if re.fullmatch(rf"(.*\.)?(?:{key})", module):
            return value
    return default


def _adapter_tensors(adapter_dir: Path) -> dict[str, Any]:
    st = adapter_dir / "adapter_model.safetensors"
    if not st.exists():
        if (adapter_dir / "adapter_model.bin").exists():
            raise ExportError(f"{adapter_dir} holds adapter_model.bin: re-save the adapter with "
                              "safe_serialization=True")
        raise ExportError(f"{adapter_dir} has no adapter_model.safetensors")
    from safetensors.torch import load_file

    return load_file(str(st))


@dataclass(frozen=True)
class _Scale:
    """The adapter's scaling: llama.cpp scales by alpha / r with one alpha for the file;
    rsLoRA scales by alpha / sqrt(r), and alpha_pattern gives some modules their own alpha."""

    alpha0: float
    alpha_out: float
    rslora: bool
    alpha_pattern: dict[str, Any] | None

    @classmethod
    def of(cls, acfg: dict[str, Any]) -> _Scale:
        r0 = int(acfg.get("r", 8))
        alpha0 = float(acfg.get("lora_alpha", r0))
        rslora = bool(acfg.get("use_rslora"))
        # llama.cpp scales by alpha / r; rsLoRA scales by alpha / sqrt(r)
        alpha_out = alpha0 * math.sqrt(r0) if rslora else alpha0
        return cls(alpha0, alpha_out, rslora, acfg.get("alpha_pattern"))

    def factor(self, module: str, rank: int) -> float:
        """What B is multiplied by so that llama.cpp's alpha_out / rank gives the module's own
        scale."""
        alpha_m = float(_pattern_value(self.alpha_pattern, module, self.alpha0))
        scale_m = alpha_m / (math.sqrt(rank) if self.rslora else rank)
        return scale_m / (self.alpha_out / rank)


def export_lora(cfg: LoraExportConfig) -> LoraResult:
    """Write the adapter of `cfg.adapter` as a GGUF LoRA at `cfg.out`: check what the adapter
    holds, map its modules onto the base's GGUF tensor names, write the file whole."""
    import gguf

    adapter_dir = Path(cfg.adapter)
    acfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    _check_supported(acfg)
    base = _resolve_base(cfg, acfg)
    bcfg = base_config(base)
    family = family_for(bcfg)
    dims = Dims.of(bcfg)
    scale = _Scale.of(acfg)
    modules = _adapter_modules(adapter_dir)

    out = Path(cfg.out)
    make_dir(str(out.parent))
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "bf16": gguf.GGMLQuantizationType.BF16}[cfg.out_type]
    arrays, max_rank = _lora_arrays(modules, family, dims, bcfg, base, scale)
    if not arrays:
        raise ExportError(f"{adapter_dir} has no LoRA matrices for modules llama.cpp knows")

    prompt_format = read_adapter_info(adapter_dir)

    def produce(tmp: str) -> None:
        _write_lora_gguf(tmp, family.arch_name, scale.alpha_out, adapter_dir.resolve().name,
                         prompt_format, arrays, qtype)

    write_produced(str(out), produce, check=lambda: check_lora_output(cfg))
    return LoraResult(path=str(out), architecture=family.arch_name, alpha=scale.alpha_out,
                      rank=max_rank, modules=len(arrays) // 2, bytes=out.stat().st_size,
                      prompt_format=prompt_format)


def _adapter_modules(adapter_dir: Path) -> dict[str, dict[str, Any]]:
    """Module name (without PEFT's prefix) -> {"A": lora_A, "B": lora_B}; a tensor that is not
    a LoRA A/B matrix, or an embedding LoRA, is refused."""
    modules: dict[str, dict[str, Any]] = {}
    for name, t in _adapter_tensors(adapter_dir).items():
        m = re.fullmatch(r"(.*)\.lora_(A|B|embedding_A|embedding_B)(?:\.[^.]+)?\.weight", name) \
            or re.fullmatch(r"(.*)\.lora_(embedding_A|embedding_B)(?:\.[^.]+)?", name)
        if not m:
            raise ExportError(f"adapter tensor {name!r} is not a LoRA A/B matrix: this adapter "
                              "cannot be expressed as a GGUF LoRA; merge it instead")
        module, part = m.group(1), m.group(2)
        if part.startswith("embedding"):
            raise ExportError("embedding LoRAs are not exported (llama.cpp applies them in a "
                              "different layout): merge the adapter and convert the merged model")
        modules.setdefault(module.removeprefix(_PREFIX), {})[part] = t
    return modules


def _lora_arrays(modules: dict[str, dict[str, Any]], family, dims: Dims, bcfg: dict[str, Any],
                 base: str, scale: _Scale) -> tuple[list[tuple[str, np.ndarray]], int]:
    """The GGUF tensors (`<name>.lora_a`, `<name>.lora_b`) of every module llama.cpp knows, in
    natural order, and the largest rank. Each module is checked against the base (its GGUF
    tensors' shapes when the base is a GGUF); B carries the module's own scale and, for q/k of
    the llama family, llama.cpp's RoPE row order."""
    tied = bool(text_config(bcfg).get("tie_word_embeddings", False))
    base_tensors = bcfg.get("_gguf_tensors")
    arrays: list[tuple[str, np.ndarray]] = []
    max_rank = 0
    for module in sorted(modules, key=_natural_key):
        parts = modules[module]
        if set(parts) != {"A", "B"}:
            raise ExportError(f"adapter module {module!r} lacks lora_A or lora_B")
        gname = gguf_tensor_name(family, module + ".weight", dims.n_layer)
        if gname is None:
            continue
        if gname == "output.weight" and tied:
            raise ExportError("the adapter trains lm_head but the base model ties it to the "
                              "token embedding, which llama.cpp cannot adapt separately: merge "
                              "the adapter instead")
        a = to_numpy(parts["A"])  # (r, in)
        b = to_numpy(parts["B"])  # (out, r)
        rank = a.shape[0]
        if b.shape[1] != rank:
            raise ExportError(f"{module}: lora_A rank {rank} and lora_B rank {b.shape[1]} differ")
        if base_tensors is not None:
            want = base_tensors.get(gname)
            if want is None:
                raise ExportError(f"{module} -> {gname} does not exist in the base GGUF {base}: "
                                  "wrong base model")
            if (want[0], want[1]) != (a.shape[1], b.shape[0]):
                raise ExportError(f"{module}: adapter shape {b.shape[0]}x{a.shape[1]} does not "
                                  f"match {gname} in the base GGUF: wrong base model")
        # per-module scale folded into B so that llama.cpp's alpha_out / rank reproduces it
        factor = scale.factor(module, rank)
        if not math.isclose(factor, 1.0, rel_tol=1e-6):
            b = b * factor
        heads = qk_heads(family, gname, dims)
        if heads is not None:
            b = reorder_rows_for_rope(b, heads)
        max_rank = max(max_rank, rank)
        arrays.append((gname + ".lora_a", a))
        arrays.append((gname + ".lora_b", b))
    return arrays, max_rank


def _write_lora_gguf(path: str, arch: str, alpha: float, name: str, prompt_format: int | None,
                     arrays: list[tuple[str, np.ndarray]], qtype) -> None:
    """The GGUF LoRA file at `path` (the temporary `write_produced` moves into place)."""
    import gguf

    writer = gguf.GGUFWriter(path, arch)
    try:
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        writer.add_name(name)
        if prompt_format is not None:
            writer.add_uint32(GGUF_KEY, prompt_format)
        for tname, arr in arrays:
            writer.add_tensor_info(tname, arr.shape, np.dtype(np.float32),
                                   nbytes(arr.shape, qtype), raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, arr in arrays:
            writer.write_tensor_data(encode(arr, qtype))
        writer.close()
    except BaseException:
        writer.close()
        raise


def _natural_key(s: str):
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", s)]
