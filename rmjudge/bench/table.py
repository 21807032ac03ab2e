"""The bench table in the paper's layout: one row per judge with each benchmark's headline
figure and two averages, the notes that say why a figure is n/a and what each average is,
then positional consistency, then each benchmark's own breakdown.

The averages:

- `avg`: the plain mean of every headline cell of the row (LLMBar has two, Natural and
  Adversarial, so it counts twice); n/a while any cell is n/a.
- `avg (RB, RM-Bench, RMB)`: the mean of the RewardBench, RM-Bench and RMB (pairwise)
  headlines, the paper's average (docs/reflectrm.md, section 6) without PPE-Preference, which
  bench does not run; shown when the run holds one of the three, n/a unless it holds all three
  with a figure each.
"""

from __future__ import annotations

from dataclasses import dataclass

from rmjudge.bench.base import BenchResult, Cell, mean

PAPER = ("rewardbench", "rmbench", "rmb")  # the paper's four, less PPE-Preference
PAPER_LABEL = "avg (RB, RM-Bench, RMB)"


@dataclass(frozen=True)
class Average:
    """One average column: its label, value (None: n/a), the cells it averages and why."""

    label: str
    value: float | None
    of: list[str]
    what: str

    def as_dict(self) -> dict:
        return {"label": self.label, "value": self.value, "of": self.of, "what": self.what}


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


def _mean_or_na(cells: list[Cell]) -> float | None:
    return mean(c.value for c in cells) if cells and all(c.value is not None
                                                         for c in cells) else None


def averages(results: list[BenchResult]) -> list[Average]:
    """The row's averages: `avg` always, the paper's when the run holds one of its benchmarks."""
    head = [c for r in results for c in r.headline]
    labels = [c.label for c in head]
    several = [f"{r.title} has {len(r.headline)} cells and so counts "
               + ("twice" if len(r.headline) == 2 else f"{len(r.headline)} times")
               for r in results if len(r.headline) > 1]
    out = [Average("avg", _mean_or_na(head), labels,
                   f"avg: the plain mean of the {len(head)} headline "
                   f"{'cell' if len(head) == 1 else 'cells'} of this row ({', '.join(labels)})"
                   + "".join(f"; {s}" for s in several) + "; n/a while a cell is n/a")]
    by_name = {r.name: r for r in results}
    if any(n in by_name for n in PAPER):
        cells = [by_name[n].headline[0] for n in PAPER if n in by_name]
        value = _mean_or_na(cells) if len(cells) == len(PAPER) else None
        lacking = [t for n, t in zip(PAPER, ("RewardBench", "RM-Bench", "RMB")) if n not in by_name]
        out.append(Average(
            PAPER_LABEL, value, [c.label for c in cells],
            f"{PAPER_LABEL}: the mean of the RewardBench, RM-Bench and RMB (pairwise) headlines: "
            "the ReflectRM paper's avg without PPE-Preference, which bench does not run (compare "
            "it with the mean of the paper's first three columns, not with its avg)"
            + (f"; n/a: this run has no {', '.join(lacking)}" if lacking else
               "; n/a while one of them is n/a")))
    return out


def render(results: list[BenchResult], judge: str) -> str:
    head = [c for r in results for c in r.headline]
    avgs = averages(results)
    lines = [
        "| judge | " + " | ".join(c.label for c in head) + " | "
        + " | ".join(a.label for a in avgs) + " |",
        "|---|" + "---:|" * (len(head) + len(avgs)),
        f"| {judge} | " + " | ".join(pct(c.value) for c in head) + " | "
        + " | ".join(pct(a.value) for a in avgs) + " |",
        "",
    ]
    lines += [note for r in results for note in r.notes]
    lines += [a.what for a in avgs]
    lines += [
        "",
        "positional consistency (correct in both orders): "
        + ", ".join(f"{r.title} {pct(r.consistency)}" for r in results),
    ]
    for r in results:
        lines += ["", f"{r.title}: " + " | ".join(f"{c.label} {pct(c.value)} ({c.n})"
                                                 for c in r.sections)]
        note = (f"  {r.items} pairs scored, {r.judged} judged, {r.no_verdict} order verdicts "
                "missing")
        if r.unlabelled:
            note += f", {r.unlabelled} without a gold label left out"
        if r.unreadable:
            note += f", unreadable published rows: {r.unreadable} (see the errors table)"
        if r.unjudged:
            note += f", {r.unjudged} never judged (left out)"
        lines += [note, f"  scoring: {r.rule}"]
    return "\n".join(lines)
