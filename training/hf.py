"""transformers side of training: loading the base (HF directory or GGUF), NF4 quantization,
chat rendering identical to inference, sampling and greedy generation.

Loading from GGUF (`--model DIR --gguf-file NAME`, or `--model file.gguf`): the GGUF goes
through `quantize.hfio.load_causal_lm`, the project's one GGUF -> transformers loader (it
rebuilds the model without the GGUF quantization marker, and gives the tokenizer the
pre-tokenizer the GGUF names, which transformers drops), and is saved once as a plain HF
checkpoint under ~/.cache/rmjudge/hf-from-gguf/<sha256>/ (float32); training then loads that
directory like any HF model, in 4-bit NF4 when bitsandbytes allows it.

Prompt token ids for generation come from `training.tokens.encode_prompt`: the chat template's
pieces parse special tokens, the data's pieces do not, as in the inference engine; generation
starts after `ASSISTANT_PREFIX` and completions are cut after the first `</Result>` (the
engine's stop). `render_prompt` is the same prompt as text, for TRL's GRPO trainer, which
tokenizes text itself.
"""

from __future__ import annotations

from rmjudge.core.errors import UserError

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rmjudge.prompts import ASSISTANT_PREFIX, STOP, suffix_for_model
from rmjudge.core.types import Message


class ModelLoadError(UserError):
    """The base model cannot be loaded as asked; the message says how to fix it."""


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # org/name (or a legacy bare name)


def _load_failed(path: str, exc: OSError) -> ModelLoadError:
    lines = str(exc).strip().splitlines()
    return ModelLoadError(f"cannot load the model {path}: {lines[0] if lines else exc!r}")


@dataclass(frozen=True)
class ModelSource:
    """Where the base model comes from: an HF directory/hub id, optionally a GGUF file in it."""

    path: str
    gguf_file: str | None = None

    @classmethod
    def parse(cls, model: str, gguf_file: str | None = None) -> "ModelSource":
        """Checked before anything loads: a GGUF file (`check_gguf`, as `rmjudge score`), a
        Hugging Face folder (`check_hf_folder`), or a hub id (`org/name`)."""
        from rmjudge.models.checks import check_gguf, check_hf_folder

        if gguf_file is not None:
            if not (Path(model) / gguf_file).is_file():
                raise ModelLoadError(f"--gguf-file {gguf_file} not found in {model}")
            check_gguf(str(Path(model) / gguf_file))
            return cls(model, gguf_file)
        p = Path(model)
        if p.is_file() or (not p.exists() and model.lower().endswith(".gguf")):
            check_gguf(model)
            return cls(str(p.parent), p.name)
        if p.exists():
            check_hf_folder(model, "--model folder")
        elif not HUB_ID.fullmatch(model):
            raise ModelLoadError(f"model not found: {model} (give a Hugging Face folder, a "
                                 "GGUF file or a hub id such as org/name)")
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
    try:
        tok = AutoTokenizer.from_pretrained(src.path, **kw)
    except OSError as exc:
        raise _load_failed(src.name, exc) from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not getattr(tok, "chat_template", None):
        raise ModelLoadError(f"{src.name} has no chat template; use an instruct model")
    return tok


# Written into `complete` by the loader that filled a cache folder; a folder made by another
# (older) loader is rebuilt, since its tokenizer may lack the GGUF's pre-tokenizer.
CACHE_FORMAT = "quantize.hfio/1"


