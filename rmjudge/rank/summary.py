"""What `rmjudge rank` (and `bench`'s best-of-N benchmarks) say when a ranking ends: its
summary's text and the refusal of a ranking that ranked nothing."""

from __future__ import annotations

from rmjudge.core.words import count
from rmjudge.runs.summaries import error_lines, refuse_nothing_done


def refuse_nothing_ranked(summary, source) -> None:
    """`rmjudge rank`'s refusal of a ranking whose every prompt became an error row."""
    refuse_nothing_done(
        summary.ranked, verb="ranked", read=count(summary.prompts, "prompt"), source=source,
        where=f"{summary.problems} of them in the errors table of {summary.output}",
        fix="fix the input (docs/rank.md) and rerun with --overwrite (it replaces these error "
            "rows)")


def render_summary(s, width: int | None = None) -> str:
    """The ranking's summary, its lines wrapped at spaces to `width` (None: as they are)."""
    from rmjudge.rank.outputs import top1_line

    what = ""
    if s.candidates:
        lo, hi = s.candidates
        what = (f" ({lo if lo == hi else f'{lo} to {hi}'} candidates per prompt ranked)")
    lines = [f"rmjudge: ranked {s.ranked} of {count(s.prompts, 'prompt')}{what}: "
             f"{count(s.judged, 'comparison')} judged, {s.skipped} already done, {s.failed} "
             f"failed, {count(s.rounds, 'round')} in {s.wall_seconds:.1f}s -> {s.output}"]
    if s.problem_kinds:
        lines += error_lines(s.problem_kinds, s.problem_rows)
    if s.strategies:
        lines.append("  strategy: " + ", ".join(f"{k} for {count(v, 'prompt')}"
                                                 for k, v in sorted(s.strategies.items())))
    if s.repeated:
        lines.append(f"  {count(s.repeated, 'prompt')} with repeated candidate texts: each text "
                     "compared once, its copies share its score")
    top1 = top1_line(s.own_rankings())
    if top1:
        lines.append(f"  {top1}")
    if s.others:
        lines.append(f"  the store also holds {count(s.others, 'ranked prompt')} that this input "
                     "does not name (an earlier, larger input or --limit); its rankings table, "
                     "eval and filter include them")
    for name, n in sorted(s.gold_elsewhere.items()):
        verb = "has" if n == 1 else "have"
        lines.append(f"  note: {count(n, 'prompt')} without gold ranks {verb} {name} on every "
                     f"completion: --gold-field {name} ranks against it")
    if s.wall_seconds > 0 and s.judged:
        lines.append(f"  {s.wall_seconds / s.judged:.1f} s/comparison, "
                     f"{s.generated_tokens / s.wall_seconds:.0f} generated tok/s")
    from rmjudge.core.layout import wrap

    return wrap("\n".join(lines), width or 10**9)
