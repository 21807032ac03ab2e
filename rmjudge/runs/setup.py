"""One run set-up under every front door: typed options -> engine -> intake -> Judge -> store.

`RunOptions` holds what a scoring run is given (the judge, engine and server settings, how rows
become pairs, and the run's own options). `load_judge_engine` loads the engine the way every
command does; `open_input` opens an input's intake (labels checked first); `build_judge` and
`judge_rows` are a run's Judge and one batch of rows through intake and Judge (a Ray worker's);
`dry_run` estimates a run (`score --dry-run`); `judge_input` owns a run's orchestration (input
and output checks before the model loads, engine loading, row counting,
`rmjudge.runs.pipeline.score`). `rmjudge score`, `eval` on unjudged input, `bench`, `ray-score`,
`merge --input`, `rmjudge-train build-data` and the library share them; the CLI only parses
options into `RunOptions` and prints what the hooks hand it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from rmjudge.io.mapping import Mapper
from rmjudge.core.settings import EngineSettings, JudgeSettings, SettingsError

if TYPE_CHECKING:
    from rmjudge.engine.server import ServerSettings
    from rmjudge.io.intake import Intake, RowFailure
    from rmjudge.io.rows import RawRow
    from rmjudge.judging.judge import Judge
    from rmjudge.runs.pipeline import Summary
    from rmjudge.judging.protocol import PairResult


@dataclass(frozen=True)
class RunOptions:
    """Everything a scoring run is given besides its input and output."""

    judge: JudgeSettings
    engine: EngineSettings
    mapper: Mapper
    mapping: dict
    limit: int | None = None
    shard: tuple[int, int] | None = None
    commit_every: int = 8
    overwrite: bool = False
    rejudge_changed: bool = False
    server: "ServerSettings | None" = None


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    """`--shard I/N` as (I, N); a malformed one raises SettingsError."""
    if spec is None:
        return None
    i, sep, n = spec.partition("/")
    if not sep or not i.strip().isdigit() or not n.strip().isdigit() or not 0 <= int(i) < int(n):
        raise SettingsError(f"--shard must look like I/N with 0 <= I < N, got {spec!r}")
    return int(i), int(n)


def _quiet(line: str) -> None:
    pass


def load_judge_engine(es: EngineSettings, server: "ServerSettings | None" = None,
                      status: Callable[[str], None] = _quiet):
    """The judge's engine: the server's when `server` is given, else the local model. `status`
    hears one line about it ("rmjudge: ..."). Ctrl-C while the model loads becomes
    `Interrupted`."""
    from rmjudge.engine import load_engine
    from rmjudge.engine.models import resolve_model

    if server is not None:
        engine = load_engine(es, server=server)
        status(f"rmjudge: {engine.describe()}")
        return engine
    status(f"rmjudge: loading the judge {resolve_model(es.model)} ...")
    try:
        return load_engine(es)
    except KeyboardInterrupt:
        from rmjudge.runs.pipeline import Interrupted

        raise Interrupted("interrupted while the judge was loading, before any pair was "
                          "judged; rerun the same command to start") from None


def open_input(source: str, mapper: Mapper, limit: int | None = None) -> "Intake":
    """`source` as pairs and row failures, opened the one way every front door reads an input
    (the dry run, merge's --input check, the Ray driver, build-data): its rows with the labels
    checked before anything is judged (`io.intake.checked_rows`), through an `Intake` that
    stops after `limit` rows."""
    from rmjudge.io.intake import Intake, checked_rows

    return Intake(checked_rows(source, mapper, limit), mapper, limit=limit)


def build_judge(engine, opts: RunOptions) -> "Judge":
    """The Judge of a run: its judge settings on `engine`, within the context `--ctx-size` sets
    (the run spec's)."""
    from rmjudge.judging.judge import Judge

    return Judge(engine, opts.judge, n_ctx=opts.engine.n_ctx)


def judge_rows(judge: "Judge", rows: Iterable["RawRow"], mapper: Mapper
               ) -> tuple[list["PairResult"], list["RowFailure"]]:
    """Raw rows judged whole (a Ray worker's batch): the results, and the rows that did not
    become one (rows intake refuses, pairs the judge could not judge: `RowFailure.unjudged`)."""
    from rmjudge.io.intake import Intake, RowFailure
    from rmjudge.judging.judge import Failure

    failures: list[RowFailure] = []
    pairs = []
    for item in Intake(rows, mapper):
        if isinstance(item, RowFailure):
            failures.append(item)
        else:
            pairs.append(item)
    results = []
    for item in judge.run(pairs):
        if isinstance(item, Failure):
            failures.append(RowFailure.unjudged(item.pair, item.reason))
        else:
            results.append(item)
    return results, failures


def with_label_criteria(js: JudgeSettings, label_choice: str | None) -> JudgeSettings:
    """`js` with the built-in criterion that `--label label_choice` comes with (`--label safer`:
    harmless) when no --criteria is given (rmjudge.prompts.criteria)."""
    from dataclasses import replace

    from rmjudge.prompts.criteria import label_criteria

    name = label_criteria(label_choice)
    return replace(js, criteria=name) if name and js.criteria is None else js


def criteria_note(js: JudgeSettings, label_choice: str | None) -> str | None:
    """The status line naming the criteria a run judges by, or None without criteria."""
    from rmjudge.prompts.criteria import BUILTIN, label_criteria

    if js.criteria is None:
        return None
    if js.criteria == label_criteria(label_choice):
        return (f"rmjudge: criteria: {js.criteria} (the built-in that --label {label_choice} "
                "comes with; --criteria changes it)")
    what = js.criteria if js.criteria in BUILTIN or js.criteria.startswith("@") else "given text"
    return f"rmjudge: criteria: {what}"


def check_prompting(js: JudgeSettings) -> None:
    """A bad --criteria or --prompt-template fails here, before any model loads."""
    from rmjudge.prompts import prompt_style

    prompt_style(js.criteria, js.prompt_template)


def check_run_paths(source: str, output: str | None) -> None:
    """A missing or unreadable input and an unusable output fail before any model loads."""
    from rmjudge.io.readers import detect_format
    from rmjudge.runs.pipeline import check_output, default_output

    if output is not None and not output.strip():
        raise SettingsError("-o is empty; give an output file name, or leave -o out for "
                            "INPUT.judged.duckdb")
    detect_format(source)
    check_output(source, output or default_output(source))


def dry_run(source: str, opts: RunOptions):
    """`score --dry-run`: the input validated and the work estimated with the tokenizer only
    (rmjudge.runs.dryrun). With --server the prompts are counted with the served model's tokenizer,
    which `--model FILE.gguf` names, and the estimate is the server's requests and tokens."""
    from rmjudge.runs.dryrun import dry_run as estimate
    from rmjudge.core.interrupts import graceful

    server = opts.server
    if server is not None and opts.engine.model is None:
        raise SettingsError("--dry-run with --server counts prompt tokens with the served "
                            "model's tokenizer: add --model FILE.gguf (the GGUF it serves)")
    check_prompting(opts.judge)
    with graceful():  # Ctrl-C while the tokenizer loads is not lost in llama.cpp's logs
        return estimate(lambda: open_input(source, opts.mapper, opts.limit), opts.judge,
                        opts.engine, server=None if server is None else server.public)


def judge_input(source: str, output: str | None, opts: RunOptions, *, engine=None,
                status: Callable[[str], None] = _quiet,
                progress: Callable[[int | None, Any], Any] | None = None) -> "Summary":
    """Judge `source` into `output` (as `rmjudge score` does). `engine`: one already loaded
    (else `load_judge_engine`). `status` hears one-line notes; `progress(total, engine)`
    (total: the input's rows, at most `--limit`) makes the progress display, which is called
    with each `Progress`, hears notes through `.note(line)` and is closed at the end; without
    it the rows are not counted. Returns the Summary, with the engine that judged.

    Ctrl-C and SIGTERM are handled the run's way (rmjudge.core.interrupts) from before the model
    loads, so one that arrives while llama.cpp loads it is not lost."""
    from rmjudge.core.interrupts import graceful

    with graceful():
        return _judge_input(source, output, opts, engine, status, progress)


def _judge_input(source, output, opts: RunOptions, engine, status, progress) -> "Summary":
    from rmjudge.io.readers import count_rows
    from rmjudge.runs.pipeline import Interrupted, score

    check_run_paths(source, output)
    check_prompting(opts.judge)
    note = criteria_note(opts.judge, opts.mapper.label_choice)
    if note:
        status(note)
    display = None
    try:
        if engine is None:
            engine = load_judge_engine(opts.engine, opts.server, status)
        if progress is not None:
            total = count_rows(source)
            if total is not None and opts.limit:
                total = min(total, opts.limit)
            display = progress(total, engine)
        summary = score(source, engine, opts.judge, output=output, mapper=opts.mapper,
                        overwrite=opts.overwrite, limit=opts.limit, shard=opts.shard,
                        commit_every=opts.commit_every, on_progress=display,
                        rejudge_changed=opts.rejudge_changed,
                        announce=(lambda line: display.note(f"rmjudge: {line}"))
                        if display is not None else None,
                        n_ctx=opts.engine.n_ctx)
    except KeyboardInterrupt:  # before the run's own handling began (a Ctrl-C held while the
        # judge loaded can be delivered just after the load returned), or after it ended
        raise Interrupted("interrupted; no judged pair is lost: rerun the same command to "
                          "resume") from None
    finally:
        if display is not None:
            display.close()
    summary.engine = engine
    return summary
