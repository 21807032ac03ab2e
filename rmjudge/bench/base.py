"""What every benchmark shares: the per-item outcome read from a run store, the result type, and
the `Benchmark` interface (published layout -> rmjudge intake rows; outcomes -> official figures).

An item is one judged pair of the benchmark (for RM-Bench, one chosen/rejected style cell).
Per order it is correct (True), wrong (False) or without a verdict (None: every rollout of that
order failed to parse, or the row landed in the store's errors table). Each benchmark decides
from its authors' code what a missing verdict is worth.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from rmjudge.core.errors import UserError


class BenchError(UserError):
    """A benchmark cannot be read, prepared or scored; the message names the file and the fix."""


class RowProblem(Exception):
    """A published row that does not have the benchmark's layout (kept as an error row)."""


@dataclass(frozen=True)
class Item:
    """One benchmark pair with the verdict of each order the run judged."""

    id: str
    fields: dict[str, Any]  # grouping columns: subset, domain, styles, source ...
    correct: dict[str, bool | None]  # order ('ab'|'ba') -> correct; None: no verdict
    letters: dict[str, str | None] = field(default_factory=dict)  # order -> 'A'|'B'|None
    labelled: bool = True  # False: no gold label (a HelpSteer3 tie), not scored
    judged: bool = True  # False: no row in the store's pairs table (an error row, not yet run)

    def value(self, order: str, missing: float) -> float:
        """1 correct, 0 wrong, `missing` without a verdict."""
        c = self.correct[order]
        return missing if c is None else float(c)

    def pooled(self, missing: float) -> float:
        """The mean over the judged orders (both orders pooled: the paper's accuracy)."""
        return sum(self.value(o, missing) for o in self.correct) / len(self.correct)

    @property
    def both_correct(self) -> bool:
        return len(self.correct) == 2 and all(v is True for v in self.correct.values())


@dataclass(frozen=True)
class Cell:
    """One figure of a benchmark's table: a label, a fraction (None: no items) and its count."""

    label: str
    value: float | None
    n: int

    def as_dict(self) -> dict:
        return {"label": self.label, "value": self.value, "n": self.n}


@dataclass
class BenchResult:
    name: str
    title: str
    headline: list[Cell]  # the cells of the summary row (the paper's columns)
    sections: list[Cell]  # the benchmark's own breakdown, as its authors report it
    consistency: float | None  # items correct in both orders, over items judged in both
    items: int  # items scored
    judged: int  # items with a row in the store's pairs table
    no_verdict: int  # order verdicts missing (parse failures, error rows)
    unlabelled: int = 0  # items without a gold label, left out (HelpSteer3 ties)
    unreadable: int = 0  # published rows without the benchmark's layout (errors table)
    unjudged: int = 0  # items the store holds no outcome of, left out (an incomplete merge)
    rule: str = ""  # how the figures are computed, one line
    notes: list[str] = field(default_factory=list)  # why a figure is n/a, what a run left out

    def as_dict(self) -> dict:
        return {"name": self.name, "title": self.title,
                "headline": [c.as_dict() for c in self.headline],
                "sections": [c.as_dict() for c in self.sections],
                "positional_consistency": self.consistency, "items": self.items,
                "judged": self.judged, "no_verdict": self.no_verdict,
                "unlabelled": self.unlabelled, "unreadable": self.unreadable,
                "unjudged": self.unjudged,
                "rule": self.rule, "notes": list(self.notes)}


def mean(values: Iterable[float]) -> float | None:
    vals = list(values)
    return sum(vals) / len(vals) if vals else None


def consistency(items: list[Item]) -> float | None:
    """The paper's positional consistency: correct in both orders, over items judged in both."""
    both = [it for it in items if len(it.correct) == 2]
    return mean(float(it.both_correct) for it in both)


def no_verdicts(items: list[Item]) -> int:
    return sum(v is None for it in items for v in it.correct.values())


