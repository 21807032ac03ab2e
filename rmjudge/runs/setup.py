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

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple

from rmjudge.core.interrupts import is_interrupt
from rmjudge.io.mapping import Mapper
from rmjudge.core.settings import EngineSettings, JudgeSettings, SettingsError, setting

if TYPE_CHECKING:
    from rmjudge.engine.server import ServerSettings
    from rmjudge.io.intake import Intake, RowFailure
    from rmjudge.io.memory import MemoryInput
    from rmjudge.io.rows import RawRow
    from rmjudge.judging.judge import Judge
    from rmjudge.runs.pipeline import Summary
    from rmjudge.prompts import PromptStyle
    from rmjudge.judging.protocol import PairResult
    from rmjudge.judging.runspec import RunSpec


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    """`--shard I/N` as (I, N); a malformed one raises SettingsError."""
    if spec is None:
        return None
    i, sep, n = spec.partition("/")
    if not sep or not i.strip().isdigit() or not n.strip().isdigit() or not 0 <= int(i) < int(n):
        raise SettingsError(f"--shard must look like I/N with 0 <= I < N, got {spec!r}")
    return int(i), int(n)


@dataclass(frozen=True)
class RunOptions:
    """Everything a scoring run is given besides its input and output. `limit`, `shard`,
    `commit_every`, `overwrite` and `rejudge_changed` are options of every judging command
    (`score`, `eval`, `rank`, `bench`, `ray-score`: each takes those it needs and may word their
    help its own way)."""

    judge: JudgeSettings = setting(cli=False)
    engine: EngineSettings = setting(cli=False)
    mapper: Mapper = setting(cli=False)  # how rows become pairs (its `mapping` is --map's)
    limit: int | None = setting(None, "Read only the first N rows.", range=(1, None))
    shard: tuple[int, int] | None = setting(
        None, "Judge only shard I of N (stable partition by pair id), for array jobs.",
        metavar="I/N", type=str, parse=parse_shard)
    commit_every: int = setting(8, "Commit results every N pairs (a crash loses at most the "
                                "pairs in flight).", range=(1, None))
    overwrite: bool = setting(False, "Discard an existing output (an rmjudge store no other run "
                              "is writing) and start again.", flag="--overwrite")
    rejudge_changed: bool = setting(False, "On resume, judge again the rows edited since they "
                                    "were judged, replacing their verdicts (without it such a "
                                    "resume is refused).", flag="--rejudge-changed")
    server: "ServerSettings | None" = setting(None, cli=False)


def make_run_options(js: JudgeSettings, es: EngineSettings, mapping: dict[str, str],
                     label_values: str | None = None, label_choice: str | None = None,
                     server: "ServerSettings | None" = None, **run: Any) -> RunOptions:
    """The `RunOptions` of parsed settings: the Mapper of `--map` columns and the label options
    (`--label-values`, `--label`, parsed here: a malformed one raises a UserError), and the
    built-in criteria `--label` comes with. `run`: the other `RunOptions` fields. The CLI
    (`rmjudge.cli.run_options.parse_run_options`) and the Python API (`rmjudge.api`) both
    make their options here."""
    from rmjudge.io.mapping import LabelOptions

    labels = LabelOptions.parse(label_values, label_choice)
    js = with_label_criteria(js, labels.choice)
    return RunOptions(js, es, labels.mapper(mapping, js.seed), server=server, **run)


def _quiet(line: str) -> None:
    pass


def load_judge_engine(es: EngineSettings, server: "ServerSettings | None" = None,
                      status: Callable[[str], None] = _quiet):
    """The judge's engine: the server's when `server` is given, else the local model. `status`
    hears one line about it ("rmjudge: ..."). Ctrl-C while the model loads becomes
    `Interrupted`."""
    from rmjudge.engine import load_engine

    if server is not None:
        engine = load_engine(es, server=server)
        status(f"rmjudge: {engine.describe()}")
        return engine
    from rmjudge.models.resolve import judge_label, resolve_judge

    try:
        chosen = resolve_judge(es)  # once per run (the demo judge file made when missing)
        status(f"rmjudge: loading the judge {judge_label(es, chosen)} ...")
        return load_engine(chosen)
    except KeyboardInterrupt:
        from rmjudge.runs.pipeline import Interrupted

        raise Interrupted("interrupted while the judge was loading, before any pair was "
                          "judged; rerun the same command to start") from None


