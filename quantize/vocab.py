"""The tokenizer in GGUF metadata: byte-level BPE vocabularies (GPT-2 style: SmolLM2, Qwen).

Tokens come from the Hugging Face tokenizer (`get_vocab`, its added tokens), padded to the
model's `vocab_size` with unused placeholders; added tokens are CONTROL when special and
USER_DEFINED otherwise. Merges, special token ids and the chat template are written by the
`gguf` library's `SpecialVocab`; whether BOS/EOS are added is measured on the Hugging Face
tokenizer itself rather than read from a config flag that may be absent.

llama.cpp needs the name of the pre-tokenizer (`tokenizer.ggml.pre`), the regex split applied
before BPE. It is detected from tokenizer.json's pre_tokenizer for the families supported;
anything else must be named with `--pre-tokenizer`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rmjudge.quantize.config import ExportError

# pre-tokenizer regexes as they appear in tokenizer.json -> llama.cpp pre-tokenizer name
_SPLIT_PATTERNS = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
}


def detect_pre_tokenizer(tokenizer_json: dict[str, Any]) -> str:
    """llama.cpp's name for the pre-tokenizer in a tokenizer.json, or raise ExportError."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [p.get("type") for p in parts]
    if kinds == ["ByteLevel"] and parts[0].get("use_regex", True):
        return "gpt-2"
    if (kinds == ["Digits", "ByteLevel"] and parts[0].get("individual_digits")
            and parts[1].get("use_regex", True)):
        return "smollm"
    if kinds and kinds[0] == "Split" and all(k == "ByteLevel" for k in kinds[1:]):
        pattern = (parts[0].get("pattern") or {}).get("Regex")
        if pattern in _SPLIT_PATTERNS:
            return _SPLIT_PATTERNS[pattern]
    raise ExportError(f"cannot tell llama.cpp's pre-tokenizer from tokenizer.json "
                      f"({json.dumps(pre)[:200]}): pass --pre-tokenizer NAME (e.g. qwen2, "
                      "llama-bpe, smollm, gpt-2)")


def write_vocab(writer, model_dir: str | Path, vocab_size: int,
                pre_tokenizer: str | None = None) -> dict[str, Any]:
    """Add tokenizer metadata to `writer`; returns a summary (pre-tokenizer, sizes)."""
    import gguf
    from transformers import AutoTokenizer

    model_dir = Path(model_dir)
    tj_path = model_dir / "tokenizer.json"
    if not tj_path.exists():
        raise ExportError(f"{model_dir} has no tokenizer.json: save the tokenizer with the model "
                          "(tokenizer.save_pretrained(folder))")
    tj = json.loads(tj_path.read_text(encoding="utf-8"))
    model = tj.get("model") or {}
    decoder = tj.get("decoder") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback") or decoder.get("type") != "ByteLevel":
        raise ExportError("only byte-level BPE tokenizers (GPT-2 style: SmolLM2, Qwen, Llama 3) "
                          "are supported by this exporter; use llama.cpp's convert_hf_to_gguf.py "
                          "for SentencePiece models")
    pre = pre_tokenizer or detect_pre_tokenizer(tj)

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = tok.get_vocab()
    reverse = {i: t for t, i in ids.items()}
    added = tok.added_tokens_decoder  # id -> AddedToken
    if reverse and max(reverse) >= vocab_size:
        raise ExportError(f"the tokenizer has token id {max(reverse)} but the model's vocab_size "
                          f"is {vocab_size}: tokenizer and model do not belong together")
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(added[i].content)
            types.append(gguf.TokenType.CONTROL if added[i].special
                         else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(reverse[i])
            types.append(gguf.TokenType.NORMAL)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)

    special = gguf.SpecialVocab(model_dir, load_merges=True, n_vocab=len(tokens))
    if not special.merges:
        raise ExportError(f"{tj_path} has no BPE merges")
    probe = tok("a b")["input_ids"]
    special.add_special_token["bos"] = bool(tok.bos_token_id is not None and probe
                                            and probe[0] == tok.bos_token_id)
    special.add_special_token["eos"] = bool(tok.eos_token_id is not None and probe
                                            and probe[-1] == tok.eos_token_id)
    if special.chat_template is None and getattr(tok, "chat_template", None):
        special.chat_template = tok.chat_template
    special.add_to_gguf(writer, quiet=True)
    return {"pre_tokenizer": pre, "tokens": len(tokens), "merges": len(special.merges),
            "chat_template": special.chat_template is not None}
