"""The rollout cache: one JSONL line per item, appended as soon as the item's rollouts exist.

A crash or `kill -9` during data building loses at most the chunk in flight; a rerun reads the
cache and samples only the items it lacks. The first line records what produced the rollouts
(model sha256, samples, temperature, max tokens, seed, prompt suffix, prompt format): a rerun with different
rollout settings on the same cache is refused with the differences named, because mixing
rollouts of two settings would make the data silently inconsistent. A torn last line (the
process died mid-write) is ignored and that item is sampled again.
"""

from __future__ import annotations

from rmjudge.core.errors import UserError
from rmjudge.files import make_dir

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson


class CacheError(UserError):
    """The cache cannot be used as asked; the message says how to fix it."""


@dataclass
class CachedRollouts:
    """The rollouts of one item: texts after the assistant prefix, with their finish reasons."""

    texts: list[str]
    finish: list[str]
    error: str | None = None  # the item could not be sampled (e.g. too long for the context)


def check_cache_file(path: str | os.PathLike) -> None:
    """Refuse, before any rollout is generated, a cache path that holds something else than a
    rollout cache (it is appended to, never replaced)."""
    p = Path(path)
    if p.is_dir():
        raise CacheError(f"--cache {path} is a folder; give a file name")
    if not p.exists() or p.stat().st_size == 0:
        return
    try:
        with open(p, "rb") as f:
            head = f.readline()
        orjson.loads(head)["meta"]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        raise CacheError(f"{path} is not a rollout cache (no meta line); it is left untouched: "
                         "give another --cache path") from None


def _write_failed(path: Path, exc: OSError) -> UserError:
    """A write of the rollout cache that failed, as one error naming it (a DiskError, exit 4,
    for a full disk or a folder that cannot be written)."""
    from rmjudge.core.errors import DiskError
    from rmjudge.files import disk_error

    err = disk_error(str(path), exc)
    why = err.reason if err is not None else (exc.strerror or str(exc))
    msg = (f"cannot write the rollout cache {path}: {why}; free space or give a writable "
           "--cache, then rerun (the rollouts written so far are kept)")
    return DiskError(msg, path=str(path), reason=why) if err is not None else CacheError(msg)


class RolloutCache:
    def __init__(self, path: str | os.PathLike, meta: dict[str, Any]):
        self.path = Path(path)
        self.meta = meta
        self.items: dict[str, CachedRollouts] = {}
        self.torn_lines = 0
        if self.path.exists() and self.path.stat().st_size > 0:
            self._load()
        else:
            try:
                make_dir(str(self.path.parent))
                with open(self.path, "wb") as f:
                    f.write(orjson.dumps({"meta": meta}) + b"\n")
            except OSError as exc:
                raise _write_failed(self.path, exc) from None

    def _load(self) -> None:
        with open(self.path, "rb") as f:
            lines = f.read().split(b"\n")
        try:
            head = orjson.loads(lines[0])["meta"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise CacheError(f"{self.path} is not a rollout cache (no meta line); "
                             "give another --cache path") from None
        diff = {k: (head.get(k), v) for k, v in self.meta.items() if head.get(k) != v}
        if head.get("criteria") and "criteria" not in self.meta:  # prompted with criteria
            diff["criteria"] = (head["criteria"], None)
        if diff:
            named = "; ".join(f"{k}: cached {a!r}, now {b!r}" for k, (a, b) in diff.items())
            raise CacheError(f"the rollout cache {self.path} was made with other settings "
                             f"({named}); use another --cache path or delete it")
        for line in lines[1:]:
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
                self.items[rec["id"]] = CachedRollouts(rec["texts"], rec["finish"], rec.get("error"))
            except (orjson.JSONDecodeError, KeyError, TypeError):
                self.torn_lines += 1

    def __contains__(self, item_id: str) -> bool:
        return item_id in self.items

    def get(self, item_id: str) -> CachedRollouts:
        return self.items[item_id]

    def add_many(self, records: dict[str, CachedRollouts]) -> None:
        """Append records and flush them to disk before returning."""
        if not records:
            return
        blob = b"".join(
            orjson.dumps({"id": k, "texts": r.texts, "finish": r.finish, "error": r.error}) + b"\n"
            for k, r in records.items()
        )
        try:
            with open(self.path, "ab") as f:
                # A torn line from an earlier crash must not glue itself to the next record.
                if f.tell() > 0:
                    with open(self.path, "rb") as r:
                        r.seek(-1, os.SEEK_END)
                        if r.read(1) != b"\n":
                            f.write(b"\n")
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise _write_failed(self.path, exc) from None
        self.items.update(records)
