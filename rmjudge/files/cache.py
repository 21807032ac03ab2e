"""Small JSON tables under the user's cache folder (~/.cache/rmjudge or $XDG_CACHE_HOME).

Used for the model-hash cache and measured throughput. Writes are atomic; a read-only or
missing cache only costs recomputation, never an error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rmjudge.core.errors import UserError
from rmjudge.files.atomic import write_file
from rmjudge.files.folders import make_dir


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
        make_dir(str(path.parent))
        write_file(str(path), json.dumps(table).encode())
    except (OSError, UserError):  # a cache that cannot be written is only recomputed
        pass
