"""JSON text for values read from user data, which may be anything a reader produces: nested
past orjson's depth limit, maps with non-string keys, integers beyond 64 bits, decimals, UUIDs,
intervals, bytes. Never raises: what JSON cannot hold becomes text."""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTS = orjson.OPT_NON_STR_KEYS


def _default(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", errors="replace")
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def dumps(v: Any, sort_keys: bool = False) -> str:
    """`v` as JSON text; values JSON has no type for become strings."""
    try:
        return orjson.dumps(v, default=_default,
                            option=_OPTS | (orjson.OPT_SORT_KEYS if sort_keys else 0)).decode()
    except (TypeError, orjson.JSONEncodeError):  # too deep, or an integer beyond 64 bits
        try:
            return json.dumps(v, default=_default, sort_keys=sort_keys, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            return json.dumps(repr(v)[:100_000])


def text(v: Any) -> str:
    """A scalar as plain text (strings as they are, other scalars by their str), anything nested
    as JSON text."""
    if isinstance(v, str):
        return v
    if isinstance(v, (list, dict, tuple)):
        return dumps(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", errors="replace")
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if hasattr(v, "isoformat"):  # dates and times in ISO 8601, as JSON writes them
        return v.isoformat()
    return str(v)
