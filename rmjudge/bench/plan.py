"""`rmjudge bench` as one call: which benchmarks from which files (`BenchSettings`, the
command's own options), then every intake file written, one engine and one run spec for all of
them, each benchmark judged (or only its stored results read) and scored (`run_bench`); or,
with `check`, each benchmark's published files read and counted, nothing judged."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from rmjudge.bench import BENCHMARKS, get
from rmjudge.bench.base import BenchError, BenchResult, Benchmark
from rmjudge.core.settings import SettingsError, setting

# `bench`'s wording of the RunOptions options it has (rmjudge.runs.setup.RunOptions)
RUN_OPTION_HELP = {
    "limit": "Judge only the first N items of each benchmark (an RM-Bench item is a prompt with "
             "its nine style pairs: an item is never cut partway).",
    "shard": "Judge only shard I of N of each benchmark (then `rmjudge merge`).",
    "commit_every": "Commit results every N pairs.",
}
RUN_FIELDS = ("limit", "shard", "commit_every")


@dataclass(frozen=True)
class BenchSettings:
    """Which benchmarks, where their published files are and where the run stores go."""

    benchmarks: tuple[str, ...] = setting(
        (), "Benchmark to run (repeatable). Default: those given --data, else every one with a "
        "Hub default (rewardbench, judgebench, helpsteer3).", option=("--benchmark", "-b"),
        multiple=True, choices=tuple(BENCHMARKS))
    data: tuple[str, ...] = setting(
        (), "Where a benchmark's published files are: a local copy (file or folder as "
        "published) or hf://datasets/ORG/NAME[:CONFIG][@SPLIT]. Repeatable.", multiple=True,
        metavar="NAME=PATH")
    outdir: str | None = setting(None, "Folder for the run stores (NAME.duckdb) and intake "
                                 "files; rerun to resume. Required unless --check.",
                                 option=("-o", "--output"), metavar="DIR")
    score_only: bool = setting(False, "Judge nothing: score the stores already in DIR (after a "
                               "merge, say).", flag="--score-only")
    check: bool = setting(False, "Judge and write nothing: read each benchmark's published "
                          "files and report rows read, items, pairs, rows refused with their "
                          "reasons and duplicate keys.", flag="--check")

    def __post_init__(self) -> None:
        if self.check and self.score_only:  # one reads published files, the other the stores
            raise SettingsError("--check and --score-only cannot be combined: --check reads the "
                                "benchmarks' published files, --score-only scores the stores in "
                                "-o DIR; give one")


def parse_data(specs: tuple[str, ...]) -> dict[str, str]:
    """`--data NAME=PATH` specs as benchmark name -> path; a malformed one is a SettingsError."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not path.strip():
            raise SettingsError(f"--data {spec!r} must look like NAME=PATH (NAME one of "
                                f"{', '.join(BENCHMARKS)})")
        out[get(name.strip()).name] = path.strip()
    return out


def plan(settings: BenchSettings) -> list[tuple[Benchmark, str]]:
    """(benchmark, its published files) to run: those named, else those given --data, else
    every one in the default set with a Hub default."""
    sources = parse_data(settings.data)
    names = (list(settings.benchmarks) or list(sources)
             or [n for n, b in BENCHMARKS.items() if b.default_source and b.in_default_set])
    out = []
    for name in dict.fromkeys(names):
        bench = get(name)
        src = sources.get(name) or bench.default_source
        if src is None:
            raise BenchError(f"{bench.title} has no Hub default; give --data {name}=PATH "
                             f"({bench.layout})")
        out.append((bench, src))
    return out


def describe_judge(info) -> str:
    """The judge's name in the table: its file (a local GGUF) or served name, with its LoRA."""
    from rmjudge.bench.runner import judge_name

    return judge_name(info.path if info.sha256 else (info.name or info.path), info.lora)


