"""A GGUF LoRA adapter merged into a Q8_0 copy of its base model, with NumPy.

llama.cpp applies a LoRA adapter at run time as two more products per adapted matrix
(`W x + s B (A x)`); for a model as small as the embedded judge those products and their graph
nodes cost about as much as a quarter of the model's own work. Merged, `W' = W + s B A` is one
matrix again: rmjudge runs the embedded demo judge as one Q8_0 file with its demo adapter merged
in (rmjudge/models/embedded.py).

What is computed, as llama.cpp defines it: `s = scale * alpha / rank` (`adapter.lora.alpha`,
rank = `lora_b`'s ne[0]; `s = scale` without alpha), `A` = `W.lora_a` (rank x in), `B` =
`W.lora_b` (out x rank), `W` dequantized from the base file (Q4_1, Q8_0, F16 or F32) in float32,
and `W'` quantized to Q8_0 as ggml's reference quantizer does (blocks of 32, scale = the block's
largest magnitude / 127 stored as float16, values rounded half away from zero). The merged
bytes replace the adapted matrices of a Q8_0 copy of the same base (same names and shapes);
every other tensor and all metadata stay as they are.

NumPy rather than the `gguf` package: the package is not a runtime dependency, and the few
block formats read here are a dozen lines each (checked against llama.cpp's own dequantization
and quantization in tests/test_lora_merge.py).
"""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np

from rmjudge.models.gguf_header import GGUFHeader, GGUFTensor, read_gguf_header

F32, F16, Q4_1, Q8_0 = 0, 1, 3, 8
BLOCK = 32  # elements per block of Q4_1 and Q8_0
BLOCK_BYTES = {Q4_1: 20, Q8_0: 34}  # float16 scale (+ float16 min for Q4_1) and the values
TYPE_NAMES = {F32: "F32", F16: "F16", Q4_1: "Q4_1", Q8_0: "Q8_0"}


class MergeError(ValueError):
    """The adapter does not fit the files (a matrix missing, another shape or type)."""


def nbytes(t: GGUFTensor) -> int:
    """The size of tensor `t`'s data in a type read here."""
    n = t.n_elements
    if t.ggml_type == F32:
        return 4 * n
    if t.ggml_type == F16:
        return 2 * n
    if t.ggml_type in BLOCK_BYTES:
        return n // BLOCK * BLOCK_BYTES[t.ggml_type]
    raise MergeError(f"tensor {t.name} has ggml type {t.ggml_type}, which is not read here "
                     f"({', '.join(TYPE_NAMES.values())})")


def dequantize(raw, ggml_type: int) -> np.ndarray:
    """The float32 values of a tensor's data `raw` (bytes-like) in `ggml_type`, flat."""
    data = np.frombuffer(raw, dtype=np.uint8)
    if ggml_type == F32:
        return data.view(np.float32).copy()
    if ggml_type == F16:
        return data.view(np.float16).astype(np.float32)
    if ggml_type == Q8_0:
        blocks = data.reshape(-1, BLOCK_BYTES[Q8_0])
        d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
        return (blocks[:, 2:].view(np.int8).astype(np.float32) * d).reshape(-1)
    if ggml_type == Q4_1:
        blocks = data.reshape(-1, BLOCK_BYTES[Q4_1])
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
        qs = blocks[:, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)  # low nibbles first
        return (q * d + m).reshape(-1)
    raise MergeError(f"ggml type {ggml_type} is not read here")


