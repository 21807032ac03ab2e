"""What a run says when it ends: the summary's text (`render_summary`, which `rmjudge score`,
`eval` and `bench` print and `rank`'s summary shares the error lines of) and the front doors'
one refusal of a run that judged nothing (`refuse_nothing_done`)."""

from __future__ import annotations

import sys

from rmjudge.core.errors import UserError
from rmjudge.core.words import count


def refuse_nothing_done(done: int, *, verb: str, read: str, source, where: str,
                        fix: str) -> None:
    """A run whose every row became an error row (`done`: rows judged or already done, or
    prompts ranked, is 0) ends in one `UserError`: "nothing was VERB: READ read from SOURCE,
    WHERE; FIX". `rmjudge score`, `rmjudge rank` and `rmjudge.score` raise it."""
    if not done:
        raise UserError(f"nothing was {verb}: {read} read from {source}, {where}; {fix}")


def refuse_nothing_judged(summary, source, output) -> None:
    """`rmjudge score`'s refusal of a run that judged nothing."""
    refuse_nothing_done(
        summary.judged + summary.skipped, verb="judged", read=count(summary.rows_read, "row"),
        source=source, where=f"{summary.errors} of them in the errors table of "
                             f"{summary.files[0] if summary.files else output}",
        fix="fix the input (or --map its columns) and rerun with --overwrite (it replaces these "
            "error rows)")


def judgment_lines(s, total: int) -> list[str]:
    """The summary's lines about the judgment: the named metrics (rmjudge.core.counts),
    the order agreement, then the rollout counts."""
    from rmjudge.core.counts import metrics_lines, order_agreement_line, rollout_counts_line

    lines = [f"  {line}" for line in metrics_lines(s.metrics)] if s.metrics else []
    agreement = order_agreement_line(s.consistent, s.both_orders)
    if agreement:
        lines.append(f"  {agreement}")
    if s.labelled and s.labelled < 0.95 * total:
        lines.append(f"  note: {total - s.labelled} of {total} pairs have no usable gold "
                     "label (ties, or values the label mapping leaves unlabelled)")
    counts = rollout_counts_line(s.rollout_counts)
    if counts:
        lines.append(f"  {counts}")
    return lines


ERROR_KINDS_SHOWN = 5


def error_lines(reasons: dict[str, int], rows: dict[str, list[int]]) -> list[str]:
    """The summary's error rows: one line per kind, most frequent first, with a few row
    numbers; at most ERROR_KINDS_SHOWN kinds, so any number of bad rows prints a few lines."""
    kinds = sorted(reasons.items(), key=lambda x: (-x[1], x[0]))
    out = ["  error rows (details and raw text in the errors table):"]
    for kind, n in kinds[:ERROR_KINDS_SHOWN]:
        shown = rows.get(kind, [])
        where = ", ".join(map(str, shown)) + (", ..." if n > len(shown) else "")
        out.append(f"    {kind}: {count(n, 'row')}"
                   + (f" ({'row' if n == 1 else 'rows'} {where})" if shown else ""))
    rest = kinds[ERROR_KINDS_SHOWN:]
    if rest:
        out.append(f"    and {count(len(rest), 'more kind')}: "
                   f"{count(sum(n for _, n in rest), 'row')}")
    return out


def render_summary(s, width: int | None = None) -> str:
    """The run's summary (`pipeline.Summary`): what was judged and where it went, then the
    verdicts and the metrics, then how the rollouts went and the speed, then errors and notes.
    Every line is wrapped at word boundaries to `width` (default: stderr's,
    rmjudge.core.layout), so a path or a count is never split mid-word."""
    lines = [
        f"rmjudge: read {count(s.rows_read, 'row')}: judged {s.judged}, already done {s.skipped}, "
        f"errors {s.errors} in {s.wall_seconds:.1f}s",
        "  output: " + ", ".join(s.files),
    ] if s.files else [
        f"rmjudge: read {count(s.rows_read, 'row')}: judged {s.judged}, already done {s.skipped}, "
        f"errors {s.errors} in {s.wall_seconds:.1f}s"
    ]
    total = sum(s.verdicts.values())
    if total:
        lines.append("  verdicts: " + ", ".join(f"{k} {v}" for k, v in s.verdicts.items()))
    lines += judgment_lines(s, total)
    if s.wall_seconds > 0 and s.judged:
        lines.append(f"  {s.wall_seconds / s.judged:.1f} s/pair, "
                     f"{s.generated_tokens / s.wall_seconds:.0f} generated tok/s")
    if s.tokens_sent is not None:
        lines.append(f"  server cost: {s.tokens_sent} prompt tokens sent, {s.tokens_received} "
                     "tokens received")
    if s.error_reasons:
        lines += error_lines(s.error_reasons, s.error_rows)
    lines += [f"  {note}" for note in s.notes]
    from rmjudge.core.layout import output_width, wrap_line

    width = width or output_width(sys.stderr)
    return "\n".join(out for line in lines for out in wrap_line(line, width))