@dataclass
class BenchRun:
    """What `run_bench` did: the check reports (`check`), or the figures of each benchmark
    with the judge's name and settings."""

    reports: list = field(default_factory=list)
    results: list[BenchResult] = field(default_factory=list)
    judge: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    shard: tuple[int, int] | None = None


def _quiet(line: str) -> None:
    pass


def run_bench(settings: BenchSettings, opts, *, status: Callable[[str], None] = _quiet,
              progress: Callable[[], Any] | None = None,
              on_judged: Callable[[Benchmark, Any], None] | None = None) -> BenchRun:
    """Run `rmjudge bench`: `opts` (rmjudge.runs.setup.RunOptions) holds the judge, engine and
    server settings and `limit`, `shard`, `commit_every`. Every input is read (its intake file
    written) before anything is judged; a bad --criteria or --prompt-template fails before
    anything is written. `status` hears one line per step, `progress()` makes each benchmark's
    progress display (closed after it), `on_judged(bench, summary)` hears each judged run."""
    from rmjudge.bench.runner import (prepare, require_results, score_stored, store_file,
                                      stored_judge)

    todo = plan(settings)
    if settings.check:
        from rmjudge.bench.check import check

        return BenchRun(reports=[check(bench, src) for bench, src in todo])
    outdir = settings.outdir
    if outdir is None:
        raise SettingsError("give -o DIR, the folder for the run stores (or --check to only "
                            "read the benchmarks' files)")
    from rmjudge.files import check_not_sidecar

    check_not_sidecar(outdir)
    if settings.score_only:  # nothing is written where there is nothing to score
        if os.path.exists(outdir) and not os.path.isdir(outdir):
            raise BenchError(f"-o {outdir} is a file; --score-only reads the folder of run "
                             "stores that `rmjudge bench -o DIR` wrote: give that folder")
        if not settings.benchmarks and not settings.data:  # the default set: those run in DIR
            todo = [(b, src) for b, src in todo if os.path.exists(store_file(outdir, b))]
            if not todo:
                raise BenchError(f"no benchmark results in {outdir}: run `rmjudge bench -o "
                                 f"{outdir}` first (or name one with --benchmark)")
        for bench, _ in todo:
            require_results(bench, outdir)
    else:  # a bad --criteria or --prompt-template: before anything is written
        from rmjudge.runs.setup import check_prompting

        style = check_prompting(opts.judge)
    for bench, src in todo:  # every input is read (and its intake file written) before judging
        status(f"rmjudge: {bench.title}: {src} -> {prepare(bench, src, outdir)}")
    if settings.score_only:
        judge = stored_judge(todo[0][0], outdir)
    else:
        judge = _judge_all(todo, opts, style, outdir, status, progress, on_judged)
    results = [score_stored(b, outdir, limit=opts.limit, shard=opts.shard) for b, _ in todo]
    return BenchRun(results=results, judge=judge, settings=opts.judge.as_dict(),
                    shard=opts.shard)


def _judge_all(todo, opts, style, outdir: str, status, progress, on_judged) -> str:
    """Judge every planned benchmark with one engine and one run spec; the judge's name."""
    from rmjudge.bench.runner import judge, store_file
    from rmjudge.judging.runspec import resolve
    from rmjudge.runs.setup import load_judge_engine

    engine = load_judge_engine(opts.engine, opts.server, status)
    spec = resolve(opts.judge, engine.info, opts.engine.n_ctx, style)  # one for every benchmark
    for bench, src in todo:
        status(f"rmjudge: judging {bench.title} into {store_file(outdir, bench)}")
        display = progress() if progress is not None else None
        try:
            summary = judge(bench, src, engine, spec, outdir, limit=opts.limit, shard=opts.shard,
                            commit_every=opts.commit_every, on_progress=display,
                            announce=lambda line: status(f"rmjudge: {line}"))
        finally:
            if display is not None:
                display.close()
        if on_judged is not None:
            on_judged(bench, summary)
    return describe_judge(engine.info)
