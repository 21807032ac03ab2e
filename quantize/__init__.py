"""Exporting a trained judge for `rmjudge score`: from a (Q)LoRA adapter to GGUF files.

Steps, each a module and a `rmjudge-export` subcommand:

- `hfio.unpack_gguf` (unpack): a GGUF model as a Hugging Face folder (the embedded judge);
- `merge.merge` (merge): base reloaded in bf16/fp16 + PEFT adapter, merged, saved;
- `convert.convert` (convert): Hugging Face folder -> GGUF (f32/f16/bf16/q8_0), llama, qwen2
  and qwen3 families, tokenizer and chat template in the metadata;
- `quant.quantize` (quantize): llama.cpp's quantizer (Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0) with a
  size / bits-per-weight / fallback report;
- `lora.export_lora` (lora): a PEFT LoRA as a llama.cpp GGUF LoRA, applied at run time;
- `verify.verify` (verify): next-token logits of the Hugging Face model against llama.cpp's.

Installed with `pip install '.[export]'`; torch/transformers/peft are imported only
inside the functions that need them.
"""

from rmjudge.quantize.config import ExportError

__all__ = ["ExportError"]
