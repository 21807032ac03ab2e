"""Parity of exported GGUF files with the Hugging Face model they came from.

For a few fixed prompts (rendered with the model's chat template, judge prompts included),
the Hugging Face model's next-token logits at every position (computed in float32) are
compared with llama.cpp's (`llama_cpp.Llama(..., logits_all=True)`), fed the *same* token ids
so that tokenizer differences cannot hide or fake a weight problem. The tokenizers are then
compared on their own: llama.cpp's tokenization of each prompt text against Hugging Face's.

Per file: max |logit difference|, top-1 agreement (argmax equal), and mean KL(HF || GGUF) of
the next-token distributions. Each file is held to the thresholds of its type (`THRESHOLDS`,
read from general.file_type): unquantized files must match closely in logits; quantized ones
are held to top-1 agreement and KL. A base GGUF with a GGUF LoRA applied at run time is held to
the thresholds of the base file's type, against the merged model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmjudge.quantize.config import VerifyConfig
from rmjudge.models.gguf_header import read_gguf_header


@dataclass(frozen=True)
class Threshold:
    max_abs: float | None = None  # largest allowed |logit difference| (None: not checked)
    top1: float = 0.0  # smallest allowed top-1 agreement
    kl: float | None = None  # largest allowed mean KL (None: not checked)


# Bounds with headroom over what SmolLM2-135M measures (README, "Exporting a judge"); small
# models quantize worst, so larger judges sit well inside them.
THRESHOLDS: dict[str, Threshold] = {
    "ALL_F32": Threshold(max_abs=0.05, top1=0.99, kl=1e-4),
    "MOSTLY_F16": Threshold(max_abs=0.5, top1=0.97, kl=1e-3),
    "MOSTLY_BF16": Threshold(max_abs=2.0, top1=0.93, kl=1e-2),
    "MOSTLY_Q8_0": Threshold(top1=0.93, kl=0.02),
    "MOSTLY_Q6_K": Threshold(top1=0.90, kl=0.05),
    "MOSTLY_Q5_K_M": Threshold(top1=0.80, kl=0.25),
    "MOSTLY_Q4_K_M": Threshold(top1=0.80, kl=0.25),
    "MOSTLY_Q4_0": Threshold(top1=0.60, kl=0.75),
}

DEFAULT_PROMPTS: tuple[str, ...] = (
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that returns the 10th Fibonacci number, 55.",
    "Which is larger, 9.11 or 9.9? Think step by step.",
)


@dataclass
class ParityRow:
    label: str
    file_type: str
    positions: int
    max_abs: float
    top1: float
    kl: float
    tokens_match: bool
    threshold: Threshold
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def file_type_name(path: str) -> str:
    import gguf

    value = read_gguf_header(path, tensors=False).get("general.file_type")
    if not isinstance(value, int):
        return "UNKNOWN"
    try:
        return gguf.LlamaFileType(value).name
    except ValueError:
        return f"FTYPE_{value}"


def _prompt_texts(tokenizer, prompts: tuple[str, ...]) -> list[str]:
    """Chat-rendered prompts; the defaults also get a judge prompt as `rmjudge score` builds it."""
    from rmjudge.prompts import ASSISTANT_PREFIX, pref_messages

    convs = [[{"role": "user", "content": p}] for p in (prompts or DEFAULT_PROMPTS)]
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
             for c in convs]
    if prompts:
        return texts
    # a judge prompt as `rmjudge score` builds it, generation primed with the analysis tag
    judge = pref_messages(({"role": "user", "content": "What is 12 * 12?"},),
                          "12 * 12 = 144.", "It is 124.")
    texts.append(tokenizer.apply_chat_template(list(judge), tokenize=False,
                                               add_generation_prompt=True) + ASSISTANT_PREFIX)
    return texts


def reference_logits(hf_dir: str, prompts: tuple[str, ...]):
    """(texts, token ids, float32 logits per prompt) from the Hugging Face model."""
    import torch

    from rmjudge.quantize.hfio import load_causal_lm

    model, tokenizer = load_causal_lm(hf_dir, "float32")
    texts = _prompt_texts(tokenizer, prompts)
    ids, logits = [], []
    with torch.no_grad():
        for text in texts:
            toks = tokenizer(text, add_special_tokens=False)["input_ids"]
            if tokenizer.bos_token_id is not None and _adds_bos(tokenizer) and (
                    not toks or toks[0] != tokenizer.bos_token_id):
                toks = [tokenizer.bos_token_id] + toks
            ids.append(toks)
            logits.append(model(torch.tensor([toks])).logits[0].float().numpy())
    del model
    return texts, ids, logits, tokenizer


def _adds_bos(tokenizer) -> bool:
    probe = tokenizer("a")["input_ids"]
    return bool(probe) and probe[0] == tokenizer.bos_token_id


def gguf_logits(path: str, ids: list[list[int]], texts: list[str], lora: str | None = None,
                lora_scale: float = 1.0, threads: int = 0):
    """(logits per prompt, llama.cpp's tokenization of each text) for a GGUF (+ LoRA)."""
    import os

    import llama_cpp

    from rmjudge.models.llamacpp import plain_weight_buffers

    n_ctx = max(len(t) for t in ids) + 8
    with plain_weight_buffers():  # llama.cpp's AMX kernels crash on some Xeons
        llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=n_ctx, n_batch=n_ctx,
                              n_threads=threads or os.cpu_count(), lora_path=lora,
                              lora_scale=lora_scale, verbose=False)
    try:
        out, toks = [], []
        for seq, text in zip(ids, texts):
            llm.reset()
            llm.eval(seq)
            out.append(np.array(llm.scores[:len(seq)], dtype=np.float32))
            toks.append(llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))
        return out, toks
    finally:
        llm.close()


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare(ref: list[np.ndarray], got: list[np.ndarray]) -> tuple[float, float, float, int]:
    """(max abs diff, top-1 agreement, mean KL(ref || got), positions)."""
    r = np.concatenate(ref)
    g = np.concatenate(got)
    lr, lg = _log_softmax(r), _log_softmax(g)
    kl = (np.exp(lr) * (lr - lg)).sum(axis=-1)
    return (float(np.abs(r - g).max()), float((r.argmax(-1) == g.argmax(-1)).mean()),
            float(kl.mean()), int(r.shape[0]))


