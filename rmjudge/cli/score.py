"""`rmjudge score`: judge a file of preference pairs into a labelled table."""

from __future__ import annotations

import sys

import click

from rmjudge.cli.common import make_progress, status
from rmjudge.cli.mapping_options import build_mapper, label_options, label_settings
from rmjudge.cli.server_options import server_options, server_settings
from rmjudge.cli.options import (combine_options, engine_options, engine_settings, judge_options,
                                 judge_settings)
from rmjudge.errors import EXIT_STRICT, UserError


run_options = combine_options([
    click.option("--map", "mapping", default=None, metavar="KEY=COL,...",
                 help="Name input columns: prompt=,a=,b=,label= or chosen=,rejected=; id=."),
    click.option("--limit", type=click.IntRange(min=1), default=None,
                 help="Read only the first N rows."),
    click.option("--shard", default=None, metavar="I/N",
                 help="Judge only shard I of N (stable partition by pair id), for array jobs."),
    click.option("--commit-every", default=8, show_default=True,
                 help="Commit results every N pairs (a crash loses at most the pairs in flight)."),
    click.option("--overwrite", is_flag=True,
                 help="Discard an existing output (an rmjudge store no other run is writing) "
                 "and start again."),
    label_options,
])


@click.command("score")
@click.argument("source", metavar="INPUT")
@click.option("-o", "--output", default=None,
              help="Output: .duckdb (default INPUT.judged.duckdb), .parquet or .jsonl.")
@judge_options
@engine_options
@server_options
@run_options
@click.option("--strict", is_flag=True, help="Exit 2 when any row lands in errors.")
@click.option("--dry-run", is_flag=True,
              help="Validate the input and estimate the work; load only the tokenizer.")
@click.option("--quiet", "-q", is_flag=True, help="No progress line and no summary.")
def command(source: str, output: str | None, strict: bool, dry_run: bool, quiet: bool,
            **kw) -> None:
    """Judge preference pairs in INPUT (.jsonl, .parquet, .csv, file.duckdb:table, or - for
    JSONL on stdin) with ReflectRM, both orders, into a resumable labelled table."""
    if dry_run:
        from rmjudge.dryrun import dry_run as run_dry
        from rmjudge.settings import SettingsError

        js, es, run = parse_run_options(kw)
        server = run["server"]
        if server is not None and es.model is None:
            raise SettingsError("--dry-run with --server counts prompt tokens with the served "
                                "model's tokenizer: add --model FILE.gguf (the GGUF it serves)")
        click.echo(run_dry(source, js, es, mapper=run["mapper"], limit=run["limit"],
                           server=None if server is None else server.public).render())
        return
    summary = judge_input(source, output, kw, quiet=quiet)
    if summary.judged == 0 and summary.skipped == 0:
        raise UserError(f"nothing was judged: {summary.rows_read} rows read from {source}, "
                        f"{summary.errors} of them in the errors table of "
                        f"{summary.files[0] if summary.files else output}; fix the input (or "
                        "--map its columns) and rerun")
    if strict and summary.errors:
        sys.exit(EXIT_STRICT)


def parse_run_options(kw: dict):
    """(JudgeSettings, EngineSettings, run options) from the options of `judge_options`,
    `engine_options` and `run_options`; bad values raise SettingsError."""
    from rmjudge.io.mapping import parse_map
    from rmjudge.settings import SettingsError

    try:
        js = judge_settings(kw)
        es = engine_settings(kw)
        labels = label_settings(kw)
        mapping = parse_map(kw.pop("mapping"))
        run = {"mapper": build_mapper(mapping, js.seed, labels), "mapping": mapping,
               "limit": kw.pop("limit"),
               "shard": parse_shard(kw.pop("shard")), "commit_every": kw.pop("commit_every"),
               "overwrite": kw.pop("overwrite"),
               "server": server_settings(kw)}
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    return js, es, run


