"""`rmjudge bench`: judge standard pairwise benchmarks and print their official figures."""

from __future__ import annotations

import click

from rmjudge.cli.common import make_progress, status
from rmjudge.cli.options import engine_options, engine_settings, judge_options, judge_settings
from rmjudge.cli.server_options import server_options, server_settings


from rmjudge.bench import BENCHMARKS


@click.command("bench")
@click.option("--benchmark", "-b", "benchmarks", multiple=True,
              type=click.Choice(list(BENCHMARKS)),
              help="Benchmark to run (repeatable). Default: those given --data, else every one "
              "with a Hub default (rewardbench, judgebench, helpsteer3).")
@click.option("--data", "data", multiple=True, metavar="NAME=PATH",
              help="Where a benchmark's published files are: a local copy (file or folder as "
              "published) or hf://datasets/ORG/NAME[:CONFIG][@SPLIT]. Repeatable.")
@click.option("-o", "--output", "outdir", default=None, metavar="DIR",
              help="Folder for the run stores (NAME.duckdb) and intake files; rerun to resume. "
              "Required unless --check.")
@judge_options
@engine_options
@server_options
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Judge only the first N items of each benchmark (an RM-Bench item is a prompt "
              "with its nine style pairs: an item is never cut partway).")
@click.option("--shard", default=None, metavar="I/N",
              help="Judge only shard I of N of each benchmark (then `rmjudge merge`).")
@click.option("--commit-every", default=8, show_default=True,
              help="Commit results every N pairs.")
@click.option("--score-only", is_flag=True,
              help="Judge nothing: score the stores already in DIR (after a merge, say).")
@click.option("--check", is_flag=True,
              help="Judge and write nothing: read each benchmark's published files and report "
              "rows read, items, pairs, rows refused with their reasons and duplicate keys.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines or run summaries.")
def command(benchmarks: tuple[str, ...], data: tuple[str, ...], outdir: str | None, limit, shard,
            commit_every: int, score_only: bool, check: bool, as_json: bool, quiet: bool,
            **kw) -> None:
    """Judge standard pairwise benchmarks with the same judge options as `score` and print a
    table in the paper's layout, each benchmark scored as its authors score it (docs/bench.md).
    """
    from rmjudge.bench import get
    from rmjudge.bench.base import BenchError
    from rmjudge.bench.runner import (prepare, require_results, score_stored, store_file,
                                      stored_judge)
    from rmjudge.cli.score import render_summary
    from rmjudge.runs.setup import check_prompting, load_judge_engine, parse_shard
    from rmjudge.core.settings import SettingsError

    sources = parse_data(data)
    names = (list(benchmarks) or list(sources)
             or [n for n, b in BENCHMARKS.items() if b.default_source and b.in_default_set])
    plan = []
    for name in dict.fromkeys(names):
        bench = get(name)
        src = sources.get(name) or bench.default_source
        if src is None:
            raise BenchError(f"{bench.title} has no Hub default; give --data {name}=PATH "
                             f"({bench.layout})")
        plan.append((bench, src))
    if check:
        return check_files(plan, as_json)
    if outdir is None:
        raise SettingsError("give -o DIR, the folder for the run stores (or --check to only "
                            "read the benchmarks' files)")
    js, es, server = judge_settings(kw), engine_settings(kw), server_settings(kw)
    shard_spec = parse_shard(shard)
    if not score_only:  # a bad --criteria or --prompt-template: before anything is written
        style = check_prompting(js)
    if score_only:  # nothing is written where there is nothing to score
        for bench, _ in plan:
            require_results(bench, outdir)
    for bench, src in plan:  # every input is read (and its intake file written) before judging
        status(f"rmjudge: {bench.title}: {src} -> {prepare(bench, src, outdir)}", quiet)
    judge_name = stored_judge(plan[0][0], outdir) if score_only else ""
    if not score_only:
        from rmjudge.bench.runner import judge
        from rmjudge.judging.runspec import resolve

        engine = load_judge_engine(es, server, lambda line: status(line, quiet))
        spec = resolve(js, engine.info, es.n_ctx, style)  # one spec for every benchmark
        judge_name = describe_judge(engine.info)
        for bench, src in plan:
            status(f"rmjudge: judging {bench.title} into {store_file(outdir, bench)}", quiet)
            progress = make_progress(not quiet)
            try:
                summary = judge(bench, src, engine, spec, outdir, limit=limit, shard=shard_spec,
                                commit_every=commit_every, on_progress=progress,
                                announce=lambda line: status(f"rmjudge: {line}", quiet))
            finally:
                progress.close()
            if not quiet:
                if bench.ranked:
                    from rmjudge.cli.rank import render_summary as render_ranked

                    click.echo(render_ranked(summary), err=True)
                else:
                    click.echo(render_summary(summary), err=True)
    results = [score_stored(b, outdir, limit=limit, shard=shard_spec) for b, _ in plan]
    from rmjudge.bench.table import averages, render

    if as_json:
        import orjson

        click.echo(orjson.dumps({"judge": judge_name, "settings": js.as_dict(),
                                 "benchmarks": [r.as_dict() for r in results],
                                 "averages": [a.as_dict() for a in averages(results)]},
                                option=orjson.OPT_INDENT_2).decode())
        return

    click.echo(render(results, judge_name))
    if shard_spec is not None:
        click.echo(f"\nnote: shard {shard_spec[0]}/{shard_spec[1]} only; merge the shards' "
                   "stores with `rmjudge merge` and rerun with --score-only for the full table")


def check_files(plan: list, as_json: bool) -> None:
    """`--check`: each benchmark's published files read and counted, nothing judged."""
    from rmjudge.bench.check import check, render

    reports = [check(bench, src) for bench, src in plan]
    if as_json:
        import orjson

        click.echo(orjson.dumps([r.as_dict() for r in reports],
                                option=orjson.OPT_INDENT_2).decode())
        return
    click.echo("\n\n".join(render(r) for r in reports))


def parse_data(specs: tuple[str, ...]) -> dict[str, str]:
    from rmjudge.bench import get
    from rmjudge.core.settings import SettingsError

    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not path.strip():
            raise SettingsError(f"--data {spec!r} must look like NAME=PATH (NAME one of "
                                f"{', '.join(BENCHMARKS)})")
        out[get(name.strip()).name] = path.strip()
    return out


def describe_judge(info) -> str:
    from rmjudge.bench.runner import judge_name

    return judge_name(info.path if info.sha256 else (info.name or info.path), info.lora)
