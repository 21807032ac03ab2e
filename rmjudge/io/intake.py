"""Intake: raw input rows -> `Pair`s to judge, or `RowFailure`s to record. One way, for every
command that reads pairs (`score`, `eval` on unjudged input, `--dry-run`, `ray-score` workers,
`merge --input`, `rmjudge-train build-data`).

In order, for each row: the `--limit` cut, unreadable rows (the reader's reason), mapping
(`Mapper.to_pair`: shape, `--map`, ids, gold labels), the `--shard` filter (by pair id, or by
row number for rows without one), duplicate ids (the first occurrence wins) and ids already
judged (skipped on resume).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Iterable, Iterator


from rmjudge import jsontext
from rmjudge.io.mapping import Mapper, RowError
from rmjudge.io.readers import RAW_LIMIT, RawRow
from rmjudge.types import Pair


@dataclass(frozen=True)
class RowFailure:
    """An input row that cannot be judged, with the reason a person can act on."""

    row_number: int
    reason: str
    raw: str | None = None
    id: str | None = None

    def as_error(self) -> dict:
        """The row of the store's `errors` table."""
        return {"row_number": self.row_number, "id": self.id, "reason": self.reason,
                "raw": self.raw}


def in_shard(key: str, shard: tuple[int, int] | None) -> bool:
    """Stable partition: shard (i, n) owns the keys whose hash is i modulo n."""
    if shard is None:
        return True
    i, n = shard
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % n == i


def raw_text(obj: dict | str | bytes) -> str:
    """An offending row as text for `errors.raw`, clipped to `RAW_LIMIT` characters."""
    if isinstance(obj, dict):
        obj = jsontext.dumps(obj)
    if isinstance(obj, bytes):
        obj = obj.decode("utf-8", errors="replace")
    return obj if len(obj) <= RAW_LIMIT else obj[:RAW_LIMIT] + "..."


def duplicate_reason(row_number: int, pid: str, first_row: int) -> str:
    return (f"row {row_number}: duplicate id {pid!r} (first seen on row {first_row}); give each "
            "pair a unique id")


def input_identity(source: str, first: RawRow | None) -> dict | None:
    """What identifies an input across resumes: its first readable row's content (so a moved,
    appended or recompressed copy of the same data resumes, a fixed unreadable row does not
    change it, and another file is refused). A Hub dataset adds the revision asked for and the
    commit it resolved to (`revision`, `commit`), so a moved revision is refused too."""
    if first is None:
        return None
    from rmjudge.io.huggingface import resolved_revision

    blob = jsontext.dumps(first.obj, sort_keys=True).encode() \
        if first.obj is not None else (first.raw or "").encode()
    name = source if source == "-" or "://" in source else os.path.abspath(source)
    return {"source": name, "fingerprint": hashlib.blake2b(blob, digest_size=16).hexdigest(),
            **(resolved_revision(source) or {})}


class Intake:
    """Iterate `Pair | RowFailure` over raw rows; counts what it read and skipped."""

    def __init__(self, rows: Iterable[RawRow], mapper: Mapper, *,
                 shard: tuple[int, int] | None = None, limit: int | None = None,
                 done: set[str] | frozenset[str] = frozenset()):
        self.rows = rows
        self.mapper = mapper
        self.shard = shard
        self.limit = limit
        self.done = done
        self.rows_read = 0
        self.skipped = 0  # already judged (resume)
        self.failures = 0
        self.labelled = 0  # pairs yielded with a gold label
        self.pairs = 0  # pairs yielded

    def __iter__(self) -> Iterator[Pair | RowFailure]:
        seen: dict[str, int] = {}
        for raw in self.rows:
            if self.limit is not None and self.rows_read >= self.limit:
                return
            self.rows_read += 1
            rn = raw.row_number
            if raw.obj is None:
                if in_shard(f"row:{rn}", self.shard):
                    self.failures += 1
                    yield RowFailure(rn, raw.error or f"row {rn} is unreadable", raw.raw)
                continue
            try:
                pair = self.mapper.to_pair(rn, raw.obj)
            except RowError as exc:
                if in_shard(f"row:{rn}", self.shard):
                    v = raw.obj.get("id")
                    self.failures += 1
                    yield RowFailure(rn, f"row {rn}: {exc}", raw_text(raw.obj),
                                     None if v is None else str(v))
                continue
            if not in_shard(pair.id, self.shard):
                continue
            if pair.id in seen:
                self.failures += 1
                yield RowFailure(rn, duplicate_reason(rn, pair.id, seen[pair.id]),
                                 raw_text(raw.obj), pair.id)
                continue
            seen[pair.id] = rn
            if pair.id in self.done:
                self.skipped += 1
                continue
            self.pairs += 1
            self.labelled += pair.label is not None
            yield pair