def open_input(source: str, mapper: Mapper, limit: int | None = None,
               shard: tuple[int, int] | None = None) -> "Intake":
    """`source` as pairs and row failures, opened the one way every front door reads an input
    (the dry run, merge's --input check, the Ray driver, build-data): its rows with the labels
    checked before anything is judged (`io.intake.checked_rows`), through an `Intake` that
    stops after `limit` rows and keeps the pairs of `shard` (I, N) only, as a run does."""
    from rmjudge.io.intake import Intake, checked_rows

    return Intake(checked_rows(source, mapper, limit), mapper, shard=shard, limit=limit)


def build_judge(engine, opts: RunOptions, spec: "RunSpec | None" = None) -> "Judge":
    """The Judge of a run: `spec` (the run's, `run_spec`), else its judge settings resolved on
    `engine` within the context `--ctx-size` sets."""
    from rmjudge.judging.judge import Judge

    return Judge(engine, spec or run_spec(engine, opts))


def judge_rows(judge: "Judge", rows: Iterable["RawRow"], mapper: Mapper, *,
               judged: "dict[str, tuple[int, str | None]] | None" = None,
               rejudge_changed: bool = False
               ) -> tuple[list["PairResult"], list["RowFailure"], list[str]]:
    """Raw rows judged whole (a Ray worker's batch): the results, the rows that did not
    become one (rows intake refuses, pairs the judge could not judge: `RowFailure.unjudged`),
    and the stored pairs the results replace. `judged`: the pairs these rows were judged as
    before (a finished batch met again): the same pairs are skipped, and an edited row is
    refused with `ChangedRows`, before anything is judged, unless `rejudge_changed` (resume's
    rules: rmjudge.io.intake)."""
    from rmjudge.io.intake import Intake, RowFailure
    from rmjudge.judging.judge import Failure

    failures: list[RowFailure] = []
    pairs = []
    intake = Intake(rows, mapper, judged=judged, rejudge_changed=rejudge_changed)
    for item in intake:
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
    replaced = [intake.replaces[p.id] for p in pairs if p.id in intake.replaces]
    return results, failures, replaced + intake.dropped


def with_label_criteria(js: JudgeSettings, label_choice: str | None) -> JudgeSettings:
    """`js` with the built-in criterion that `--label label_choice` comes with (`--label safer`:
    harmless) when no --criteria is given (rmjudge.prompts.criteria)."""
    from dataclasses import replace

    from rmjudge.prompts.choice import format_has_rubric
    from rmjudge.prompts.criteria import label_criteria

    name = label_criteria(label_choice)
    if not name or js.criteria is not None or not format_has_rubric(js.judge_format):
        return js  # a format without a rubric slot judges by its own prompt
    return replace(js, criteria=name)


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


def check_prompting(js: JudgeSettings) -> "PromptStyle":
    """The prompt style of --criteria, --prompt-template and --judge-format, read once, before
    any model loads (a bad value fails here); the run hands it to `runspec.resolve`."""
    from rmjudge.prompts.choice import run_style

    return run_style(js.criteria, js.prompt_template, js.judge_format)


def run_spec(engine, opts: RunOptions, style: "PromptStyle | None" = None) -> "RunSpec":
    """The run's spec, built once: its judge settings on `engine`'s model within the context
    `--ctx-size` sets, with the prompt style already read (`check_prompting`)."""
    from rmjudge.judging.runspec import resolve

    return resolve(opts.judge, engine.info, opts.engine.n_ctx, style)


class CheckedPaths(NamedTuple):
    """A run's input and output as `check_run_paths` found them."""

    output: str  # `-o`, or the default next to the input
    fmt: str  # the input's format (`io.readers.detect_format`), found once per run