def materialize(src: ModelSource) -> str:
    """An HF directory holding the base model's weights (a GGUF is dequantized once, cached).

    The GGUF goes through `quantize.hfio.load_causal_lm`, the one GGUF -> transformers loader
    (shared with `rmjudge-export`): it also gives the tokenizer the pre-tokenizer the GGUF
    names, so training tokenizes as llama.cpp does at inference.
    """
    if not src.gguf_file:
        return src.path
    from rmjudge.quantize.hfio import load_causal_lm
    from rmjudge.models.checks import file_sha256
    from rmjudge.files import save_folder, write_file

    gguf_path = str(Path(src.path) / src.gguf_file)
    out = cache_root() / file_sha256(gguf_path)[:16]
    done = out / "complete"
    if (out / "config.json").exists() and done.exists() and done.read_text().strip() == CACHE_FORMAT:
        return str(out)
    model, tokenizer = load_causal_lm(gguf_path, "float32")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # built beside its place and moved in whole, `complete` last (a folder an older version
    # left half-written is replaced)
    save_folder(str(out), functools.partial(model.save_pretrained, safe_serialization=True),
                tokenizer.save_pretrained,
                lambda d: write_file(os.path.join(d, "source.txt"), (gguf_path + "\n").encode()),
                lambda d: write_file(os.path.join(d, "complete"), (CACHE_FORMAT + "\n").encode()))
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
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kw)
    except OSError as exc:
        raise _load_failed(path, exc) from None
    if quantization == "none" and cuda and device_map is None:
        model = model.to("cuda")
    return model


DEFAULT_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"  # --target-modules


def check_target_modules(model, s) -> None:
    """A `--target-modules` name that matches no module of `model` (a typo, another family's
    naming) is one error listing the model's linear modules, not peft's traceback."""
    t = s.target_modules.strip()
    if t == "all-linear":
        return
    import torch

    linear = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                     if isinstance(m, torch.nn.Linear)})
    names = [name for name, _ in model.named_modules()]
    # peft's rule for a list of names: a module's full name is the target or ends in ".target"
    missing = [x for x in (x.strip() for x in t.split(",")) if x and not any(
        n == x or n.endswith("." + x) for n in names)]
    if missing:
        raise ModelLoadError(f"--target-modules {', '.join(missing)}: no such module in the "
                             f"model; its linear modules are {', '.join(linear)} (or give "
                             "all-linear)")


def lora_config(s):
    """The PEFT `LoraConfig` of a training run's settings (`GRPOSettings`, `SFTSettings`):
    `lora_r`, `lora_alpha`, `lora_dropout`, and `target_modules` (comma-separated module names,
    or all-linear)."""
    from peft import LoraConfig

    t = s.target_modules.strip()
    targets = t if t == "all-linear" else [x.strip() for x in t.split(",") if x.strip()]
    if not targets:
        raise ModelLoadError("--target-modules is empty: give comma-separated module names "
                             f"(default {DEFAULT_TARGETS}) or all-linear")
    return LoraConfig(r=s.lora_r, lora_alpha=s.lora_alpha, lora_dropout=s.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM", bias="none")


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


def left_pad(rows: list[list[int]], pad_id: int):
    """(input_ids, attention_mask) tensors of token rows, padded on the left for generation."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


def _generate(model, tokenizer, prompts: list[Sequence[Message]],
              **gen) -> tuple[list[str], list[str]]:
    import torch

    from rmjudge.training.tokens import encode_prompt

    ids, mask = left_pad([encode_prompt(tokenizer, p) for p in prompts], tokenizer.pad_token_id)
    with torch.no_grad():
        out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                             pad_token_id=tokenizer.pad_token_id, stop_strings=list(STOP),
                             tokenizer=tokenizer, **gen)
    new = out[:, ids.shape[1]:]
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
    texts, finish = _generate(model, tokenizer, list(prompts), do_sample=True, temperature=temperature,
                              top_p=1.0, top_k=0, num_return_sequences=n,
                              max_new_tokens=max_tokens)
    return ([texts[i * n:(i + 1) * n] for i in range(len(prompts))],
            [finish[i * n:(i + 1) * n] for i in range(len(prompts))])


def greedy_completions(model, tokenizer, prompts: list[Sequence[Message]], max_tokens: int,
                       batch_size: int = 8, bf16: bool = False) -> list[str]:
    """One greedy completion per prompt (evaluation decoding, as in the paper); with `bf16`
    under bfloat16 autocast (training.precision)."""
    from rmjudge.training.precision import autocast

    out: list[str] = []
    with autocast(model, bf16):
        for start in range(0, len(prompts), batch_size):
            texts, _ = _generate(model, tokenizer, list(prompts[start:start + batch_size]),
                                 do_sample=False, max_new_tokens=max_tokens)
            out.extend(texts)
    return out
