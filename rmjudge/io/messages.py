"""Conversations in the shapes preference datasets use, normalized to `{role, content}` text.

- A prompt is a string (one user turn) or a list of messages ending in a user turn.
- A message's `content` is a string or OpenAI content parts (`[{"type": "text", "text": ...}]`),
  which are flattened to text; a part that is not text (an image) is refused.
- A response is a string, one message object `{role, content}`, or a conversation whose last
  turn is the assistant's answer.
- Two whole conversations (TRL implicit prompt, Chatbot Arena, HH-RLHF transcripts) are split by
  `split_conversations` into the shared history and the two answers.

Every problem is a `RowError` naming the field.
"""

from __future__ import annotations

import re
from typing import Any

from rmjudge.core.types import Message


class RowError(Exception):
    """This row cannot be judged; the message says why and how to fix it."""


def type_name(v: Any) -> str:
    return {int: "a number", float: "a number", bool: "a boolean", list: "a list",
            dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def content_text(content: Any, where: str) -> str:
    """A message's content as text: a string, or OpenAI content parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
                continue
            if not isinstance(part, dict):
                raise RowError(f"{where}: content part {j} must be an object, "
                               f"got {type_name(part)}")
            kind = part.get("type", "text")
            if kind != "text" or not isinstance(part.get("text"), str):
                raise RowError(f"{where}: content part {j} is {kind!r}, not text; rmjudge "
                               "judges text only")
            texts.append(part["text"])
        return "\n".join(texts)
    raise RowError(f"{where}: 'content' must be a string or a list of text parts, "
                   f"got {type_name(content)}")


def message(m: Any, where: str) -> Message:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str) or "content" not in m:
        raise RowError(f"{where} must be an object with string 'role' and 'content'")
    return {"role": m["role"], "content": content_text(m["content"], where)}


def conversation(value: Any, col: str) -> list[Message]:
    """A non-empty list of messages, normalized."""
    if not isinstance(value, list):
        raise RowError(f"field {col!r} must be a list of messages, got {type_name(value)}")
    if not value:
        raise RowError(f"field {col!r} is an empty list")
    return [message(m, f"field {col!r}: message {i}") for i, m in enumerate(value)]


def prompt_messages(value: Any, col: str) -> tuple[Message, ...]:
    """The conversation so far: a string (one user turn) or messages ending in a user turn."""
    if isinstance(value, str):
        if not value.strip():
            raise RowError(f"field {col!r} is empty")
        return ({"role": "user", "content": value},)
    if isinstance(value, list) and value:
        msgs = conversation(value, col)
        if msgs[-1]["role"] != "user":
            raise RowError(f"field {col!r}: the conversation must end with a user turn, "
                           f"not {msgs[-1]['role']!r}")
        return tuple(msgs)
    if isinstance(value, list):
        raise RowError(f"field {col!r} is an empty list")
    raise RowError(f"field {col!r} must be a string or a list of messages, got {type_name(value)}")


def response_text(value: Any, col: str, *, blank: bool = False) -> str:
    """A response: a string, a message object, or a conversation ending in the answer.
    `blank`: an empty or whitespace-only answer is a response too (benchmarks whose authors
    score such answers: `rmjudge bench`), not an empty field."""
    if isinstance(value, list) and value and isinstance(value[-1], dict):
        last = message(value[-1], f"field {col!r}: message {len(value) - 1}")
        if last["role"] not in ("assistant", "model", "gpt", "bot"):
            raise RowError(f"field {col!r}: the conversation must end with the assistant's "
                           f"answer, not a {last['role']!r} turn")
        value = last["content"]
    elif isinstance(value, dict):
        value = message(value, f"field {col!r}")["content"]
    if not isinstance(value, str):
        raise RowError(f"field {col!r} must be a string, got {type_name(value)}")
    if not value.strip() and not blank:
        raise RowError(f"field {col!r} is empty")
    return value


_ASSISTANT = "assistant"


def render_turns(turns: list[Message]) -> str:
    """An answer that spans several turns: the first answer, then each later turn with its role."""
    parts = [turns[0]["content"]]
    for m in turns[1:]:
        parts.append(f"{m['role'].capitalize()}: {m['content']}")
    return "\n\n".join(parts)


def split_conversations(conv_a: list[Message], conv_b: list[Message], col_a: str,
                        col_b: str) -> tuple[tuple[Message, ...], str, str]:
    """Two conversations sharing their prompt turns -> (history ending in a user turn, answer a,
    answer b). When earlier assistant turns differ too (multi-turn battles), each answer is the
    rest of its conversation from the first turn where they part, with the later turns written
    out (`render_turns`)."""
    for conv, col in ((conv_a, col_a), (conv_b, col_b)):
        if conv[-1]["role"] != _ASSISTANT:
            raise RowError(f"field {col!r}: the conversation must end with the assistant's "
                           f"answer, not a {conv[-1]['role']!r} turn")
    prompts_a = [m for m in conv_a if m["role"] != _ASSISTANT]
    prompts_b = [m for m in conv_b if m["role"] != _ASSISTANT]
    if prompts_a != prompts_b:
        i = next((i for i, (x, y) in enumerate(zip(prompts_a, prompts_b)) if x != y),
                 min(len(prompts_a), len(prompts_b)))
        raise RowError(f"fields {col_a!r} and {col_b!r} do not share their prompt turns "
                       f"(prompt turn {i + 1} differs); both must answer the same conversation")
    k = 0
    while k < min(len(conv_a), len(conv_b)) and conv_a[k] == conv_b[k]:
        k += 1
    while k > 0 and conv_a[k - 1]["role"] != "user":  # the history ends with a user turn
        k -= 1
    if k == 0:
        raise RowError(f"fields {col_a!r} and {col_b!r} have no user turn before the answers")
    rest_a, rest_b = conv_a[k:], conv_b[k:]
    for rest, col in ((rest_a, col_a), (rest_b, col_b)):
        if rest[0]["role"] != _ASSISTANT:
            raise RowError(f"field {col!r}: expected the assistant's answer after the user turn, "
                           f"got a {rest[0]['role']!r} turn")
        if not rest[-1]["content"].strip():
            raise RowError(f"field {col!r}: the assistant's answer is empty")
    return tuple(conv_a[:k]), render_turns(rest_a), render_turns(rest_b)


def truncate_at_turn(conv: list[Message], turn: int, col: str) -> list[Message]:
    """The conversation up to and including its `turn`-th assistant answer (1-based)."""
    seen = 0
    for i, m in enumerate(conv):
        if m["role"] == _ASSISTANT:
            seen += 1
            if seen == turn:
                return conv[: i + 1]
    raise RowError(f"field {col!r} has {seen} assistant turn(s); the row's turn is {turn}")


_HH_MARK = re.compile(r"\n\n(Human|Assistant):")


def is_transcript(value: Any) -> bool:
    """An Anthropic HH-RLHF transcript: '\\n\\nHuman: ...\\n\\nAssistant: ...'."""
    return isinstance(value, str) and ("\n\nHuman:" in value or value.startswith("Human:")) \
        and "\n\nAssistant:" in value


def parse_transcript(text: str, col: str) -> list[Message]:
    """An HH-RLHF transcript as messages (Human -> user, Assistant -> assistant)."""
    if text.startswith(("Human:", "Assistant:")):
        text = "\n\n" + text
    pieces = _HH_MARK.split(text)
    if pieces[0].strip():
        raise RowError(f"field {col!r}: the transcript must start with 'Human:', found "
                       f"{pieces[0].strip()[:40]!r} first")
    msgs = []
    for speaker, body in zip(pieces[1::2], pieces[2::2]):
        msgs.append({"role": "user" if speaker == "Human" else "assistant",
                     "content": body.strip()})
    if not msgs:
        raise RowError(f"field {col!r} holds no 'Human:'/'Assistant:' turns")
    return msgs