class Benchmark:
    """A standard pairwise benchmark: its published layout and its authors' scoring."""

    name = ""
    title = ""
    default_source: str | None = None  # a Hub id, when the benchmark is published there
    in_default_set = True  # run by `rmjudge bench` without -b when it has a Hub default
    ranked = False  # best-of-N: judged with `rmjudge rank` and scored from its rankings
    layout = ""  # the published files, for help and errors
    rule = ""  # the scoring rule, one line

    def files(self, source: str) -> list[tuple[str, dict[str, Any]]]:
        """The files (or Hub ids) to read for `source`, each with fields its rows inherit."""
        return [(source, {})]

    def absent(self, source: str) -> list[str]:
        """The published files a folder `source` lacks, where the layout names them all."""
        return []

    def convert(self, n: int, obj: dict[str, Any], fields: dict[str, Any]) -> Iterator[dict]:
        """rmjudge intake rows (id, prompt, two responses, gold, grouping columns) for the
        published row number `n`; raise RowProblem when the row lacks the layout."""
        raise NotImplementedError

    def labelled(self, row: dict) -> bool:
        """Whether an intake row carries a gold label."""
        return True

    def score(self, items: list[Item]) -> BenchResult:
        """The official figures over `items` (every item of the benchmark the run covers)."""
        raise NotImplementedError

    def result(self, items: list[Item], headline: list[Cell], sections: list[Cell],
               unlabelled: int = 0, notes: list[str] | None = None) -> BenchResult:
        return BenchResult(self.name, self.title, headline, sections, consistency(items),
                           len(items), sum(it.judged for it in items), no_verdicts(items),
                           unlabelled=unlabelled, rule=self.rule, notes=list(notes or []))


def item_key(row: dict) -> str:
    """The published item an intake row belongs to: its `item` column (RM-Bench's nine style
    pairs of one prompt share one), else its id. `--limit` counts items, and a key published
    twice is a duplicate."""
    return str(row["item"] if row.get("item") is not None else row["id"])


def missing_parts(label: str, parts: Iterable[str], present: Iterable[str],
                  what: str) -> str | None:
    """The note for a headline `label` that averages named `parts` when some have no items in
    the run (None when every part has some): bench shows such a headline as n/a, as a mean over
    the parts present is not the benchmark's figure."""
    parts = list(parts)
    have = set(present)
    absent = [p for p in parts if p not in have]
    if not absent:
        return None
    if len(parts) == 1:
        return f"{label} n/a: this run has no {what} in {parts[0]}"
    return (f"{label} n/a: this run has no {what} in {', '.join(absent)}; {label} averages "
            f"{', '.join(parts)}")


def text(obj: dict, col: str) -> str:
    """A non-empty string column, or RowProblem naming it."""
    v = obj.get(col)
    if not isinstance(v, str) or not v.strip():
        raise RowProblem(f"column {col!r} is missing or not a non-empty string")
    return v


class RankedBenchmark(Benchmark):
    """A best-of-N benchmark: each published row is a prompt with K candidates, converted to a
    layout of `rmjudge rank` (`rank_layout`), judged through rank's comparisons and scored from
    the prompts' rankings (`rmjudge.rank.table.PromptRanking`) as its authors score a reward
    model's per-candidate scores."""

    ranked = True
    in_default_set = False
    rank_layout = ""

    def score(self, items: list[Item]) -> BenchResult:
        raise BenchError(f"{self.title} is scored from rankings (score_rankings)")

    def score_rankings(self, prompts: list[tuple[dict, Any]]) -> BenchResult:
        """The official figures over (intake row's grouping fields, its PromptRanking or None
        when no comparison of it is stored), every prompt the run covers."""
        raise NotImplementedError

    def ranked_result(self, prompts: list[tuple[dict, Any]], headline: list[Cell],
                      sections: list[Cell], notes: list[str] | None = None) -> BenchResult:
        games = [g for _, p in prompts if p is not None for g in p.games]
        both = [g for g in games if all(x in ("A", "B") for x in g.letters)]
        return BenchResult(
            self.name, self.title, headline, sections,
            mean(float(g.letters[0] == g.letters[-1]) for g in both), len(prompts),
            sum(p is not None and bool(p.games) for _, p in prompts),
            sum(x not in ("A", "B") for g in games for x in g.letters), rule=self.rule,
            notes=list(notes or []))


def candidate_scores(ranking, k: int) -> list[float]:
    """Each candidate's Bradley-Terry score in candidate order (a repeated text has its first
    copy's); all equal (0) for a prompt whose comparisons all failed, so that none has a
    verdict (the authors' "no score" case: every candidate ties)."""
    if ranking is None:
        return [0.0] * k
    by = ranking.by_candidate()
    return [by[c].score if c in by else 0.0 for c in range(k)]