def _judge(row: ParityRow) -> ParityRow:
    t = row.threshold
    if t.max_abs is not None and row.max_abs > t.max_abs:
        row.failures.append(f"max |diff| {row.max_abs:.4g} > {t.max_abs}")
    if row.top1 < t.top1:
        row.failures.append(f"top-1 {row.top1:.3f} < {t.top1}")
    if t.kl is not None and row.kl > t.kl:
        row.failures.append(f"KL {row.kl:.4g} > {t.kl}")
    if not row.tokens_match:
        row.failures.append("llama.cpp tokenizes the prompts differently from Hugging Face")
    return row


def verify(cfg: VerifyConfig) -> list[ParityRow]:
    texts, ids, ref, tokenizer = reference_logits(cfg.hf_dir, cfg.prompts)
    jobs: list[tuple[str, str, str | None]] = [(Path(g).name, g, None) for g in cfg.ggufs]
    if cfg.lora:
        jobs.append((f"{Path(cfg.base_gguf).name} + {Path(cfg.lora).name}", cfg.base_gguf,
                     cfg.lora))
    rows = []
    for label, path, lora in jobs:
        got, toks = gguf_logits(path, ids, texts, lora, cfg.lora_scale, cfg.threads)
        hf_toks = [tokenizer(t, add_special_tokens=True)["input_ids"] for t in texts]
        ftype = file_type_name(path)
        max_abs, top1, kl, n = compare(ref, got)
        rows.append(_judge(ParityRow(
            label=label, file_type=ftype, positions=n, max_abs=max_abs, top1=top1, kl=kl,
            tokens_match=all(list(a) == list(b) for a, b in zip(toks, hf_toks)),
            threshold=THRESHOLDS.get(ftype, Threshold(top1=0.5)))))
    return rows


def format_table(rows: list[ParityRow]) -> str:
    head = ("| file | type | positions | max abs diff | top-1 | mean KL | tokens | result |\n"
            "|---|---|---:|---:|---:|---:|---|---|")
    lines = [head]
    for r in rows:
        lines.append(f"| {r.label} | {r.file_type.removeprefix('MOSTLY_')} | {r.positions} | "
                     f"{r.max_abs:.4f} | {r.top1:.3f} | {r.kl:.5f} | "
                     f"{'same' if r.tokens_match else 'differ'} | "
                     f"{'ok' if r.ok else 'FAIL: ' + '; '.join(r.failures)} |")
    return "\n".join(lines)
