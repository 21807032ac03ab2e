"""Quantizing a GGUF with llama.cpp's own quantizer (through llama-cpp-python), and reading
what came out.

`quantize(cfg)` calls `llama_model_quantize` with `llama_model_quantize_default_params()` and
the requested file type, then reads the result's tensor table (`rmjudge.models.gguf_header`,
with `gguf`'s block sizes per type): tensor types, size, bits per weight, and how many
matrices *fell back* to another type.

Fallbacks: a quantization type works on blocks along each row (32 values for Q8_0/Q4_0, 256
for the K-quants). When the type llama.cpp picks for a matrix does not fit its row length, it
writes the matrix in a fallback type instead (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and
F16 when not even a 32-block fits). SmolLM2-135M has 576-wide rows (576 = 2.25 x 256), so most
of its matrices fall back under K-quants. Counted from the output file's tensor types: a matrix
whose row length is not a multiple of 256 stored in a 32-block type other than the requested
type's own, or any matrix left in F16. llama.cpp's own count, read from its log, is reported
beside it; it can be one lower, because llama.cpp sends an output matrix (or a tied token
embedding) that K-quants cannot take straight to Q8_0 without calling that a fallback.
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from rmjudge.quantize.config import ExportError, QuantizeConfig, check_quantize_output
from rmjudge.models.gguf_header import read_gguf_header
from rmjudge.files import make_dir, write_produced

# the type each requested file type is built around (K-quant mixes also use other K types)
_BASE_TYPE = {"Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q6_K": "Q6_K", "Q5_K_M": "Q5_K", "Q4_K_M": "Q4_K"}
# the types llama.cpp falls back to (block size 32), and the K-quant block size
_FALLBACK_TYPES = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL"}
_QK_K = 256


@dataclass
class GGUFStats:
    path: str
    file_bytes: int
    tensor_bytes: int
    n_params: int
    type_counts: dict[str, int] = field(default_factory=dict)

    @property
    def bpw(self) -> float:
        """Bits per weight over all tensors (tensor data only, metadata excluded)."""
        return 8.0 * self.tensor_bytes / max(self.n_params, 1)


@dataclass
class QuantResult:
    qtype: str
    src: GGUFStats
    out: GGUFStats
    fallbacks: int  # matrices stored in a fallback type (see the module docstring)
    matrices: int  # 2-D tensors in the file (1-D norms and biases stay f32)
    llama_fallbacks: int | None  # llama.cpp's own count from its log, when it printed one
    seconds: float


def gguf_stats(path: str) -> GGUFStats:
    header = read_gguf_header(path)
    counts: dict[str, int] = {}
    tbytes = nparams = 0
    for t in header.tensors:
        kind = _type_name(t.ggml_type)
        counts[kind] = counts.get(kind, 0) + 1
        tbytes += _tensor_bytes(t)
        nparams += t.n_elements
    return GGUFStats(path=path, file_bytes=os.path.getsize(path), tensor_bytes=tbytes,
                     n_params=nparams, type_counts=counts)


def _type_name(ggml_type: int) -> str:
    import gguf

    try:
        return gguf.GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"TYPE_{ggml_type}"


def _tensor_bytes(t) -> int:
    """Bytes of a tensor's data, from gguf's block sizes of its type."""
    import gguf

    try:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t.ggml_type)]
    except (ValueError, KeyError):
        raise ExportError(f"{t.name} has a tensor type ({t.ggml_type}) this gguf package does "
                          "not know: upgrade gguf") from None
    return t.n_elements * size // block


def count_fallbacks(path: str, qtype: str) -> tuple[int, int]:
    """(fallbacks, matrices) in a quantized GGUF, from its tensor types; see the module doc."""
    base = _BASE_TYPE[qtype.upper()]
    fallbacks = matrices = 0
    for t in read_gguf_header(path).tensors:
        if len([d for d in t.shape if d > 1]) < 2:
            continue  # norms and biases stay f32
        matrices += 1
        kind = _type_name(t.ggml_type)
        row = int(t.shape[0])  # GGUF shapes are in ne order: ne[0] is the row length
        if kind in ("F16", "BF16", "F32") or (
                kind in _FALLBACK_TYPES and kind != base and row % _QK_K):
            fallbacks += 1
    return fallbacks, matrices


def _ftype(llama_cpp, qtype: str) -> int:
    name = f"LLAMA_FTYPE_MOSTLY_{qtype.upper()}"
    if not hasattr(llama_cpp, name):
        raise ExportError(f"this llama-cpp-python has no {name}: upgrade llama-cpp-python")
    return int(getattr(llama_cpp, name))


class _LogCapture:
    """Collect llama.cpp's log lines while quantizing (they carry its fallback count)."""

    def __init__(self, llama_cpp):
        self.l = llama_cpp
        self.lines: list[str] = []

        @llama_cpp.llama_log_callback
        def _cb(level, text, user_data):  # pragma: no cover - called from C
            try:
                self.lines.append(text.decode("utf-8", errors="replace"))
            except Exception:
                pass

        self._cb = _cb

    def __enter__(self):
        self.l.llama_log_set(self._cb, ctypes.c_void_p(0))
        return self

    def __exit__(self, *exc):
        @self.l.llama_log_callback
        def _quiet(level, text, user_data):  # pragma: no cover - called from C
            return None

        _LogCapture._quiet = _quiet  # keep the callback alive for the process lifetime
        self.l.llama_log_set(_quiet, ctypes.c_void_p(0))
        return False


def quantize(cfg: QuantizeConfig) -> QuantResult:
    import time

    import llama_cpp

    qtype = cfg.qtype.upper()
    src = gguf_stats(cfg.src)
    if any(k not in ("F32", "F16", "BF16") for k in src.type_counts):
        raise ExportError(f"{cfg.src} is already quantized ({', '.join(src.type_counts)}): "
                          "quantize from the f16/bf16/f32 GGUF that `convert` writes")
    out = Path(cfg.out)
    make_dir(str(out.parent))
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = _ftype(llama_cpp, qtype)
    params.nthread = cfg.threads or (os.cpu_count() or 1)
    llama_cpp.llama_backend_init()
    t0 = time.perf_counter()
    lines: list[str] = []

    def produce(tmp: str) -> None:
        with _LogCapture(llama_cpp) as log:
            rc = llama_cpp.llama_model_quantize(str(cfg.src).encode(), tmp.encode(),
                                                ctypes.byref(params))
        lines.extend(log.lines)
        if rc != 0:
            tail = "".join(log.lines[-5:]).strip()
            raise ExportError(f"llama.cpp could not quantize {cfg.src} to {qtype} (code {rc}): "
                              f"{tail}")

    write_produced(str(out), produce, check=lambda: check_quantize_output(cfg))
    seconds = time.perf_counter() - t0
    fallbacks, matrices = count_fallbacks(str(out), qtype)
    text = "".join(lines)
    m = re.search(r"(\d+) of (\d+) tensor\(s\) required fallback", text)
    return QuantResult(qtype=qtype, src=src, out=gguf_stats(str(out)), fallbacks=fallbacks,
                       matrices=matrices, llama_fallbacks=int(m.group(1)) if m else None,
                       seconds=seconds)
