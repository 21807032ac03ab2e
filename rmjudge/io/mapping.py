"""Turn raw input rows into validated `Pair`s: shape recognition, `--map`, ids, gold labels.

Recognized without options:
- `{prompt, chosen, rejected}` (gold label: chosen). Which of the two sits in slot A is drawn
  from the seed and the pair id, so neither the judge nor a reader of the output can rely on
  "chosen comes first".
- `{prompt|question|instruction|input|query, response_a, response_b, label|winner|preference}`
  with labels A/B, 1/2, "A>B"/"B>A" (anything else, such as "tie", is kept unlabelled).
- chat-format prompts: a list of `{role, content}` messages (the history, ending in a user
  turn), and TRL's implicit-prompt form where `chosen`/`rejected` are whole conversations.
`--map prompt=question,a=resp1,b=resp2,label=pref,id=uid` (or `chosen=`/`rejected=`) names
columns explicitly. Columns not used pass through to the output.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from rmjudge.types import Message, Pair

PROMPT_KEYS = ("prompt", "question", "instruction", "input", "query", "messages", "conversation")
A_KEYS = ("response_a", "response_1", "output_a", "output_1", "answer_a", "completion_a")
B_KEYS = ("response_b", "response_2", "output_b", "output_2", "answer_b", "completion_b")
LABEL_KEYS = ("label", "winner", "preference", "preferred")
MAP_KEYS = ("prompt", "a", "b", "chosen", "rejected", "label", "id")

_LABELS = {
    "a": "A", "1": "A", "a>b": "A", "b<a": "A", "response_a": "A", "model_a": "A",
    "b": "B", "2": "B", "b>a": "B", "a<b": "B", "response_b": "B", "model_b": "B",
}


class RowError(Exception):
    """This row cannot be judged; the message says why and how to fix it."""


def parse_map(spec: str | None) -> dict[str, str]:
    """'prompt=question,a=x,b=y' -> {'prompt': 'question', 'a': 'x', 'b': 'y'}."""
    out: dict[str, str] = {}
    if not spec:
        return out
    for part in spec.split(","):
        if not part.strip():
            continue
        key, sep, col = part.partition("=")
        key, col = key.strip(), col.strip()
        if not sep or not col:
            raise ValueError(f"--map entry {part!r} must look like key=column")
        if key not in MAP_KEYS:
            raise ValueError(f"--map key {key!r} is not one of {', '.join(MAP_KEYS)}")
        out[key] = col
    if ("a" in out or "b" in out) and ("chosen" in out or "rejected" in out):
        raise ValueError("--map takes either a=/b= (with label=) or chosen=/rejected=, not both")
    return out


def parse_label(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    key = str(value).strip().lower().replace(" ", "")
    return _LABELS.get(key)


def _type_name(v: Any) -> str:
    return {int: "a number", float: "a number", bool: "a boolean", list: "a list",
            dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def _messages(value: Any, col: str) -> tuple[Message, ...]:
    if isinstance(value, str):
        if not value.strip():
            raise RowError(f"field {col!r} is empty")
        return ({"role": "user", "content": value},)
    if isinstance(value, list) and value:
        msgs = []
        for i, m in enumerate(value):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) \
                    or not isinstance(m.get("role"), str):
                raise RowError(f"field {col!r}: message {i} must be an object with string "
                               "'role' and 'content'")
            msgs.append({"role": m["role"], "content": m["content"]})
        if msgs[-1]["role"] != "user":
            raise RowError(f"field {col!r}: the conversation must end with a user turn, "
                           f"not {msgs[-1]['role']!r}")
        return tuple(msgs)
    if isinstance(value, list):
        raise RowError(f"field {col!r} is an empty list")
    raise RowError(f"field {col!r} must be a string or a list of messages, got {_type_name(value)}")


def _response(value: Any, col: str) -> str:
    if isinstance(value, list) and value and isinstance(value[-1], dict):
        value = value[-1].get("content")  # a response given as [{"role": "assistant", ...}]
    if not isinstance(value, str):
        raise RowError(f"field {col!r} must be a string, got {_type_name(value)}")
    if not value.strip():
        raise RowError(f"field {col!r} is empty")
    return value


def content_id(messages: tuple[Message, ...], a: str, b: str) -> str:
    blob = orjson.dumps([list(messages), a, b])
    return hashlib.blake2b(blob, digest_size=12).hexdigest()


@dataclass
class Mapper:
    """Maps raw rows to Pairs. `seed` decides the slot of `chosen` in chosen/rejected data."""

    mapping: dict[str, str] = field(default_factory=dict)
    seed: int = 0

    def _find(self, obj: dict, role: str, candidates: tuple[str, ...]) -> str | None:
        if role in self.mapping:
            col = self.mapping[role]
            if col not in obj:
                raise RowError(f"column {col!r} (from --map {role}={col}) is missing; "
                               f"columns: {', '.join(map(str, obj)) or 'none'}")
            return col
        return next((k for k in candidates if k in obj), None)

    def to_pair(self, row_number: int, obj: dict[str, Any]) -> Pair:
        used: set[str] = set()
        chosen_col = self._find(obj, "chosen", ("chosen",))
        rejected_col = self._find(obj, "rejected", ("rejected",))
        a_col = self._find(obj, "a", A_KEYS)
        b_col = self._find(obj, "b", B_KEYS)
        prompt_col = self._find(obj, "prompt", PROMPT_KEYS)
        label: str | None = None
        if chosen_col and rejected_col and not (self.mapping.get("a") or self.mapping.get("b")):
            chosen, rejected = obj[chosen_col], obj[rejected_col]
            used |= {chosen_col, rejected_col}
            if prompt_col is None and isinstance(chosen, list) and len(chosen) >= 2:
                # TRL implicit prompt: chosen/rejected are whole conversations.
                messages = _messages(chosen[:-1], chosen_col)
            elif prompt_col is None:
                raise RowError(self._missing(obj, "a prompt column (prompt, question, "
                                             "instruction, ...)"))
            else:
                messages = _messages(obj[prompt_col], prompt_col)
                used.add(prompt_col)
            good = _response(chosen, chosen_col)
            bad = _response(rejected, rejected_col)
            pid = self._id(obj, messages, good, bad, used)
            from rmjudge.protocol import derive_seed

            if derive_seed(self.seed, pid, "slot") & 1:
                a, b, label = bad, good, "B"
            else:
                a, b, label = good, bad, "A"
        elif a_col and b_col:
            if prompt_col is None:
                raise RowError(self._missing(obj, "a prompt column (prompt, question, "
                                             "instruction, ...)"))
            messages = _messages(obj[prompt_col], prompt_col)
            a = _response(obj[a_col], a_col)
            b = _response(obj[b_col], b_col)
            used |= {prompt_col, a_col, b_col}
            label_col = self._find(obj, "label", LABEL_KEYS)
            if label_col is not None:
                label = parse_label(obj[label_col])
                used.add(label_col)
            pid = self._id(obj, messages, a, b, used)
        else:
            raise RowError(self._missing(obj, "two responses (chosen/rejected or "
                                         "response_a/response_b)"))
        extra = {k: v for k, v in obj.items() if k not in used}
        return Pair(pid, row_number, messages, a, b, label, extra)  # type: ignore[arg-type]

    def _id(self, obj: dict, messages, a: str, b: str, used: set[str]) -> str:
        col = self.mapping.get("id", "id")
        if col in obj and obj[col] is not None and str(obj[col]).strip():
            used.add(col)
            return str(obj[col])
        return content_id(messages, a, b)

    @staticmethod
    def _missing(obj: dict, what: str) -> str:
        cols = ", ".join(map(str, obj)) or "none"
        return f"no {what} found; columns: {cols}; name them with --map (e.g. --map prompt=q,a=x,b=y)"
