"""Settings for each export step, one frozen dataclass per concern, checked on construction.

`ExportError` is the one error type the export steps raise for problems a user can fix; its
message says how. The CLI prints it without a traceback.
"""

from __future__ import annotations

from rmjudge.errors import UserError

from dataclasses import dataclass, field
from pathlib import Path

OUT_TYPES = ("f32", "f16", "bf16", "q8_0")
LORA_OUT_TYPES = ("f32", "f16", "bf16")
QUANT_TYPES = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")
DEFAULT_QUANT = "Q4_K_M"
MERGE_DTYPES = ("bfloat16", "float16", "float32")


class ExportError(UserError):
    """An export step cannot proceed; the message says how to fix the input or options."""


def _need_dir(path: str, what: str) -> None:
    p = Path(path)
    if not p.exists():
        raise ExportError(f"{what} not found: {path}")
    if not p.is_dir():
        raise ExportError(f"{what} must be a folder (Hugging Face layout), got a file: {path}")


def _need_choice(value: str, choices: tuple[str, ...], flag: str) -> None:
    if value not in choices:
        raise ExportError(f"{flag} must be one of {', '.join(choices)}")


def _need_adapter(path: str) -> None:
    _need_dir(path, "adapter folder")
    if not (Path(path) / "adapter_config.json").exists():
        raise ExportError(f"{path} has no adapter_config.json: pass the folder that "
                          "PEFT's save_pretrained wrote")


def _need_threads(threads: int) -> None:
    if threads < 0:
        raise ExportError("--threads must be 0 (all cores) or more")


def _need_file(path: str, what: str) -> None:
    p = Path(path)
    if not p.exists():
        raise ExportError(f"{what} not found: {path}")
    if p.is_dir():
        raise ExportError(f"{what} must be a file, got a folder: {path}")


@dataclass(frozen=True)
class UnpackConfig:
    gguf: str = field(metadata={"help": "GGUF model to turn into a Hugging Face folder"})
    out_dir: str = field(metadata={"help": "output folder (safetensors, config, tokenizer)"})
    dtype: str = field(default="float32", metadata={"help": "dtype of the saved weights"})

    def __post_init__(self) -> None:
        _need_file(self.gguf, "GGUF model")
        _need_choice(self.dtype, MERGE_DTYPES, "--dtype")


@dataclass(frozen=True)
class MergeConfig:
    base: str = field(metadata={"help": "base model: Hugging Face folder or a GGUF file"})
    adapter: str = field(metadata={"help": "PEFT LoRA adapter folder (adapter_config.json)"})
    out_dir: str = field(metadata={"help": "output folder for the merged model"})
    dtype: str = field(default="bfloat16", metadata={
        "help": "dtype the base is reloaded in and the merged weights are saved in (never 4-bit)"})

    def __post_init__(self) -> None:
        if not Path(self.base).exists():
            raise ExportError(f"base model not found: {self.base}")
        _need_adapter(self.adapter)
        _need_choice(self.dtype, MERGE_DTYPES, "--dtype")


@dataclass(frozen=True)
class ConvertConfig:
    model_dir: str = field(metadata={"help": "Hugging Face model folder (safetensors)"})
    out: str = field(metadata={"help": "output GGUF file"})
    out_type: str = field(default="f16", metadata={"help": "f32, f16, bf16 or q8_0"})
    pre_tokenizer: str | None = field(default=None, metadata={
        "help": "llama.cpp pre-tokenizer name (tokenizer.ggml.pre); detected when omitted"})
    name: str | None = field(default=None, metadata={"help": "general.name (default: folder)"})

    def __post_init__(self) -> None:
        _need_dir(self.model_dir, "model folder")
        _need_choice(self.out_type, OUT_TYPES, "--outtype")


@dataclass(frozen=True)
class QuantizeConfig:
    src: str = field(metadata={"help": "f32/f16/bf16 GGUF to quantize"})
    out: str = field(metadata={"help": "output GGUF file"})
    qtype: str = field(default=DEFAULT_QUANT, metadata={"help": "llama.cpp quantization type"})
    threads: int = field(default=0, metadata={"help": "quantizer threads (0: all cores)"})

    def __post_init__(self) -> None:
        _need_file(self.src, "input GGUF")
        _need_choice(self.qtype.upper(), QUANT_TYPES, "--type")
        _need_threads(self.threads)
        if Path(self.src).resolve() == Path(self.out).resolve():
            raise ExportError("the quantized output must not overwrite its input")


@dataclass(frozen=True)
class LoraExportConfig:
    adapter: str = field(metadata={"help": "PEFT LoRA adapter folder"})
    out: str = field(metadata={"help": "output GGUF LoRA file"})
    base: str | None = field(default=None, metadata={
        "help": "base model: Hugging Face folder or GGUF file (architecture and head counts; a "
                "GGUF is also checked to hold every adapted matrix); default: the adapter's "
                "base_model_name_or_path when that exists locally"})
    out_type: str = field(default="f32", metadata={"help": "f32, f16 or bf16"})

    def __post_init__(self) -> None:
        _need_adapter(self.adapter)
        if self.base is not None and not Path(self.base).exists():
            raise ExportError(f"base model not found: {self.base}")
        _need_choice(self.out_type, LORA_OUT_TYPES, "--outtype of a LoRA")


@dataclass(frozen=True)
class VerifyConfig:
    hf_dir: str = field(metadata={"help": "reference Hugging Face model (the merged model)"})
    ggufs: tuple[str, ...] = field(default=(), metadata={"help": "GGUF files to compare"})
    base_gguf: str | None = field(default=None, metadata={
        "help": "base GGUF for the run-time LoRA check (with lora)"})
    lora: str | None = field(default=None, metadata={"help": "GGUF LoRA applied to base_gguf"})
    lora_scale: float = field(default=1.0, metadata={"help": "LoRA scale at run time"})
    prompts: tuple[str, ...] = field(default=(), metadata={
        "help": "user messages to evaluate (default: a fixed built-in set)"})
    threads: int = field(default=0, metadata={"help": "llama.cpp threads (0: all cores)"})

    def __post_init__(self) -> None:
        _need_dir(self.hf_dir, "reference model folder")
        for g in self.ggufs:
            _need_file(g, "GGUF file")
        if (self.base_gguf is None) != (self.lora is None):
            raise ExportError("--base-gguf and --lora go together: the LoRA is applied to that "
                              "base at run time")
        if self.base_gguf:
            _need_file(self.base_gguf, "base GGUF")
            _need_file(self.lora, "GGUF LoRA")
        if not self.ggufs and not self.lora:
            raise ExportError("nothing to verify: pass --gguf FILE (repeatable) and/or "
                              "--base-gguf BASE --lora ADAPTER")
        _need_threads(self.threads)
