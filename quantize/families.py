"""Model families the exporter knows: llama (SmolLM2), qwen2 and qwen3.

A `Family` says which llama.cpp architecture a Hugging Face `model_type` becomes, which
hyperparameters go into the GGUF metadata, and how weights must be rearranged on the way.

The one rearrangement: for the llama architecture llama.cpp applies RoPE to *adjacent* pairs
of each head's dimensions, while Hugging Face's Llama rotates the first half of the head
against the second half (`rotate_half`). The exporter therefore reorders the rows of q_proj
and k_proj (and of their biases and LoRA B matrices) per head, from [x0..x(d/2-1), x(d/2)..]
to interleaved [x0, x(d/2), x1, x(d/2+1), ...]. qwen2/qwen3 use llama.cpp's NeoX RoPE, which
already matches Hugging Face's layout, so their weights are written as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rmjudge.quantize.config import ExportError
from rmjudge.quantize.hfio import rope_scaling, rope_theta, text_config


@dataclass(frozen=True)
class Family:
    model_type: str  # Hugging Face config.model_type
    arch: Any  # gguf.MODEL_ARCH member
    permute_qk: bool  # rows of q/k reordered from HF's half-split RoPE to interleaved pairs

    @property
    def arch_name(self) -> str:
        import gguf

        return gguf.MODEL_ARCH_NAMES[self.arch]


def family_for(config: dict[str, Any]) -> Family:
    import gguf

    cfg = text_config(config)
    mt = cfg.get("model_type")
    table = {
        "llama": Family("llama", gguf.MODEL_ARCH.LLAMA, True),
        "qwen2": Family("qwen2", gguf.MODEL_ARCH.QWEN2, False),
        "qwen3": Family("qwen3", gguf.MODEL_ARCH.QWEN3, False),
    }
    if mt not in table:
        raise ExportError(f"model_type {mt!r} is not supported by this exporter (supported: "
                          f"{', '.join(table)}); convert it with llama.cpp's convert_hf_to_gguf.py")
    return table[mt]


@dataclass(frozen=True)
class Dims:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    vocab_size: int

    @classmethod
    def of(cls, config: dict[str, Any]) -> "Dims":
        cfg = text_config(config)
        try:
            n_head = int(cfg["num_attention_heads"])
            n_embd = int(cfg["hidden_size"])
            return cls(
                n_layer=int(cfg["num_hidden_layers"]), n_embd=n_embd, n_head=n_head,
                n_head_kv=int(cfg.get("num_key_value_heads") or n_head),
                head_dim=int(cfg.get("head_dim") or n_embd // n_head),
                n_ff=int(cfg["intermediate_size"]), vocab_size=int(cfg["vocab_size"]),
            )
        except KeyError as exc:
            raise ExportError(f"config.json lacks {exc.args[0]!r}: not a decoder-only "
                              "language model config") from None


def write_hparams(writer, family: Family, config: dict[str, Any]) -> None:
    """The architecture's hyperparameters, as llama.cpp reads them for that architecture."""
    import gguf

    cfg = text_config(config)
    d = Dims.of(config)
    writer.add_context_length(int(cfg.get("max_position_embeddings", 4096)))
    writer.add_embedding_length(d.n_embd)
    writer.add_block_count(d.n_layer)
    writer.add_feed_forward_length(d.n_ff)
    writer.add_head_count(d.n_head)
    writer.add_head_count_kv(d.n_head_kv)
    writer.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    writer.add_rope_freq_base(rope_theta(cfg))
    writer.add_vocab_size(d.vocab_size)
    if d.head_dim != d.n_embd // d.n_head or family.arch != gguf.MODEL_ARCH.LLAMA:
        writer.add_key_length(d.head_dim)
        writer.add_value_length(d.head_dim)
    if family.arch == gguf.MODEL_ARCH.LLAMA:
        writer.add_rope_dimension_count(d.head_dim)
    scaling = rope_scaling(cfg)
    if scaling is not None:
        kind = scaling["rope_type"]
        factor = float(scaling.get("factor", 1.0))
        if kind == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(factor)
        elif kind == "yarn":
            writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            writer.add_rope_scaling_factor(factor)
            orig = scaling.get("original_max_position_embeddings")
            if orig:
                writer.add_rope_scaling_orig_ctx_len(int(orig))
        else:
            raise ExportError(f"rope scaling {kind!r} is not supported by this exporter "
                              "(supported: linear, yarn); use llama.cpp's convert_hf_to_gguf.py")


def reorder_rows_for_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of a q/k projection (or its bias, or LoRA B) from HF's half-split RoPE layout to
    llama.cpp's interleaved-pair layout; see the module docstring. Shape is kept."""
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise ExportError(f"q/k projection with {rows} rows cannot be split into {n_heads} heads "
                          "of even size: the config's head counts do not match the weights")
    half = rows // n_heads // 2
    return (w.reshape(n_heads, 2, half, *w.shape[1:])
            .transpose(0, 2, 1, *range(3, w.ndim + 2))
            .reshape(w.shape))


def qk_heads(family: Family, gguf_name: str, dims: Dims) -> int | None:
    """Number of heads to reorder by for this GGUF tensor, or None when it is left as is."""
    if not family.permute_qk:
        return None
    if ".attn_q." in gguf_name or gguf_name.endswith(".attn_q"):
        return dims.n_head
    if ".attn_k." in gguf_name or gguf_name.endswith(".attn_k"):
        return dims.n_head_kv
    return None


def gguf_tensor_name(family: Family, hf_name: str, n_layer: int) -> str | None:
    """GGUF name of a Hugging Face tensor (None for tensors llama.cpp does not use)."""
    import gguf

    if hf_name.endswith(("rotary_emb.inv_freq", ".masked_bias", ".attn.bias")):
        return None
    tmap = gguf.get_tensor_name_map(family.arch, n_layer)
    name = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
    if name is None:
        raise ExportError(f"tensor {hf_name!r} has no llama.cpp counterpart for architecture "
                          f"{family.arch_name}: this checkpoint has modules the exporter does not "
                          "know")
    return name
