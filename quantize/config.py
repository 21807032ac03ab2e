"""Settings for each export step, one frozen dataclass per concern, checked on construction.

`ExportError` is the one error type the export steps raise for problems a user can fix; its
message says how. The CLI prints it without a traceback.
"""

from __future__ import annotations

from rmjudge.core.errors import UserError

from dataclasses import dataclass, field
from pathlib import Path

OUT_TYPES = ("f32", "f16", "bf16", "q8_0")
LORA_OUT_TYPES = ("f32", "f16", "bf16")
QUANT_TYPES = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")
DEFAULT_QUANT = "Q4_K_M"
MERGE_DTYPES = ("bfloat16", "float16", "float32")


class ExportError(UserError):
    """An export step cannot proceed; the message says how to fix the input or options."""


def _need_model_file(path: str, what: str) -> None:
    """A GGUF model llama.cpp opens: the check `rmjudge score --model` makes
    (`rmjudge.engine.vocab.check_model_file`), so a non-GGUF or truncated file is one error."""
    from rmjudge.engine.vocab import check_model_file
    from rmjudge.core.errors import ModelError

    _need_file(path, what)
    try:
        check_model_file(path)
    except ModelError as exc:
        raise ExportError(str(exc)) from None


def _need_gguf(path: str, what: str) -> None:
    """A GGUF file (magic checked; a LoRA adapter is not a model llama.cpp opens alone)."""
    from rmjudge.core.errors import ModelError
    from rmjudge.models.checks import check_gguf

    _need_file(path, what)
    try:
        check_gguf(path, what)
    except ModelError as exc:
        raise ExportError(str(exc)) from None


def _need_model(path: str, what: str) -> None:
    """A Hugging Face model folder (it has config.json) or a GGUF model."""
    from rmjudge.core.errors import ModelError
    from rmjudge.models.checks import check_hf_folder

    if Path(path).is_file():
        _need_model_file(path, what)
        return
    try:
        check_hf_folder(path, what)
    except ModelError as exc:
        raise ExportError(str(exc)) from None


def _file_output(out: str, command: str, inputs: tuple[str | None, ...],
                 overwrite: bool) -> None:
    """A GGUF output: never an input; an existing file only with --overwrite (no record is
    kept beside a GGUF, so none counts as this command's own: rmjudge.files.overwrite)."""
    from rmjudge.files import OverwriteError, check_file_target, check_not_input

    try:
        check_not_input([out], None, inputs)
        check_file_target(out, f"rmjudge-export {command}", overwrite=overwrite)
    except OverwriteError as exc:
        raise ExportError(str(exc)) from None


def _folder_output(out_dir: str, command: str, inputs: tuple[str | None, ...],
                   overwrite: bool) -> None:
    """A Hugging Face folder output: never an input; a folder that holds files only with
    --overwrite (rmjudge.files.overwrite)."""
    from rmjudge.files import OverwriteError, check_folder_target, check_not_input

    try:
        check_not_input([out_dir], None, inputs)
        check_folder_target(out_dir, f"rmjudge-export {command}", overwrite=overwrite)
    except OverwriteError as exc:
        raise ExportError(str(exc)) from None


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


# The options of `rmjudge-export` are generated from these fields (rmjudge.cli.options.
# settings_options): each field's metadata holds its option name, help and parsing.
FOLDER_OVERWRITE_HELP = ("Write into a folder that already holds files (files of the same "
                         "name are replaced); an input is never replaced.")
FILE_OVERWRITE_HELP = "Replace an existing output file; an input is never replaced."


def _overwrite(help_text: str):
    return field(default=False, metadata={"help": help_text, "flag": "--overwrite"})


@dataclass(frozen=True)
class UnpackConfig:
    gguf: str = field(metadata={"help": "GGUF model to turn into a Hugging Face folder",
                                "argument": True, "metavar": "MODEL.gguf"})
    out_dir: str = field(metadata={"help": "output folder (safetensors, config, tokenizer)",
                                   "argument": True})
    dtype: str = field(default="float32", metadata={"choices": MERGE_DTYPES})  # saved weights
    overwrite: bool = _overwrite(FOLDER_OVERWRITE_HELP)

    def __post_init__(self) -> None:
        _need_file(self.gguf, "GGUF model")
        _need_choice(self.dtype, MERGE_DTYPES, "--dtype")
        _folder_output(self.out_dir, "unpack", (self.gguf,), self.overwrite)
        _need_model_file(self.gguf, "GGUF model")


@dataclass(frozen=True)
class MergeConfig:
    base: str = field(metadata={"help": "Base model: Hugging Face folder or GGUF file."})
    adapter: str = field(metadata={"help": "PEFT LoRA adapter folder."})
    out_dir: str = field(metadata={"help": "Output folder.", "option": "--out", "short": "-o"})
    dtype: str = field(default="bfloat16", metadata={
        "help": "Precision the base is reloaded and saved in (never 4-bit).",
        "choices": MERGE_DTYPES})
    overwrite: bool = _overwrite(FOLDER_OVERWRITE_HELP)

    def __post_init__(self) -> None:
        if not Path(self.base).exists():
            raise ExportError(f"base model not found: {self.base}")
        _need_adapter(self.adapter)
        _need_choice(self.dtype, MERGE_DTYPES, "--dtype")
        _folder_output(self.out_dir, "merge", (self.base, self.adapter), self.overwrite)
        _need_model(self.base, "base model")


