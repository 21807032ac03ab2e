"""transformers side of training: loading the base (HF directory or GGUF), NF4 quantization,
chat rendering identical to inference, sampling and greedy generation.

Loading from GGUF (`--model DIR --gguf-file NAME`, or `--model file.gguf`): transformers
dequantizes the GGUF weights but will not quantize them again nor save them, so the model is
rebuilt from its config without the GGUF quantization marker and saved once as a plain HF
checkpoint under ~/.cache/rmjudge/hf-from-gguf/<sha256>/ (float32); training then loads that
directory like any HF model, in 4-bit NF4 when bitsandbytes allows it.

Chat rendering: `apply_chat_template(messages, add_generation_prompt=True, tokenize=False) +
ASSISTANT_PREFIX`, so the completion is the text after the prefix, exactly as the llama.cpp
engine generates it. Completions are cut after the first `</Result>` (the engine's stop).
"""

from __future__ import annotations

from rmjudge.errors import UserError

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rmjudge.prompts import ASSISTANT_PREFIX, STOP, suffix_for_model
from rmjudge.types import Message


class ModelLoadError(UserError):
    """The base model cannot be loaded as asked; the message says how to fix it."""


@dataclass(frozen=True)
class ModelSource:
    """Where the base model comes from: an HF directory/hub id, optionally a GGUF file in it."""

    path: str
    gguf_file: str | None = None

    @classmethod
    def parse(cls, model: str, gguf_file: str | None = None) -> "ModelSource":
        if gguf_file is None and model.lower().endswith(".gguf"):
            p = Path(model)
            if not p.is_file():
                raise ModelLoadError(f"GGUF file not found: {model}")
            return cls(str(p.parent), p.name)
        if gguf_file is not None and not (Path(model) / gguf_file).is_file():
            raise ModelLoadError(f"--gguf-file {gguf_file} not found in {model}")
        return cls(model, gguf_file)

    @property
    def name(self) -> str:
        return self.gguf_file or self.path


def cut_at_stop(text: str) -> str:
    """The completion up to and including the first stop string (as the engine returns it)."""
    cut = len(text)
    for s in STOP:
        i = text.find(s)
        if i >= 0:
            cut = min(cut, i + len(s))
    return text[:cut]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rmjudge" / "hf-from-gguf"


def load_tokenizer(src: ModelSource):
    from transformers import AutoTokenizer

    kw = {"gguf_file": src.gguf_file} if src.gguf_file else {}
    tok = AutoTokenizer.from_pretrained(src.path, **kw)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not getattr(tok, "chat_template", None):
        raise ModelLoadError(f"{src.name} has no chat template; use an instruct model")
    return tok


def materialize(src: ModelSource) -> str:
    """An HF directory holding the base model's weights (a GGUF is dequantized once, cached)."""
    if not src.gguf_file:
        return src.path
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rmjudge.models import file_sha256

    gguf_path = str(Path(src.path) / src.gguf_file)
    out = cache_root() / file_sha256(gguf_path)[:16]
    if (out / "config.json").exists() and (out / "complete").exists():
        return str(out)
    loaded = AutoModelForCausalLM.from_pretrained(src.path, gguf_file=src.gguf_file,
                                                  dtype=torch.float32)
    config = AutoConfig.from_pretrained(src.path, gguf_file=src.gguf_file)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    out.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out)
    load_tokenizer(src).save_pretrained(out)
    (out / "source.txt").write_text(gguf_path + "\n")
    (out / "complete").write_text("")
    return str(out)


def nf4_available() -> tuple[bool, str]:
    """Whether bitsandbytes can do 4-bit NF4 here, and why not."""
    try:
        import bitsandbytes  # noqa: F401
    except Exception as exc:  # an import-time failure of bitsandbytes is not a user error
        return False, f"bitsandbytes is not usable ({exc})"
    return True, ""