def judge_input(source: str, output: str | None, kw: dict, quiet: bool = False, engine=None):
    """Judge `source` into `output` as `rmjudge score` does (for `score` and for `eval` on
    unjudged input); prints progress and the summary to stderr. Returns the Summary."""
    from rmjudge.engine import load_engine
    from rmjudge.io.readers import count_rows, detect_format
    from rmjudge.models import resolve_model
    from rmjudge.pipeline import check_output, default_output, score

    js, es, run = parse_run_options(kw)
    if output is not None and not output.strip():
        from rmjudge.settings import SettingsError

        raise SettingsError("-o is empty; give an output file name, or leave -o out for "
                            "INPUT.judged.duckdb")
    detect_format(source)  # a missing or unreadable input fails before the model loads
    check_output(source, output or default_output(source))  # so does an unusable output
    if engine is None and run["server"] is not None:
        engine = load_engine(es, server=run["server"])
        status(f"rmjudge: {engine.describe()}", quiet)
    elif engine is None:
        status(f"rmjudge: loading the judge {resolve_model(es.model)} ...", quiet)
        engine = load_engine(es)
    limit = run["limit"]
    total = None if quiet else count_rows(source)
    progress = make_progress(not quiet, min(total, limit) if total is not None and limit else total)
    try:
        summary = score(source, engine, js, output=output, mapper=run["mapper"],
                        overwrite=run["overwrite"], limit=limit, shard=run["shard"],
                        commit_every=run["commit_every"], on_progress=progress,
                        announce=lambda line: status(f"rmjudge: {line}", quiet))
    finally:
        progress.close()
    if not quiet:
        click.echo(render_summary(summary), err=True)
    summary.engine = engine
    return summary


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    if spec is None:
        return None
    i, sep, n = spec.partition("/")
    if not sep or not i.strip().isdigit() or not n.strip().isdigit() or not 0 <= int(i) < int(n):
        raise ValueError(f"--shard must look like I/N with 0 <= I < N, got {spec!r}")
    return int(i), int(n)


def render_summary(s) -> str:
    lines = [
        f"rmjudge: read {s.rows_read} rows: judged {s.judged}, already done {s.skipped}, "
        f"errors {s.errors} in {s.wall_seconds:.1f}s -> {', '.join(s.files)}"
    ]
    if s.error_reasons:
        kinds = "; ".join(f"{n} x {k}" for k, n in sorted(s.error_reasons.items(), key=lambda x: -x[1]))
        lines.append(f"  error rows: {kinds} (see the errors table)")
    total = sum(s.verdicts.values())
    if total:
        lines.append("  verdicts: " + ", ".join(f"{k} {v}" for k, v in s.verdicts.items()))
    if s.generations:
        lines.append(f"  generations {s.generations}: parse failures {s.parse_failures} "
                     f"({s.parse_failures / s.generations:.1%}), forced verdicts {s.forced}")
    if s.both_orders:
        lines.append(f"  orders agree on {s.consistent}/{s.both_orders} pairs")
    if s.accuracy is not None:
        lines.append(f"  accuracy {s.accuracy:.1%} on {s.labelled} labelled pairs")
        if s.labelled < 0.95 * total:
            lines.append(f"  note: {total - s.labelled} of {total} pairs have no usable gold "
                         "label (ties, or values the label mapping leaves unlabelled)")
    if s.positional_consistency is not None:
        lines.append(f"  positional consistency (correct in both orders) "
                     f"{s.positional_consistency:.1%}")
    if s.wall_seconds > 0 and s.judged:
        lines.append(f"  {s.wall_seconds / s.judged:.1f} s/pair, "
                     f"{s.generated_tokens / s.wall_seconds:.0f} generated tok/s")
    if s.tokens_sent is not None:
        lines.append(f"  server cost: {s.tokens_sent} prompt tokens sent, {s.tokens_received} "
                     "tokens received")
    return "\n".join(lines)
