"""`rmjudge score`: judge a file of preference pairs into a labelled table."""

from __future__ import annotations

import sys

import click

from rmjudge.cli.common import ProgressLine, fail
from rmjudge.cli.options import engine_options, engine_settings, judge_options, judge_settings
from rmjudge.cli.server_options import server_options, server_settings  # --server (engine/server.py)


@click.command("score")
@click.argument("source", metavar="INPUT")
@click.option("-o", "--output", default=None,
              help="Output: .duckdb (default INPUT.judged.duckdb), .parquet or .jsonl.")
@judge_options
@engine_options
@server_options
@click.option("--map", "mapping", default=None, metavar="KEY=COL,...",
              help="Name input columns: prompt=,a=,b=,label= or chosen=,rejected=; id=.")
@click.option("--limit", type=int, default=None, help="Read only the first N rows.")
@click.option("--shard", default=None, metavar="I/N",
              help="Judge only shard I of N (stable partition by pair id), for array jobs.")
@click.option("--commit-every", default=8, show_default=True,
              help="Commit results every N pairs (a crash loses at most the pairs in flight).")
@click.option("--overwrite", is_flag=True, help="Discard an existing output and start again.")
@click.option("--strict", is_flag=True, help="Exit non-zero when any row lands in errors.")
@click.option("--dry-run", is_flag=True,
              help="Validate the input and estimate the work; load only the tokenizer.")
@click.option("--quiet", "-q", is_flag=True, help="No progress line and no summary.")
def command(source: str, output: str | None, mapping: str | None, limit: int | None,
            shard: str | None, commit_every: int, overwrite: bool, strict: bool, dry_run: bool, quiet: bool, **kw) -> None:
    """Judge preference pairs in INPUT (.jsonl, .parquet, .csv, file.duckdb:table, or - for
    JSONL on stdin) with ReflectRM, both orders, into a resumable labelled table."""
    from rmjudge.io.mapping import parse_map
    from rmjudge.io.readers import InputError
    from rmjudge.models import ModelError
    from rmjudge.settings import SettingsError
    from rmjudge.store import StoreError

    engine_kind = kw.pop("engine_kind")
    try:
        js = judge_settings(kw)
        es = engine_settings(kw)
        cols = parse_map(mapping)
        shard_t = parse_shard(shard)
        server = server_settings(kw)  # --server: judge through an OpenAI-compatible server
        if server is not None and dry_run:
            raise SettingsError("--dry-run estimates the in-process engine's work; drop --server")
    except (SettingsError, ValueError) as exc:
        fail(str(exc))
    try:
        if dry_run:
            from rmjudge.dryrun import dry_run as run_dry

            report = run_dry(source, js, es, mapping=cols, limit=limit)
            click.echo(report.render())
            return
        from rmjudge.engine import load_engine
        from rmjudge.io.readers import detect_format
        from rmjudge.pipeline import score

        detect_format(source)  # a missing or unreadable input fails before the model loads
        engine = load_engine(es, kind=engine_kind, vocab_only=False, server=server)
        if server is not None and not quiet:
            click.echo(f"rmjudge: {engine.describe()}", err=True)
        from rmjudge.io.readers import count_rows

        progress = ProgressLine(not quiet)
        if progress.enabled:
            total = count_rows(source)
            progress.total = min(total, limit) if total is not None and limit else total
        try:
            summary = score(source, engine, js, output=output, mapping=cols, overwrite=overwrite,
                            limit=limit, shard=shard_t, commit_every=commit_every,
                            on_progress=progress)
        finally:
            progress.close()
    except (InputError, ModelError, StoreError) as exc:
        fail(str(exc))
    if not quiet:
        click.echo(render_summary(summary), err=True)
    if summary.judged == 0 and summary.skipped == 0:
        sys.exit(1)
    if strict and summary.errors:
        sys.exit(2)


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
    if s.positional_consistency is not None:
        lines.append(f"  positional consistency (correct in both orders) "
                     f"{s.positional_consistency:.1%}")
    if s.wall_seconds > 0 and s.judged:
        lines.append(f"  {s.wall_seconds / s.judged:.1f} s/pair, "
                     f"{s.generated_tokens / s.wall_seconds:.0f} generated tok/s")
    return "\n".join(lines)