@dataclass(frozen=True)
class ConvertConfig:
    model_dir: str = field(metadata={"help": "Hugging Face model folder (safetensors)",
                                     "argument": True})
    out: str = field(metadata={"help": "Output GGUF file.", "short": "-o"})
    out_type: str = field(default="f16", metadata={"option": "--outtype", "choices": OUT_TYPES})
    pre_tokenizer: str | None = field(default=None, metadata={
        "help": "llama.cpp pre-tokenizer name (detected from tokenizer.json if omitted)."})
    name: str | None = field(default=None, metadata={
        "help": "general.name in the GGUF (default: folder name)."})
    overwrite: bool = _overwrite(FILE_OVERWRITE_HELP)

    def __post_init__(self) -> None:
        _need_dir(self.model_dir, "model folder")
        _need_choice(self.out_type, OUT_TYPES, "--outtype")
        check_convert_output(self)


@dataclass(frozen=True)
class QuantizeConfig:
    src: str = field(metadata={"help": "f32/f16/bf16 GGUF to quantize", "argument": True,
                               "metavar": "MODEL-f16.gguf"})
    out: str = field(metadata={"help": "Output GGUF file.", "short": "-o"})
    qtype: str = field(default=DEFAULT_QUANT, metadata={  # llama.cpp's quantization type
        "option": "--type", "choices": QUANT_TYPES, "case_sensitive": False})
    threads: int = field(default=0, metadata={"help": "Quantizer threads (0: all cores).",
                                              "show_default": False})
    overwrite: bool = _overwrite(FILE_OVERWRITE_HELP)

    def __post_init__(self) -> None:
        _need_file(self.src, "input GGUF")
        _need_choice(self.qtype.upper(), QUANT_TYPES, "--type")
        _need_threads(self.threads)
        check_quantize_output(self)
        _need_model_file(self.src, "input GGUF")


@dataclass(frozen=True)
class LoraExportConfig:
    adapter: str = field(metadata={"help": "PEFT LoRA adapter folder", "argument": True})
    out: str = field(metadata={"help": "Output GGUF LoRA file.", "short": "-o"})
    # The base gives the architecture and head counts; a GGUF base is also checked to hold
    # every adapted matrix; without one, the adapter's base_model_name_or_path when that
    # exists locally.
    base: str | None = field(default=None, metadata={
        "help": "Base model (Hugging Face folder or GGUF); default: the adapter's own."})
    out_type: str = field(default="f32", metadata={"option": "--outtype",
                                                   "choices": LORA_OUT_TYPES})
    overwrite: bool = _overwrite(FILE_OVERWRITE_HELP)

    def __post_init__(self) -> None:
        _need_adapter(self.adapter)
        if self.base is not None and not Path(self.base).exists():
            raise ExportError(f"base model not found: {self.base}")
        _need_choice(self.out_type, LORA_OUT_TYPES, "--outtype of a LoRA")
        check_lora_output(self)


@dataclass(frozen=True)
class VerifyConfig:
    hf_dir: str = field(metadata={"help": "reference Hugging Face model (the merged model)",
                                  "argument": True})
    ggufs: tuple[str, ...] = field(default=(), metadata={
        "help": "GGUF to compare (repeatable).", "option": "--gguf", "multiple": True})
    base_gguf: str | None = field(default=None, metadata={
        "help": "Base GGUF for the run-time LoRA check."})
    lora: str | None = field(default=None, metadata={"help": "GGUF LoRA applied to --base-gguf."})
    lora_scale: float = 1.0  # the LoRA's scale at run time
    prompts: tuple[str, ...] = field(default=(), metadata={
        "help": "User message to evaluate (repeatable; default: a fixed built-in set).",
        "option": "--prompt", "multiple": True})
    threads: int = field(default=0, metadata={"help": "llama.cpp threads (0: all cores).",
                                              "show_default": False})

    def __post_init__(self) -> None:
        _need_dir(self.hf_dir, "reference model folder")
        _need_model(self.hf_dir, "reference model folder")
        for g in self.ggufs:
            _need_model_file(g, "GGUF file")
        if (self.base_gguf is None) != (self.lora is None):
            raise ExportError("--base-gguf and --lora go together: the LoRA is applied to that "
                              "base at run time")
        if self.base_gguf:
            _need_model_file(self.base_gguf, "base GGUF")
            _need_gguf(self.lora, "GGUF LoRA")
        if not self.ggufs and not self.lora:
            raise ExportError("nothing to verify: pass --gguf FILE (repeatable) and/or "
                              "--base-gguf BASE --lora ADAPTER")
        _need_threads(self.threads)


def check_convert_output(cfg: ConvertConfig) -> None:
    """Refuse convert's -o before anything loads (and again just before the move)."""
    _file_output(cfg.out, "convert", (cfg.model_dir,), cfg.overwrite)


def check_quantize_output(cfg: QuantizeConfig) -> None:
    """Refuse quantize's -o before anything loads (and again just before the move)."""
    _file_output(cfg.out, "quantize", (cfg.src,), cfg.overwrite)


def check_lora_output(cfg: LoraExportConfig) -> None:
    """Refuse lora's -o before anything loads (and again just before the move)."""
    _file_output(cfg.out, "lora", (cfg.adapter, cfg.base), cfg.overwrite)
