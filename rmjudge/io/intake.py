"""Intake: raw input rows -> `Pair`s to judge, or `RowFailure`s to record. One way, for every
command that reads pairs (`score`, `eval` on unjudged input, `--dry-run`, `ray-score` workers,
`merge --input`, `rmjudge-train build-data`; opened by `rmjudge.runs.setup.open_input`).

In order, for each row: the `--limit` cut, unreadable rows (the reader's reason), mapping
(`Mapper.to_pair`: shape, `--map`, ids, gold labels), the `--shard` filter (by pair id, or by
row number for rows without one), duplicate ids (the first occurrence wins) and pairs already
judged (skipped on resume).

A pair judged before is skipped only when it is the same pair: its content hash
(`Pair.content_hash`) matches the one stored with its verdict. A row edited since it was judged
is a *changed row*: found by its id when the row carries one, and, for rows whose id is derived
from their content (so an edit gives a new id), by its row number (the stored pair at that row
number has another id). A changed row is never judged again silently, nor stored a second time:
by default the intake stops with `ChangedRows`, naming the first changed rows; with
`rejudge_changed` it yields the pair again, and `replaces` names the stored pair its verdict
replaces (the store drops that pair in the transaction that commits the new verdict). A judged
row that cannot be judged any more (now unreadable or incomplete: an error row), and an id-less
row edited so that its new id falls in another `--shard`, are changed rows too; with
`rejudge_changed` their old pairs go to `dropped`, to be removed.

Ids are compared as given, code point by code point: two ids that differ only in Unicode
normalisation (`é` as one code point, NFC, or as `e` and a combining accent, NFD) are two ids,
both judged and kept (a caller joins results back on the ids it gave), and `lookalikes` counts
them so the run's summary warns (docs/inputs.md#ids).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping


from rmjudge.core import jsontext
from rmjudge.core.errors import UserError
from rmjudge.io.mapping import Mapper, RowError
from rmjudge.io.readers import RAW_LIMIT, RawRow
from rmjudge.core.types import Pair


@dataclass(frozen=True)
class RowFailure:
    """An input row that cannot be judged, with the reason a person can act on."""

    row_number: int
    reason: str
    raw: str | None = None
    id: str | None = None
    duplicate_of: int | None = None  # a duplicate id: the row that gave it first

    @classmethod
    def unjudged(cls, pair: Pair, reason: str) -> "RowFailure":
        """A pair the judge could not judge (`rmjudge.judging.judge.Failure`), as an error row."""
        return cls(pair.row_number, f"row {pair.row_number}: {reason}", None, pair.id)

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


def checked_rows(source: str, mapper: Mapper, limit: int | None = None,
                 fmt: str | None = None) -> Iterator[RawRow]:
    """The raw rows of `source` (of format `fmt`, when known); labels that need
    `--label-values` stop here, before anything is judged (`check_labels` over the first rows,
    at most `limit`), unless the mapper reads no labels (`read_labels=False`: merge's input
    check of shards that recorded no label options)."""
    from rmjudge.io.mapping import check_labels
    from rmjudge.io.readers import read_rows

    rows = read_rows(source, fmt=fmt)
    if not mapper.read_labels:
        return rows
    return check_labels(mapper, rows, source, **({"max_rows": limit} if limit else {}))


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
    fingerprint = hashlib.blake2b(blob, digest_size=16).hexdigest()
    if not isinstance(source, str):  # rows held in Python (rmjudge.io.memory): no path
        return {"source": str(source), "fingerprint": fingerprint}
    name = source if source == "-" or "://" in source else os.path.abspath(source)
    return {"source": name, "fingerprint": fingerprint, **(resolved_revision(source) or {})}


class ChangedRows(UserError):
    """Rows judged before hold other content now (see the module docstring)."""

    def __init__(self, rows: list[int], more: bool):
        self.rows = rows
        self.more = more
        shown = ", ".join(str(r) for r in rows) + (" and maybe more" if more else "")
        super().__init__(f"rows changed since they were judged: {shown}")


# After the first changed row, how many more rows are read to name a few others.
CHANGED_SCAN_ROWS = 10_000
CHANGED_SHOWN = 5


class Intake:
    """Iterate `Pair | RowFailure` over raw rows; counts what it read and skipped.

    `judged`: {pair id: (row number, content hash or None)} of the pairs an earlier run stored
    (resume); `done`: ids to skip unchecked, for callers without hashes."""

    def __init__(self, rows: Iterable[RawRow], mapper: Mapper, *,
                 shard: tuple[int, int] | None = None, limit: int | None = None,
                 done: set[str] | frozenset[str] = frozenset(),
                 judged: Mapping[str, tuple[int, str | None]] | None = None,
                 rejudge_changed: bool = False):
        self.rows = rows
        self.mapper = mapper
        self.shard = shard
        self.limit = limit
        self.judged: dict[str, tuple[int, str | None]] = dict(judged or {})
        self.judged.update((i, (0, None)) for i in done if i not in self.judged)
        self._at_row = {rn: pid for pid, (rn, _) in self.judged.items() if rn}
        self.rejudge_changed = rejudge_changed
        self.replaces: dict[str, str] = {}  # pair id yielded -> stored pair id it replaces
        self.dropped: list[str] = []  # stored pairs of changed rows now judged in another shard
        self.changed: list[int] = []  # row numbers of changed rows met
        self.rows_read = 0
        self.skipped = 0  # already judged (resume)
        self.failures = 0
        self.labelled = 0  # pairs yielded with a gold label
        self.pairs = 0  # pairs yielded
        self._forms: dict[str, tuple[str, int]] = {}  # NFC form -> first (id, row) of that form
        self.lookalikes = 0  # ids that differ from an earlier one only in normalisation
        self.lookalike_example: tuple[int, str, int, str] | None = None  # row, id, first's

    def _stored_version(self, pair: Pair, obj: dict) -> tuple[str | None, bool]:
        """(id of the stored pair this one was judged as, whether that stored pair is the same
        content); (None, False) for a pair never judged."""
        stored = self.judged.get(pair.id)
        if stored is not None:
            return pair.id, stored[1] is None or stored[1] == pair.content_hash()
        other = self._at_row.get(pair.row_number)
        if other is None or other not in self.judged or self.mapper.id_column(obj) is not None:
            return None, False
        return other, False  # an id-less row: its id is its content, so an edit changed it

    def __iter__(self) -> Iterator[Pair | RowFailure]:
        seen: dict[str, int] = {}
        scan_left: int | None = None  # refusing: rows still read to name more changed rows
        cut = False  # stopped looking for changed rows before the end of the input
        for raw in self.rows:
            if self.limit is not None and self.rows_read >= self.limit:
                break
            self.rows_read += 1
            if scan_left is not None:
                if scan_left == 0 or len(self.changed) >= CHANGED_SHOWN:
                    cut = True
                    break
                scan_left -= 1
                self._scan(raw, seen)
                continue
            rn = raw.row_number
            if raw.obj is None:
                if self._drop_stale(rn, self._stale_failure(raw)):
                    scan_left = CHANGED_SCAN_ROWS
                    continue
                if in_shard(f"row:{rn}", self.shard):
                    self.failures += 1
                    yield RowFailure(rn, raw.error or f"row {rn} is unreadable", raw.raw)
                continue
            try:
                pair = self.mapper.to_pair(rn, raw.obj)
            except RowError as exc:
                if self._drop_stale(rn, self._stale_failure(raw)):
                    scan_left = CHANGED_SCAN_ROWS
                    continue
                if in_shard(f"row:{rn}", self.shard):
                    v = raw.obj.get("id")
                    self.failures += 1
                    yield RowFailure(rn, f"row {rn}: {exc}", raw_text(raw.obj),
                                     None if v is None else str(v))
                continue
            if not in_shard(pair.id, self.shard):
                # an id-less row edited into another shard: its old pair here is stale
                old, _ = self._stored_version(pair, raw.obj) if self.judged else (None, False)
                if self._drop_stale(rn, old if old != pair.id else None):
                    scan_left = CHANGED_SCAN_ROWS
                continue
            if pair.id in seen:
                self.failures += 1
                yield RowFailure(rn, duplicate_reason(rn, pair.id, seen[pair.id]),
                                 raw_text(raw.obj), pair.id, duplicate_of=seen[pair.id])
                continue
            seen[pair.id] = rn
            if not pair.id.isascii():
                self._note_lookalike(pair.id, rn)
            old, same = self._stored_version(pair, raw.obj) if self.judged else (None, False)
            if old is not None and same:
                self.skipped += 1
                continue
            if old is not None:
                self.changed.append(rn)
                if not self.rejudge_changed:
                    scan_left = CHANGED_SCAN_ROWS
                    continue
                self.replaces[pair.id] = old
                del self.judged[old]  # met again further on, it is judged again, not skipped
            self.pairs += 1
            self.labelled += pair.label is not None
            yield pair
        if scan_left is not None:
            raise ChangedRows(self.changed[:CHANGED_SHOWN],
                              more=cut or len(self.changed) > CHANGED_SHOWN)

    def _note_lookalike(self, pid: str, rn: int) -> None:
        """Count `pid` when an earlier row's id differs from it only in Unicode normalisation
        (see the module docstring)."""
        import unicodedata

        first = self._forms.setdefault(unicodedata.normalize("NFC", pid), (pid, rn))
        if first[0] != pid:
            self.lookalikes += 1
            if self.lookalike_example is None:
                self.lookalike_example = (rn, pid, first[1], first[0])

    def lookalike_note(self) -> str | None:
        """The summary's warning about ids that look alike (None when there are none)."""
        if self.lookalike_example is None:
            return None
        rn, pid, first_row, first = self.lookalike_example
        n = self.lookalikes
        return (f"warning: {n} id{'s' if n != 1 else ''} {'differ' if n != 1 else 'differs'} "
                f"from an earlier row's id only in Unicode normalisation (NFC/NFD), e.g. row "
                f"{rn}'s {ascii(pid)} and row {first_row}'s {ascii(first)}: they look alike "
                "but are kept as two pairs (docs/inputs.md#ids)")

    def _stale_failure(self, raw: RawRow) -> str | None:
        """The stored pair that a row which cannot be judged now was judged as: by the row's id
        when it has one, else by row number; None when there is none."""
        if not self.judged:
            return None
        try:
            found = self.mapper.id_column(raw.obj) if raw.obj is not None else None
        except RowError:
            found = None
        if found is not None:
            return found[1] if found[1] in self.judged else None
        other = self._at_row.get(raw.row_number)
        return other if other in self.judged else None

    def _drop_stale(self, rn: int, old: str | None) -> bool:
        """A changed row whose stored pair `old` is not replaced here (the row cannot be judged
        now, or another shard judges it): True when the intake must refuse; with
        `rejudge_changed`, `old` goes to `dropped`."""
        if old is None:
            return False
        self.changed.append(rn)
        if not self.rejudge_changed:
            return True
        self.dropped.append(old)
        del self.judged[old]
        return False

    def _scan(self, raw: RawRow, seen: dict[str, int]) -> None:
        """Only look for more changed rows (the intake is refusing)."""
        if raw.obj is None:
            if self._stale_failure(raw) is not None:
                self.changed.append(raw.row_number)
            return
        try:
            pair = self.mapper.to_pair(raw.row_number, raw.obj)
        except RowError:
            if self._stale_failure(raw) is not None:
                self.changed.append(raw.row_number)
            return
        old, same = self._stored_version(pair, raw.obj)
        if not in_shard(pair.id, self.shard):
            if old is not None and old != pair.id:
                self.changed.append(raw.row_number)
            return
        if pair.id in seen:
            return
        seen[pair.id] = raw.row_number
        if old is not None and not same:
            self.changed.append(raw.row_number)