def load_base(path: str, quantization: str = "nf4", dtype: str = "auto",
              device_map: Any = None):
    """The base model for training/eval: NF4 4-bit (bitsandbytes) or unquantized."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    cuda = torch.cuda.is_available()
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
    else:
        torch_dtype = getattr(torch, dtype)
    kw: dict[str, Any] = {"dtype": torch_dtype}
    if quantization == "nf4":
        ok, why = nf4_available()
        if not ok:
            raise ModelLoadError(f"4-bit NF4 needs bitsandbytes: {why}; install it or pass "
                                 "--quantization none")
        kw["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch_dtype)
        kw["device_map"] = device_map if device_map is not None else (
            {"": torch.cuda.current_device()} if cuda else {"": "cpu"})
    elif device_map is not None:
        kw["device_map"] = device_map
    model = AutoModelForCausalLM.from_pretrained(path, **kw)
    if quantization == "none" and cuda and device_map is None:
        model = model.to("cuda")
    return model


def model_suffix(model) -> str:
    """The family's prompt suffix (Qwen3: ' /no_think'), chosen as at inference."""
    cfg = model.config
    return suffix_for_model(getattr(cfg, "model_type", None), getattr(cfg, "_name_or_path", None))


def render_prompt(tokenizer, messages: Sequence[Message]) -> str:
    """Chat-formatted prompt text ending in ASSISTANT_PREFIX.

    A template that writes the BOS token itself would get a second one from a tokenizer that
    also adds it, so the template's BOS is dropped in that case.
    """
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True,
                                         tokenize=False)
    bos = tokenizer.bos_token
    if bos and text.startswith(bos):
        ids = tokenizer("x").input_ids
        if ids and ids[0] == tokenizer.bos_token_id:
            text = text[len(bos):]
    return text + ASSISTANT_PREFIX


def _generate(model, tokenizer, prompts: list[str], **gen) -> tuple[list[str], list[str]]:
    import torch

    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(prompts, return_tensors="pt", padding=True).to(model.device)
    finally:
        tokenizer.padding_side = old_side
    with torch.no_grad():
        out = model.generate(**enc, pad_token_id=tokenizer.pad_token_id,
                             stop_strings=list(STOP), tokenizer=tokenizer, **gen)
    new = out[:, enc["input_ids"].shape[1]:]
    texts, finish = [], []
    max_new = gen["max_new_tokens"]
    for row in new:
        raw = tokenizer.decode(row, skip_special_tokens=True)
        text = cut_at_stop(raw)
        n = int((row != tokenizer.pad_token_id).sum())
        finish.append("stop" if any(s in text for s in STOP) or n < max_new else "length")
        texts.append(text)
    return texts, finish


def sample_completions(model, tokenizer, prompts: list[Sequence[Message]], n: int,
                       temperature: float, max_tokens: int, seed: int):
    """n sampled completions per prompt: (texts per prompt, finish reasons per prompt)."""
    import torch

    torch.manual_seed(seed)
    rendered = [render_prompt(tokenizer, p) for p in prompts]
    texts, finish = _generate(model, tokenizer, rendered, do_sample=True, temperature=temperature,
                              top_p=1.0, top_k=0, num_return_sequences=n,
                              max_new_tokens=max_tokens)
    return ([texts[i * n:(i + 1) * n] for i in range(len(prompts))],
            [finish[i * n:(i + 1) * n] for i in range(len(prompts))])


def greedy_completions(model, tokenizer, prompts: list[Sequence[Message]], max_tokens: int,
                       batch_size: int = 8) -> list[str]:
    """One greedy completion per prompt (evaluation decoding, as in the paper)."""
    out: list[str] = []
    for start in range(0, len(prompts), batch_size):
        rendered = [render_prompt(tokenizer, p) for p in prompts[start:start + batch_size]]
        texts, _ = _generate(model, tokenizer, rendered, do_sample=False,
                             max_new_tokens=max_tokens)
        out.extend(texts)
    return out
