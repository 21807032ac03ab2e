"""Hugging Face folder -> GGUF (f32, f16, bf16 or q8_0), written with the `gguf` library.

The file is written in a streaming way: every tensor's name, shape and type is declared first
(`GGUFWriter.add_tensor_info`), then the header, metadata and tensor infos are written, then
each tensor is read from the safetensors, rearranged, converted and written on its own. Peak
memory is about one tensor, whatever the model size.

Types: 1-D tensors (norms, biases) stay f32, as llama.cpp expects. With q8_0 a matrix whose
rows are not a multiple of the Q8_0 block (32) is written as f16 instead; the summary counts
those fallbacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rmjudge.quantize.config import ConvertConfig, ExportError, check_convert_output
from rmjudge.quantize.families import Dims, family_for, gguf_tensor_name, qk_heads, \
    reorder_rows_for_rope, write_hparams
from rmjudge.quantize.hfio import HFFolder, text_config
from rmjudge.quantize.vocab import write_vocab
from rmjudge.files import make_dir, write_produced


@dataclass
class ConvertResult:
    path: str
    architecture: str
    out_type: str
    tensors: int
    bytes: int
    pre_tokenizer: str
    chat_template: bool
    type_counts: dict[str, int] = field(default_factory=dict)
    fallbacks: int = 0


def _file_type(out_type: str):
    import gguf

    return {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
            "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[out_type]


def tensor_type(out_type: str, shape: tuple[int, ...]):
    """The GGML type a tensor of `shape` gets in a file of `out_type`."""
    import gguf

    T = gguf.GGMLQuantizationType
    if len(shape) <= 1 or out_type == "f32":
        return T.F32
    if out_type == "f16":
        return T.F16
    if out_type == "bf16":
        return T.BF16
    block = gguf.GGML_QUANT_SIZES[T.Q8_0][0]
    return T.Q8_0 if shape[-1] % block == 0 else T.F16


def encode(data: np.ndarray, qtype) -> np.ndarray:
    """`data` (float32) as the bytes/elements of `qtype`, through gguf's quants helpers."""
    import gguf

    T = gguf.GGMLQuantizationType
    if qtype == T.F32:
        return np.ascontiguousarray(data, dtype=np.float32)
    if qtype == T.F16:
        return np.ascontiguousarray(data, dtype=np.float16)
    return gguf.quants.quantize(np.ascontiguousarray(data, dtype=np.float32), qtype)


def nbytes(shape: tuple[int, ...], qtype) -> int:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = int(np.prod(shape)) if shape else 1
    return n // block * size


def to_numpy(t) -> np.ndarray:
    """A torch tensor (any float dtype, bf16 included) as float32 NumPy."""
    import torch

    return t.detach().to(torch.float32).cpu().numpy()


def plan_tensors(folder: HFFolder, family, dims: Dims) -> list[tuple[str, str]]:
    """(hf name, gguf name) for every tensor to write, in file order."""
    cfg = text_config(folder.config)
    tied = bool(cfg.get("tie_word_embeddings", folder.config.get("tie_word_embeddings", False)))
    plan: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for hf_name in folder.names():
        if tied and hf_name == "lm_head.weight":
            continue  # llama.cpp reuses token_embd when output.weight is absent
        gname = gguf_tensor_name(family, hf_name, dims.n_layer)
        if gname is None:
            continue
        if gname in seen:
            raise ExportError(f"tensors {seen[gname]!r} and {hf_name!r} both map to {gname!r}")
        seen[gname] = hf_name
        plan.append((hf_name, gname))
    if "token_embd.weight" not in seen:
        raise ExportError("the checkpoint has no token embedding (model.embed_tokens.weight)")
    if not tied and "output.weight" not in seen:
        raise ExportError("tie_word_embeddings is false but the checkpoint has no lm_head.weight")
    return plan


def convert(cfg: ConvertConfig) -> ConvertResult:
    import gguf

    folder = HFFolder(cfg.model_dir)
    family = family_for(folder.config)
    dims = Dims.of(folder.config)
    plan = plan_tensors(folder, family, dims)

    out = Path(cfg.out)
    make_dir(str(out.parent))
    made: dict[str, Any] = {}

    def produce(tmp: str) -> None:
        writer = gguf.GGUFWriter(tmp, family.arch_name)
        try:
            writer.add_type(gguf.GGUFType.MODEL)
            writer.add_name(cfg.name or Path(cfg.model_dir).resolve().name)
            write_hparams(writer, family, folder.config)
            writer.add_file_type(_file_type(cfg.out_type))
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
            vocab = write_vocab(writer, cfg.model_dir, dims.vocab_size, cfg.pre_tokenizer)

            types: dict[str, Any] = {}
            fallbacks = 0
            for hf_name, gname in plan:
                shape = folder.shape(hf_name)
                qtype = tensor_type(cfg.out_type, shape)
                if (cfg.out_type == "q8_0" and len(shape) > 1
                        and qtype != gguf.GGMLQuantizationType.Q8_0):
                    fallbacks += 1
                types[gname] = qtype
                writer.add_tensor_info(gname, shape, np.dtype(np.float32), nbytes(shape, qtype),
                                       raw_dtype=qtype)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            by_hf = {h: g for h, g in plan}
            for hf_name, tensor in folder.tensors([h for h, _ in plan]):
                gname = by_hf[hf_name]
                data = to_numpy(tensor)
                heads = qk_heads(family, gname, dims)
                if heads is not None:
                    data = reorder_rows_for_rope(data, heads)
                writer.write_tensor_data(encode(data, types[gname]))
            writer.close()
        except BaseException:
            writer.close()
            raise
        made.update(types=types, fallbacks=fallbacks, vocab=vocab)

    write_produced(str(out), produce, check=lambda: check_convert_output(cfg))
    types, fallbacks, vocab = made["types"], made["fallbacks"], made["vocab"]
    counts: dict[str, int] = {}
    for t in types.values():
        counts[t.name] = counts.get(t.name, 0) + 1
    return ConvertResult(
        path=str(out), architecture=family.arch_name, out_type=cfg.out_type,
        tensors=len(plan), bytes=out.stat().st_size, pre_tokenizer=vocab["pre_tokenizer"],
        chat_template=vocab["chat_template"], type_counts=counts, fallbacks=fallbacks,
    )
