"""Small JSON tables under the user's cache folder (~/.cache/rmjudge or $XDG_CACHE_HOME).

Used for the model-hash cache and measured throughput. Writes are atomic; a read-only or
missing cache only costs recomputation, never an error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def cache_path(name: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rmjudge" / name


def load(name: str) -> dict:
    try:
        table = json.loads(cache_path(name).read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def update(name: str, key: str, value) -> None:
    path = cache_path(name)
    table = load(name)
    table[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table))
        os.replace(tmp, path)
    except OSError:
        pass
