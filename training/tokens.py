"""Token ids of judge prompts and targets for transformers, made the way the inference engine
makes them (rmjudge/engine/vocab.py `Tokenizer.encode_prompt`).

The prompt is the model's chat template around message contents that come from data. A Hugging
Face tokenizer called on the rendered text parses every special-token string it finds, so a
response that contains `<|im_end|>` would be fed to the model as the end-of-turn control token,
while llama.cpp at inference reads it as plain text. Here the prompt is split with
`rmjudge.engine.chat.ChatTemplate.segments` into template pieces (tokenized with special-token
parsing) and data pieces (tokenized with `split_special_tokens=True`: control-token strings stay
text), exactly as the engine does; targets are data too.
"""

from __future__ import annotations

from typing import Sequence

from rmjudge.engine.chat import ChatTemplate
from rmjudge.prompts import ASSISTANT_PREFIX
from rmjudge.core.types import Message


def adds_bos(tokenizer) -> bool:
    """Whether the tokenizer puts BOS in front of a plain encode (llama.cpp's add_bos)."""
    if tokenizer.bos_token_id is None:
        return False
    probe = tokenizer("a").input_ids
    return bool(probe) and probe[0] == tokenizer.bos_token_id


def chat_template(tokenizer) -> ChatTemplate:
    return ChatTemplate(getattr(tokenizer, "chat_template", None), tokenizer.bos_token or "",
                        tokenizer.eos_token or "")


def encode_text(tokenizer, text: str, special: bool) -> list[int]:
    """Ids of `text` without BOS/EOS; `special=False` keeps control-token strings as text."""
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False,
                          split_special_tokens=not special).input_ids)


def encode_prompt(tokenizer, messages: Sequence[Message],
                  assistant_prefix: str = ASSISTANT_PREFIX) -> list[int]:
    """Ids of a chat prompt ending in `assistant_prefix`: template pieces parse special tokens,
    data pieces (message contents, the prefix) do not; BOS as llama.cpp adds it."""
    pieces = chat_template(tokenizer).segments(messages, assistant_prefix)
    ids: list[int] = []
    bos = tokenizer.bos_token or ""
    if pieces and adds_bos(tokenizer) and not (bos and pieces[0][0].startswith(bos)):
        ids.append(tokenizer.bos_token_id)
    for text, is_template in pieces:
        ids += encode_text(tokenizer, text, special=is_template)
    return ids


def encode_target(tokenizer, completion: str, eos: bool = True) -> list[int]:
    """Ids of a training target (data: no special parsing), with the end-of-turn token."""
    ids = encode_text(tokenizer, completion, special=False)
    if eos and tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return ids
