"""The bench table in the paper's layout: one row per judge with each benchmark's headline
figure and their average, then positional consistency, then each benchmark's own breakdown."""

from __future__ import annotations

from rmjudge.bench.base import BenchResult, mean


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


def render(results: list[BenchResult], judge: str) -> str:
    head = [c for r in results for c in r.headline]
    avg = mean(c.value for c in head) if all(c.value is not None for c in head) else None
    lines = [
        "| judge | " + " | ".join(c.label for c in head) + " | avg |",
        "|---|" + "---:|" * (len(head) + 1),
        f"| {judge} | " + " | ".join(pct(c.value) for c in head) + f" | {pct(avg)} |",
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
        lines += [note, f"  scoring: {r.rule}"]
    return "\n".join(lines)