def check_run_paths(source: str, output: str | None) -> CheckedPaths:
    """A missing or unreadable input and an unusable output fail before any model loads.
    Returns the output (`output`, or the default next to the input) and the input's format,
    which the run hands down instead of finding it again."""
    from rmjudge.io.readers import detect_format
    from rmjudge.runs.pipeline import check_output, default_output
    from rmjudge.files import check_platform

    check_platform()
    if output is not None and not output.strip():
        raise SettingsError("-o is empty; give an output file name, or leave -o out for "
                            "INPUT.judged.duckdb")
    fmt = detect_format(source)
    out = output or default_output(source)
    check_output(source, out)
    return CheckedPaths(out, fmt)


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
    style = check_prompting(opts.judge)
    with graceful():  # Ctrl-C while the tokenizer loads is not lost in llama.cpp's logs
        return estimate(lambda: open_input(source, opts.mapper, opts.limit, opts.shard),
                        opts.judge, opts.engine,
                        server=None if server is None else server.public, style=style)


def _close_quietly(engine) -> None:
    try:
        engine.close()
    except Exception:  # noqa: BLE001 - the run's own error is the one to report
        pass


def judge_input(source: "str | MemoryInput", output: str | None, opts: RunOptions, *,
                engine=None, status: Callable[[str], None] = _quiet,
                progress: Callable[[int | None, Any], Any] | None = None,
                on_commit: Callable[[Any, list[str], list[int]], None] | None = None,
                style: "PromptStyle | None" = None, checked: CheckedPaths | None = None
                ) -> "Summary":
    """Judge `source` into `output` (as `rmjudge score` does). `engine`: one already loaded
    (else `load_judge_engine`). `status` hears one-line notes; `progress(total, engine)`
    (total: the input's rows, at most `--limit`) makes the progress display, which is called
    with each `Progress`, hears notes through `.note(line)` and is closed at the end; without
    it the rows are not counted. `on_commit`: see `rmjudge.runs.pipeline.score`. `source`: a path
    or rows held in Python (`rmjudge.io.memory.MemoryInput`, the Python API's). `style`: the
    prompt style a caller already read with `check_prompting`; `checked`: what the caller's
    `check_run_paths` found for this source and output (the API's `score_batches`, which
    checks before its first chunk), so the option files are read, the output checked and the
    input's format found once.
    Returns the Summary, with the engine that judged.

    Ctrl-C and SIGTERM are handled the run's way (rmjudge.core.interrupts) from before the model
    loads, so one that arrives while llama.cpp loads it is not lost."""
    from rmjudge.core.interrupts import graceful

    with graceful():
        return _judge_input(source, output, opts, engine, status, progress, on_commit,
                            style, checked)


def _judge_input(source, output, opts: RunOptions, engine, status, progress,
                 on_commit=None, style=None, checked: CheckedPaths | None = None) -> "Summary":
    from rmjudge.io.readers import count_rows
    from rmjudge.runs.pipeline import Interrupted, score_checked

    out, fmt = checked or check_run_paths(source, output)
    if style is None:
        style = check_prompting(opts.judge)
    note = criteria_note(opts.judge, opts.mapper.label_choice)
    if note:
        status(note)
    display = None
    loaded = engine is None
    try:
        if engine is None:
            engine = load_judge_engine(opts.engine, opts.server, status)
        if progress is not None:
            total = count_rows(source, fmt)
            if total is not None and opts.limit:
                total = min(total, opts.limit)
            display = progress(total, engine)
        summary = score_checked(source, out, engine, run_spec(engine, opts, style), opts.mapper,
                                overwrite=opts.overwrite, limit=opts.limit, shard=opts.shard,
                                commit_every=opts.commit_every, on_progress=display,
                                rejudge_changed=opts.rejudge_changed, input_format=fmt,
                                announce=(lambda line: display.note(f"rmjudge: {line}"))
                                if display is not None else None, on_commit=on_commit)
    except (KeyboardInterrupt, RuntimeError) as exc:  # before the run's own handling began (a
        # Ctrl-C held while the judge loaded can be delivered just after the load returned), or
        # after it ended; RuntimeError: DuckDB's form of a Ctrl-C during a query
        if not is_interrupt(exc):
            raise
        raise Interrupted("interrupted; no judged pair is lost: rerun the same command to "
                          "resume") from None
    finally:
        if display is not None:
            display.close()
        if loaded and sys.exc_info()[1] is not None:  # the run failed: close the engine it
            _close_quietly(engine)                     # loaded (a server's requests in flight)
    summary.engine = engine
    return summary
