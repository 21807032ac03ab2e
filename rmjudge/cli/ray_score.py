"""`rmjudge ray-score`: judge an input on a Ray cluster with a pool of engines (resumable)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from rmjudge.cli.mapping_options import dataset_options, input_source, label_options, map_option
from rmjudge.cli.server_options import server_options
from rmjudge.cli.options import engine_options, judge_options, settings_from, settings_options
from rmjudge.core.settings import setting
from rmjudge.core.words import count
from rmjudge.runs.ray_runner import RaySettings
from rmjudge.runs.setup import RunOptions


@dataclass(frozen=True)
class RayScoreCall:
    """What `ray-score` is given besides the judging, reading and Ray options."""

    source: str = setting(argument=True, metavar="INPUT")
    output: str = setting(help="The run store to write (.duckdb).", option=("-o", "--output"))
    quiet: bool = setting(False, "No per-batch lines and no summary.", flag="--quiet",
                          short="-q")


@click.command("ray-score")
@settings_options(RayScoreCall, only=("source", "output"))
@judge_options
@engine_options
@map_option
@label_options
@dataset_options
@server_options
@settings_options(RaySettings)
@settings_options(RunOptions, only=("overwrite", "rejudge_changed"), helps={
    "overwrite": "Discard the output and its batches; start again.",
    "rejudge_changed": "On resume, judge again the rows edited since their batch was judged, "
                       "replacing their verdicts (without it such a resume is refused)."})
@settings_options(RayScoreCall, only=("quiet",))
def command(**kw) -> None:
    """Judge INPUT (a .jsonl/.parquet/.csv file, a directory or glob of them, local or an
    object-store URI; or a Hugging Face dataset, hf://datasets/ORG/NAME or a save_to_disk
    folder, with --config/--split, read once by the driver) with ReflectRM on Ray: Ray Data
    reads it, an actor pool of engines judges batches into Parquet, and the batches are merged
    into the same tables as `rmjudge score`. Rerun the same command to resume after a failure
    (edited rows are refused, or judged again with --rejudge-changed)."""
    from rmjudge.cli.run_options import parse_run_options
    from rmjudge.runs.ray_runner import EngineFactory, ray_score

    call = settings_from(RayScoreCall, kw)
    source, output, quiet = input_source(call.source, kw), call.output, call.quiet
    opts = parse_run_options(kw)
    rs = settings_from(RaySettings, kw)

    def on_batch(row, n, judged) -> None:
        if not quiet:
            click.echo(f"batch {row['key']}: {count(row['judged'], 'pair')}, "
                       f"{count(row['errors'], 'error')}, {row['seconds']:.1f}s (this run: "
                       f"{count(n, 'batch', 'batches')}, {count(judged, 'pair')})", err=True)

    s = ray_score(source, opts.judge, opts.engine, output, rs=rs, mapper=opts.mapper,
                  overwrite=opts.overwrite,
                  rejudge_changed=opts.rejudge_changed,
                  engine_factory=EngineFactory(opts.engine, opts.server), on_batch=on_batch)
    if not quiet:
        click.echo(f"rmjudge ray-score: {count(s.files, 'file')}, "
                   f"{count(s.batches, 'batch', 'batches')} "
                   f"({s.batches_done_before} done before), judged {count(s.judged, 'pair')} "
                   f"in {s.wall_seconds:.1f}s -> {s.output}: {count(s.pairs, 'pair')}, "
                   f"{count(s.errors, 'error')}"
                   + (f" ({s.duplicates} duplicate ids)" if s.duplicates else ""), err=True)
    if s.pairs == 0:
        sys.exit(1)
