"""`rmjudge bench --check`: read a benchmark's published files as `bench` reads them and report
what it would judge (rows read, items, pairs), every row it refuses with the reason, and the
duplicate keys, per file and in all. Each pair also goes through the intake's own reading (the
`Mapper` a bench run uses), so a pair the run would record as an error row is counted too.
Nothing is judged or written and no model is loaded, so a local copy of the published
repository can be checked before a run."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

from rmjudge.bench.base import BenchError, Benchmark
from rmjudge.bench.runner import converted
from rmjudge.bench.sources import Published, read_file, read_published

EXAMPLES = 5  # duplicate keys shown per benchmark


@dataclass
class FileCheck:
    path: str
    rows: int = 0  # published rows read
    items: int = 0  # rows converted (items)
    pairs: int = 0  # intake rows (pairs judged; RM-Bench: 9 per item)
    refused: int = 0  # rows refused, duplicates included
    pairs_refused: int = 0  # pairs of converted rows that the intake would record as errors
    duplicates: int = 0
    error: str | None = None  # the file cannot be read at all

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CheckReport:
    name: str
    title: str
    source: str
    files: list[FileCheck] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)  # refusal reason -> rows
    first_at: dict[str, str] = field(default_factory=dict)  # reason -> "FILE row N"
    duplicate_keys: list[str] = field(default_factory=list)  # the first few, with where
    absent: list[str] = field(default_factory=list)  # published files the folder lacks

    def total(self, attr: str) -> int:
        return sum(getattr(f, attr) for f in self.files)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "source": self.source,
                **{k: self.total(k) for k in ("rows", "items", "pairs", "refused",
                                              "duplicates", "pairs_refused")},
                "files": [f.as_dict() for f in self.files],
                "refused_reasons": [{"reason": r, "rows": n, "first_at": self.first_at[r]}
                                    for r, n in self.reasons.most_common()],
                "duplicate_examples": self.duplicate_keys, "absent_files": self.absent}


def check(bench: Benchmark, source: str) -> CheckReport:
    """Read every published file of `bench` under `source` and count; a file that cannot be
    read at all (a Git LFS pointer, broken JSON) is reported and the others are still read."""
    from rmjudge.io.mapping import Mapper, RowError

    report = CheckReport(bench.name, bench.title, source)
    by_path: dict[str, FileCheck] = {}
    mapper = Mapper({}, blank_responses=True)  # the intake's reading of a bench run

    def rows() -> Iterator[Published]:
        if "://" not in source and not os.path.exists(source):
            yield from read_published(bench, source)  # the usual not-found error
        for path, fields in bench.files(source):
            by_path[path] = FileCheck(path)
            report.files.append(by_path[path])
            try:
                yield from read_file(path, fields)
            except BenchError as exc:
                by_path[path].error = str(exc)

    if "://" not in source and os.path.exists(source):
        report.absent = bench.absent(source)
    for c in converted(bench, source, rows()):
        f = by_path[c.published.file]
        f.rows += 1
        if c.rows:
            f.items += 1
            f.pairs += len(c.rows)
            for n, row in enumerate(c.rows, 1):
                try:
                    mapper.to_pair(n, row)
                except RowError as exc:
                    f.pairs_refused += 1
                    reason = f"pair refused by the intake: {exc}"
                    report.reasons[reason] += 1
                    report.first_at.setdefault(reason, f"{c.published.file} row "
                                                       f"{c.published.row_number}")
            continue
        f.refused += 1
        where = f"{c.published.file} row {c.published.row_number}"
        if c.duplicate:
            f.duplicates += 1
            if len(report.duplicate_keys) < EXAMPLES:
                report.duplicate_keys.append(f"{where}: {c.problem}")
            reason = "duplicate key"
        else:
            reason = c.problem or "unreadable row"
        report.reasons[reason] += 1
        report.first_at.setdefault(reason, where)
    return report


def render(report: CheckReport) -> str:
    lines = [f"{report.title}: {report.source}"]
    for f in report.files:
        if f.error:
            lines.append(f"  {f.path}: not read: {f.error}")
        else:
            lines.append(f"  {f.path}: {f.rows} rows read, {f.items} items ({f.pairs} pairs), "
                         f"{f.refused} refused, {f.duplicates} duplicate keys"
                         + (f", {f.pairs_refused} pairs refused by the intake"
                            if f.pairs_refused else ""))
    t = report.total
    lines.append(f"  in all: {t('rows')} rows read from {len(report.files)} file(s), "
                 f"{t('items')} items ({t('pairs')} pairs), {t('refused')} refused, "
                 f"{t('duplicates')} duplicate keys, {t('pairs_refused')} pairs refused by the "
                 "intake"
                 + (f", {sum(bool(f.error) for f in report.files)} file(s) not read"
                    if any(f.error for f in report.files) else ""))
    lines += [f"  absent: {path}" for path in report.absent]
    for reason, n in report.reasons.most_common():
        lines.append(f"  refused: {n} x {reason} (first: {report.first_at[reason]})")
    lines += [f"  duplicate: {d}" for d in report.duplicate_keys]
    return "\n".join(lines)
