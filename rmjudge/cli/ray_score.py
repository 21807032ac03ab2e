"""`rmjudge ray-score`: judge an input on a Ray cluster with a pool of engines (resumable)."""

from __future__ import annotations

import sys

import click

from rmjudge.cli.common import fail
from rmjudge.cli.mapping_options import label_options, label_settings
from rmjudge.cli.server_options import server_options, server_settings
from rmjudge.cli.options import engine_options, engine_settings, judge_options, judge_settings


@click.command("ray-score")
@click.argument("source", metavar="INPUT")
@click.option("-o", "--output", required=True, help="The run store to write (.duckdb).")
@judge_options
@engine_options
@click.option("--map", "mapping", default=None, metavar="KEY=COL,...",
              help="Name input columns: prompt=,a=,b=,label= or chosen=,rejected=; id=.")
@label_options
@server_options
@click.option("--address", default=None,
              help="Ray cluster address (auto, ray://head:10001); default: a local Ray instance.")
@click.option("--workers", default=2, show_default=True, help="Engines in the actor pool.")
@click.option("--rows-per-batch", default=64, show_default=True,
              help="Input rows per batch: the unit of work, Parquet output and resume.")
@click.option("--cpus-per-worker", type=float, default=None,
              help="CPUs Ray reserves per engine (default: --threads, else 1).")
@click.option("--gpus-per-worker", type=float, default=None,
              help="GPUs per engine (default: 1 with --device cuda, else 0).")
@click.option("--work-dir", default=None,
              help="Batch Parquet files (default OUTPUT.ray); must be shared by all nodes.")
@click.option("--max-restarts", default=3, show_default=True, help="Restarts of a dead worker.")
@click.option("--max-task-retries", default=3, show_default=True,
              help="Retries of a batch whose worker died.")
@click.option("--overwrite", is_flag=True, help="Discard the output and its batches; start again.")
@click.option("--quiet", "-q", is_flag=True, help="No per-batch lines and no summary.")
def command(source: str, output: str, mapping: str | None, address: str | None, workers: int,
            rows_per_batch: int, cpus_per_worker: float | None, gpus_per_worker: float | None,
            work_dir: str | None, max_restarts: int, max_task_retries: int, overwrite: bool,
            quiet: bool, **kw) -> None:
    """Judge INPUT (a .jsonl/.parquet/.csv file, a directory or glob of them; local or an
    object-store URI) with ReflectRM on Ray: Ray Data reads it, an actor pool of engines judges
    batches into Parquet, and the batches are merged into the same tables as `rmjudge score`.
    Rerun the same command to resume after a failure."""
    from rmjudge.io.mapping import parse_map
    from rmjudge.models import ModelError
    from rmjudge.ray_runner import EngineFactory, RayRunError, RaySettings, ray_score
    from rmjudge.settings import SettingsError

    try:
        js = judge_settings(kw)
        es = engine_settings(kw)
        cols = parse_map(mapping)
        labels = label_settings(kw)
        server = server_settings(kw)
        rs = RaySettings(address=address, workers=workers, rows_per_batch=rows_per_batch,
                         cpus_per_worker=cpus_per_worker, gpus_per_worker=gpus_per_worker,
                         work_dir=work_dir, max_restarts=max_restarts,
                         max_task_retries=max_task_retries)
    except (SettingsError, ValueError) as exc:
        fail(str(exc))

    def on_batch(row, n, judged) -> None:
        if not quiet:
            click.echo(f"batch {row['key']}: {row['judged']} pairs, {row['errors']} errors, "
                       f"{row['seconds']:.1f}s (this run: {n} batches, {judged} pairs)", err=True)

    try:
        s = ray_score(source, js, es, output, rs=rs, mapping=cols, labels=labels,
                      overwrite=overwrite,
                      engine_factory=EngineFactory(es, server), on_batch=on_batch)
    except (RayRunError, ModelError) as exc:
        fail(str(exc))
    if not quiet:
        click.echo(f"rmjudge ray-score: {s.files} file(s), {s.batches} batches "
                   f"({s.batches_done_before} done before), judged {s.judged} pairs in "
                   f"{s.wall_seconds:.1f}s -> {s.output}: {s.pairs} pairs, {s.errors} errors"
                   + (f" ({s.duplicates} duplicate ids)" if s.duplicates else ""), err=True)
    if s.pairs == 0:
        sys.exit(1)
