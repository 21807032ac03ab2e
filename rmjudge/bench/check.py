"""`rmjudge bench --check`: read a benchmark's published files as `bench` reads them and report
what it would judge, every row it refuses with the reason, and the duplicate keys, per file and
in all. Each item then goes through the reader its run uses: a pairwise benchmark's pairs
through the intake's own reading (the `Mapper` a bench run uses), a best-of-N benchmark's
prompts through `rmjudge rank`'s (its layout and candidate checks), so a row the run would
record as an error row is counted too, and a best-of-N prompt with repeated candidate texts is
named (rank compares each text once; one whose candidates are all the same is refused).
Nothing is judged or written and no model is loaded, so a local copy of the published
repository can be checked before a run."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

from rmjudge.bench.base import BenchError, Benchmark
from rmjudge.bench.runner import Converted, converted
from rmjudge.bench.sources import Published, read_file, read_published

EXAMPLES = 5  # duplicate keys shown per benchmark


@dataclass
class FileCheck:
    path: str
    rows: int = 0  # published rows read
    items: int = 0  # rows converted and readable (items; best-of-N: prompts)
    pairs: int = 0  # pairs judged (RM-Bench: 9 per item); best-of-N: comparisons
    refused: int = 0  # rows refused, duplicates and prompts rank refuses included
    pairs_refused: int = 0  # pairs of converted rows that the intake would record as errors
    duplicates: int = 0
    repeated: int = 0  # best-of-N prompts with repeated candidate texts
    error: str | None = None  # the file cannot be read at all

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CheckReport:
    name: str
    title: str
    source: str
    ranked: bool = False  # best-of-N: items are prompts, pairs are comparisons
    files: list[FileCheck] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)  # refusal reason -> rows
    first_at: dict[str, str] = field(default_factory=dict)  # reason -> "FILE row N"
    duplicate_keys: list[str] = field(default_factory=list)  # the first few, with where
    absent: list[str] = field(default_factory=list)  # published files the folder lacks
    repeated: list[dict[str, Any]] = field(default_factory=list)  # every such prompt

    def total(self, attr: str) -> int:
        return sum(getattr(f, attr) for f in self.files)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "source": self.source,
                "unit": "prompts" if self.ranked else "items",
                **{k: self.total(k) for k in ("rows", "items", "pairs", "refused",
                                              "duplicates", "pairs_refused", "repeated")},
                "files": [f.as_dict() for f in self.files],
                "refused_reasons": [{"reason": r, "rows": n, "first_at": self.first_at[r]}
                                    for r, n in self.reasons.most_common()],
                "duplicate_examples": self.duplicate_keys, "absent_files": self.absent,
                "repeated_candidates": self.repeated}

    def refuse(self, reason: str, where: str) -> None:
        self.reasons[reason] += 1
        self.first_at.setdefault(reason, where)


def check(bench: Benchmark, source: str) -> CheckReport:
    """Read every published file of `bench` under `source` and count; a file that cannot be
    read at all (a Git LFS pointer, broken JSON) is reported and the others are still read."""
    report = CheckReport(bench.name, bench.title, source, ranked=bench.ranked)
    by_path: dict[str, FileCheck] = {}

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
    read = _ranked_reader(bench, report) if bench.ranked else _pair_reader(report)
    for c in converted(bench, source, rows()):
        f = by_path[c.published.file]
        f.rows += 1
        where = f"{c.published.file} row {c.published.row_number}"
        if c.rows:
            read(c, f, where)
            continue
        f.refused += 1
        if c.duplicate:
            f.duplicates += 1
            if len(report.duplicate_keys) < EXAMPLES:
                report.duplicate_keys.append(f"{where}: {c.problem}")
            report.refuse("duplicate key", where)
        else:
            report.refuse(c.problem or "unreadable row", where)
    return report


def _pair_reader(report: CheckReport):
    """A converted row's pairs through the intake's reading, as a bench run maps them."""
    from rmjudge.io.mapping import Mapper, RowError

    mapper = Mapper({}, blank_responses=True)  # the intake's reading of a bench run

    def read(c: Converted, f: FileCheck, where: str) -> None:
        f.items += 1
        f.pairs += len(c.rows)
        for n, row in enumerate(c.rows, 1):
            try:
                mapper.to_pair(n, row)
            except RowError as exc:
                f.pairs_refused += 1
                report.refuse(f"pair refused by the intake: {exc}", where)

    return read


def _ranked_reader(bench: Benchmark, report: CheckReport):
    """A converted row's prompt through rank's reading, as a bench run ranks it: its layout,
    its candidates (at most HARD_MAX_CANDIDATES, two different at least), repeated texts."""
    from rmjudge.io.messages import RowError
    from rmjudge.rank.layouts import HARD_MAX_CANDIDATES, check_prompt, read_row, repeated_note
    from rmjudge.rank.strategies import comparison_count, resolve

    def read(c: Converted, f: FileCheck, where: str) -> None:
        try:
            p = read_row(bench.rank_layout, c.published.row_number, c.rows[0])
        except RowError as exc:
            f.refused += 1
            report.refuse(f"prompt refused by the ranking: {exc}", where)
            return
        same = repeated_note(p)
        try:
            check_prompt(p, HARD_MAX_CANDIDATES)
        except RowError as exc:
            f.refused += 1
            report.refuse(f"prompt refused by the ranking: {exc}", where)
        else:
            f.items += 1
            n = len(p.distinct)
            f.pairs += comparison_count(resolve("auto", n), n)
        if same is not None:
            f.repeated += 1
            report.repeated.append({"id": p.id, "where": where, "candidates": p.k,
                                    "different": len(p.distinct), "same_as": same,
                                    "ranked": len(p.distinct) >= 2})

    return read


def failure(reports: list[CheckReport]) -> str | None:
    """The `Error:` line of a check that found nothing a run could judge in some benchmark's
    files (None when every benchmark has something): no row read at all (every file absent or
    unreadable), or rows that are all refused (another benchmark's files, most often), so
    that a script does not take the copy for a usable one."""
    empty = [r for r in reports if r.total("rows") == 0]
    if empty:
        return ("--check read no row of " + ", ".join(f"{r.name} ({r.source})" for r in empty)
                + ": put the published files there or name their folder with --data NAME=DIR")
    for r in reports:
        if r.total("items") == 0:
            unit = "prompt" if r.ranked else "item"
            reason, _ = r.reasons.most_common(1)[0]
            return (f"--check read {r.total('rows')} rows of {r.name} ({r.source}) and refused "
                    f"every one ({reason}, first at {r.first_at[reason]}): no {unit} of "
                    f"{r.title} in them; is it another benchmark's data? give {r.title}'s "
                    f"published files with --data {r.name}=PATH")
    return None


def render(report: CheckReport) -> str:
    unit, pairs = ("prompts", "comparisons") if report.ranked else ("items", "pairs")
    lines = [f"{report.title}: {report.source}"]
    for f in report.files:
        if f.error:
            lines.append(f"  {f.path}: not read: {f.error}")
        else:
            lines.append(f"  {f.path}: {f.rows} rows read, {f.items} {unit} ({f.pairs} {pairs}), "
                         f"{f.refused} refused, {f.duplicates} duplicate keys"
                         + (f", {f.pairs_refused} pairs refused by the intake"
                            if f.pairs_refused else "")
                         + (f", {f.repeated} with repeated candidates" if f.repeated else ""))
    t = report.total
    lines.append(f"  in all: {t('rows')} rows read from {len(report.files)} file(s), "
                 f"{t('items')} {unit} ({t('pairs')} {pairs}), {t('refused')} refused, "
                 f"{t('duplicates')} duplicate keys, "
                 + (f"{t('repeated')} prompts with repeated candidate texts" if report.ranked
                    else f"{t('pairs_refused')} pairs refused by the intake")
                 + (f", {sum(bool(f.error) for f in report.files)} file(s) not read"
                    if any(f.error for f in report.files) else ""))
    lines += [f"  absent: {path}" for path in report.absent]
    for reason, n in report.reasons.most_common():
        lines.append(f"  refused: {n} x {reason} (first: {report.first_at[reason]})")
    lines += [f"  duplicate: {d}" for d in report.duplicate_keys]
    lines += [f"  repeated: {r['id']} ({r['where']}): {r['candidates']} candidates, "
              f"{r['different']} different (candidate {r['same_as']}): "
              + ("each text compared once, its copies share its score" if r["ranked"]
                 else "refused, a ranking needs two different candidates")
              for r in report.repeated]
    return "\n".join(lines)
