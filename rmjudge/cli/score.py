"""`rmjudge score`: judge a file of preference pairs into a labelled table."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from rmjudge.cli.common import engine_activity, make_progress, status
from rmjudge.cli.mapping_options import dataset_options, input_source, label_options, map_option
from rmjudge.cli.server_options import server_options, server_settings
from rmjudge.cli.options import (combine_options, engine_options, engine_settings, judge_options,
                                 judge_settings, settings_from, settings_options,
                                 settings_values)
from rmjudge.core.errors import EXIT_STRICT, UserError
from rmjudge.core.settings import setting
from rmjudge.core.words import count
from rmjudge.runs.setup import RunOptions

RUN_FIELDS = ("limit", "shard", "commit_every", "overwrite", "rejudge_changed")

run_options = combine_options([
    map_option,
    settings_options(RunOptions, only=RUN_FIELDS),
    label_options,
    dataset_options,
])


@dataclass(frozen=True)
class ScoreCall:
    """What `score` is given besides the judging options: where from, where to, how to end."""

    source: str = setting(argument=True, metavar="INPUT")
    output: str | None = setting(None, "Output: .duckdb (default INPUT.judged.duckdb), .parquet "
                                 "or .jsonl.", option=("-o", "--output"))
    strict: bool = setting(False, f"Exit {EXIT_STRICT} when any row lands in errors.",
                           flag="--strict")
    dry_run: bool = setting(False, "Validate the input and estimate the work; load only the "
                            "tokenizer.", flag="--dry-run")
    quiet: bool = setting(False, "No progress line and no summary.", flag="--quiet", short="-q")


@click.command("score")
@settings_options(ScoreCall, only=("source", "output"))
@judge_options
@engine_options
@server_options
@run_options
@settings_options(ScoreCall, only=("strict", "dry_run", "quiet"))
def command(**kw) -> None:
    """Judge preference pairs in INPUT with ReflectRM, both orders, into a resumable labelled
    table.

    INPUT is a file (.jsonl, .parquet, .csv, also .gz/.zst/.bz2/.xz), file.duckdb:table, a
    folder of such files or a datasets.save_to_disk folder (DIR@split for one split of a
    DatasetDict), a quoted glob ('shards/*.parquet'), hf://datasets/ORG/NAME[@REVISION] for a
    Hub dataset (with --config/--split; needs the hub extra), or - for JSONL on stdin. Every
    form: docs/inputs.md."""
    call = settings_from(ScoreCall, kw)
    source, output = input_source(call.source, kw), call.output
    opts = parse_run_options(kw)
    if call.dry_run:
        from rmjudge.cli.layout import echo
        from rmjudge.runs import setup as run

        echo(run.dry_run(source, opts).render())
        return
    summary = judge_input(source, output, opts, quiet=call.quiet)
    if summary.judged == 0 and summary.skipped == 0:
        raise UserError(f"nothing was judged: {count(summary.rows_read, 'row')} read from "
                        f"{source}, "
                        f"{summary.errors} of them in the errors table of "
                        f"{summary.files[0] if summary.files else output}; fix the input (or "
                        "--map its columns) and rerun with --overwrite (it replaces these error "
                        "rows)")
    if call.strict and summary.errors:
        sys.exit(EXIT_STRICT)


def parse_run_options(kw: dict):
    """The `RunOptions` (rmjudge.runs.setup) of the options of `judge_options`, `engine_options`,
    `server_options` and those of `map_option`, `label_options` and the `RunOptions` fields
    the command has, popped from kw; bad values raise SettingsError. `score`, `eval`, `rank`,
    `bench` and `ray-score` share it."""
    from rmjudge.io.mapping import parse_map
    from rmjudge.runs.setup import make_run_options

    js = judge_settings(kw)
    es = engine_settings(kw)
    label_values, label_choice = kw.pop("label_values", None), kw.pop("label_choice", None)
    mapping = parse_map(kw.pop("mapping", None))
    return make_run_options(js, es, mapping, label_values, label_choice,
                            server=server_settings(kw), **settings_values(RunOptions, kw))


def judge_input(source: str, output: str | None, opts, quiet: bool = False, engine=None):
    """Judge `source` into `output` (rmjudge.runs.setup.judge_input) with progress and the summary on
    stderr. Returns the Summary."""
    from rmjudge.runs import setup as run

    def progress(total, engine):
        return make_progress(True, total, activity=engine_activity(engine))

    summary = run.judge_input(source, output, opts, engine=engine,
                              status=lambda line: status(line, quiet),
                              progress=None if quiet else progress)
    if not quiet:
        click.echo(render_summary(summary), err=True)
    return summary


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
    """The run's summary: what was judged and where it went, then the verdicts and the
    metrics, then how the rollouts went and the speed, then errors and notes. Every line is
    wrapped at word boundaries to `width` (default: stderr's, rmjudge.cli.layout), so a path
    or a count is never split mid-word."""
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
    from rmjudge.cli.layout import output_width, wrap_line

    width = width or output_width(sys.stderr)
    return "\n".join(out for line in lines for out in wrap_line(line, width))
