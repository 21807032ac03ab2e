"""What a file's first bytes say about whose it is (read only)."""

from __future__ import annotations


def file_head(path: str, size: int) -> bytes | None:
    """The first `size` bytes of `path` (what tells whose file it is); None when it cannot be
    read."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return None


def is_duckdb_file(path: str) -> bool:
    """True when `path` is a DuckDB database file (its header carries `DUCK` at byte 8)."""
    head = file_head(path, 12)
    return head is not None and head[8:12] == b"DUCK"