def quantize_q8_0(x: np.ndarray) -> bytes:
    """`x` (float32, a multiple of 32 values) as Q8_0 blocks, as ggml's
    `quantize_row_q8_0_ref` writes them."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, BLOCK)
    d = np.abs(x).max(axis=1) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    v = x * inv[:, None]
    q = np.rint(v)  # to nearest, ties to even; C's roundf takes ties away from zero:
    whole = np.trunc(v)
    tie = np.abs(v - whole) == np.float32(0.5)  # the fraction is exact in float32
    q[tie] = (whole + np.sign(v))[tie]
    q = q.astype(np.int8)
    out = np.empty((x.shape[0], BLOCK_BYTES[Q8_0]), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def _matrix(buf, header: GGUFHeader, t: GGUFTensor) -> np.ndarray:
    """Tensor `t` of the file read into `buf`, as a float32 (ne[1], ne[0]) matrix."""
    start = header.data_offset + t.offset
    values = dequantize(buf[start:start + nbytes(t)], t.ggml_type)
    return values.reshape(t.shape[1], t.shape[0])


def check_extent(path: str, header: GGUFHeader, size: int) -> None:
    """MergeError naming `path` when a tensor of a type read here ends past the file's `size`
    bytes (a file cut short: its header is whole, its data is not)."""
    for t in header.tensors:
        if t.ggml_type not in TYPE_NAMES:
            continue
        end = header.data_offset + t.offset + nbytes(t)
        if end > size:
            raise MergeError(f"{path} is cut short (its tensor {t.name} ends at byte {end:,}, "
                             f"the file has {size:,})")


def lora_pairs(adapter: GGUFHeader) -> Iterator[tuple[str, GGUFTensor, GGUFTensor]]:
    """(base tensor name, lora_a, lora_b) of each matrix the adapter adapts, in file order."""
    by_name = {t.name: t for t in adapter.tensors}
    for t in adapter.tensors:
        if t.name.endswith(".lora_a"):
            name = t.name.removesuffix(".lora_a")
            b = by_name.get(name + ".lora_b")
            if b is None:
                raise MergeError(f"the adapter has {t.name} without {name}.lora_b")
            yield name, t, b


def merged_q8_0(copy_path: str, base_path: str, adapter_path: str,
                scale: float = 1.0) -> tuple[bytearray, int]:
    """The bytes of `copy_path` (a Q8_0 copy of `base_path`) with its adapted matrices replaced
    by the base's matrices with the adapter merged in (module docstring), and how many matrices
    were merged."""
    import mmap

    with open(copy_path, "rb") as f:
        target = bytearray(f.read())
    q8 = read_gguf_header(copy_path)
    check_extent(copy_path, q8, len(target))
    q8_tensors = {t.name: t for t in q8.tensors}
    base = read_gguf_header(base_path)
    check_extent(base_path, base, os.path.getsize(base_path))
    base_tensors = {t.name: t for t in base.tensors}
    ad = read_gguf_header(adapter_path)
    check_extent(adapter_path, ad, os.path.getsize(adapter_path))
    alpha = float(ad.get("adapter.lora.alpha", 0.0) or 0.0)
    merged = 0
    with open(base_path, "rb") as fb, open(adapter_path, "rb") as fa, \
            mmap.mmap(fb.fileno(), 0, access=mmap.ACCESS_READ) as bm, \
            mmap.mmap(fa.fileno(), 0, access=mmap.ACCESS_READ) as am:
        for name, ta, tb in lora_pairs(ad):
            w_t, out_t = base_tensors.get(name), q8_tensors.get(name)
            if w_t is None or out_t is None:
                raise MergeError(f"the adapter adapts {name}, which the model does not have")
            if out_t.ggml_type != Q8_0 or out_t.shape != w_t.shape:
                raise MergeError(f"{name} of the copy is not the base's matrix in Q8_0")
            a, b = _matrix(am, ad, ta), _matrix(am, ad, tb)  # rank x in, out x rank
            rank = tb.shape[0]
            w = _matrix(bm, base, w_t)
            if a.shape != (rank, w.shape[1]) or b.shape != (w.shape[0], rank):
                raise MergeError(f"{name}: adapter shapes {ta.shape} and {tb.shape} do not fit "
                                 f"the matrix {w_t.shape}")
            s = scale * alpha / rank if alpha else scale
            w += np.float32(s) * (b @ a)
            start = q8.data_offset + out_t.offset
            target[start:start + nbytes(out_t)] = quantize_q8_0(w)
            merged += 1
    return target, merged
