"""The `score` job as a library call: input -> pairs -> Judge -> run store (-> export).

`score()` streams the input, records every bad row in `errors` with a reason, skips pairs that
an earlier run of the same output already judged, commits results in small chunks and returns a
`Summary`. The CLI only parses options, calls this and prints.
"""

from __future__ import annotations

import re
import time
from itertools import chain
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

from rmjudge.core.errors import EXIT_INTERRUPTED, UserError
from rmjudge.core.interrupts import critical, deliver_pending, graceful
from rmjudge.io.intake import ChangedRows, Intake, RowFailure, checked_rows, input_identity
from rmjudge.io.mapping import Mapper
from rmjudge.io.readers import RawRow, default_output_stem
from rmjudge.judging.judge import Failure, Judge
from rmjudge.judging.protocol import PairResult
from rmjudge.judging.runspec import resolve, run_record
from rmjudge.core.settings import JudgeSettings
from rmjudge.store import (FAILED, FINISHED, INTERRUPTED, Store, StoreError, check_output,
                           export_files, output_format, store_path)
from rmjudge.core.types import Pair

COMMIT_EVERY_PAIRS = 8
COMMIT_EVERY_SECONDS = 20.0


class Interrupted(UserError):
    """Ctrl-C during a run: what was judged is saved; the message says how to resume."""

    exit_code = EXIT_INTERRUPTED


def default_output(source: str) -> str:
    """`x.jsonl` -> `x.judged.duckdb` (hub ids, folders and globs: see `default_output_stem`)."""
    return f"{default_output_stem(source)}.judged.duckdb"


@dataclass
class Progress:
    done: int = 0
    committed: int = 0  # judged pairs stored
    errors: int = 0
    skipped: int = 0
    rows_read: int = 0
    generated_tokens: int = 0
    parse_failures: int = 0
    generations: int = 0
    flips: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


@dataclass
class Summary:
    output: str
    files: list[str]
    rows_read: int
    judged: int
    skipped: int
    errors: int
    labelled: int
    consistent: int
    both_orders: int
    verdicts: dict[str, int]
    parse_failures: int
    forced: int
    generations: int
    generated_tokens: int
    wall_seconds: float
    error_reasons: dict[str, int]  # kind of error (`error_kind`) -> rows of this run
    error_rows: dict[str, list[int]] = field(default_factory=dict)  # kind -> first row numbers
    metrics: dict = field(default_factory=dict)  # rmjudge.core.counts.metrics
    rollout_counts: dict = field(default_factory=dict)  # rmjudge.core.counts.sample_counts
    notes: list[str] = field(default_factory=list)  # the run spec's resolved defaults, in words
    engine: Any = field(default=None, repr=False, compare=False)  # the engine that judged
    # through --server: this run's prompt tokens sent and tokens received (None in-process)
    tokens_sent: int | None = None
    tokens_received: int | None = None

    @property
    def accuracy(self) -> float | None:
        """Both orders pooled (the paper's accuracy; core/counts.py)."""
        return self.metrics.get("accuracy")

    @property
    def positional_consistency(self) -> float | None:
        return self.metrics.get("positional_consistency")


def verdict_settings(js: JudgeSettings, info) -> dict:
    """What decides verdicts (see `RunSpec.verdict_settings`)."""
    return resolve(js, info).verdict_settings()


_ROW_PREFIX = re.compile(r"^row \d+:? |^(?:.* )?line \d+ ")
_QUOTED_OR_NUMBER = re.compile(r"('[^']*'|\"[^\"]*\")|\d+")
ERROR_ROW_EXAMPLES = 3  # row numbers kept per kind of error, for the summary


def error_kind(reason: str) -> str:
    """The kind of an error row's reason, for the summary: without its row or line number,
    its fix (after ';'), its details (in parentheses), the offending value or id, and with
    other numbers as N, so 3,000 rows with the same fault are one kind."""
    r, before = reason.split(";")[0], None
    while r != before:  # details in parentheses, innermost first
        before, r = r, re.sub(r"\s*\([^()]*\)", "", r)
    r = _ROW_PREFIX.sub("", r.split(" (")[0].strip(), count=1)
    r = re.sub(r"^duplicate id .*", "duplicate id", r)
    r = re.sub(r" holds .*", " holds a value that cannot be used", r)
    r = _QUOTED_OR_NUMBER.sub(lambda m: m.group(1) or "N", r)
    return (r[:100] + "...") if len(r) > 100 else (r or "unreadable row")


def score(
    source: str,
    engine,
    js: JudgeSettings,
    *,
    output: str | None = None,
    mapping: dict[str, str] | None = None,
    mapper: Mapper | None = None,
    overwrite: bool = False,
    limit: int | None = None,
    shard: tuple[int, int] | None = None,
    commit_every: int = COMMIT_EVERY_PAIRS,
    on_progress: Callable[[Progress], None] | None = None,
    announce: Callable[[str], None] | None = None,
    rejudge_changed: bool = False,
    n_ctx: int | None = None,
) -> Summary:
    """Judge `source` into `output` (a run: intake -> Judge -> store). `mapper` (or the plain
    `mapping` of --map) turns rows into pairs; `announce` hears how the input is read, once,
    before judging starts. A row judged by an earlier run that has changed since stops the run
    (`StoreError` naming the rows), or with `rejudge_changed` is judged again and its new verdict
    replaces the old one. `n_ctx`: the per-sequence limit `--ctx-size` sets (the run spec's).
    """
    out = output or default_output(source)
    fmt = output_format(out)
    check_output(source, out)
    mapper = mapper or Mapper(mapping or {}, seed=js.seed)
    # Labels that need --label-values stop the run here, before any output is touched.
    rows: Iterator[RawRow] = checked_rows(source, mapper, limit)
    first = next(rows, None)  # fails fast on a missing or unreadable input, before any output
    ahead = [first] if first is not None else []
    while ahead and ahead[-1].obj is None and len(ahead) < 10_000:  # the first readable row
        nxt = next(rows, None)
        if nxt is None:
            break
        ahead.append(nxt)
    identity = input_identity(source, next((r for r in ahead if r.obj is not None),
                                           ahead[0] if ahead else None))
    rows = chain(ahead[1:], rows)
    if announce and mapper.schema is not None:
        announce(f"input read as {mapper.describe()}")
    with critical():  # a Ctrl-C while DuckDB creates the tables is held, not a DuckDB error
        store = Store(store_path(out), overwrite=overwrite, exports=export_files(out))
    try:
        with graceful():
            return _score(store, first, rows, engine, js, out, fmt, source, mapper, limit, shard,
                          commit_every, on_progress, identity, rejudge_changed, n_ctx)
    finally:
        store.close()


def _score(store: Store, first, rows, engine, js, out, fmt, source, mapper, limit, shard,
           commit_every, on_progress, identity, rejudge_changed=False, n_ctx=None) -> Summary:
    spec = resolve(js, engine.info, n_ctx)
    settings = spec.verdict_settings()
    reading = input_reading(mapper)
    if reading:  # how rows become pairs and labels: a rerun must read them alike
        settings["input_reading"] = reading
    store.check_settings(settings)
    store.check_input(identity)
    info = engine.info
    store.start_run({
        **run_record(info, settings, source, None if shard is None else f"{shard[0]}/{shard[1]}"),
        "schema": mapper.describe() if mapper.schema is not None else None,
    })
    prog = Progress()
    pending_errors: list[dict] = []
    error_reasons: dict[str, int] = {}
    error_rows: dict[str, list[int]] = {}
    stream = rows if first is None else chain([first], rows)
    intake = Intake(stream, mapper, shard=shard, limit=limit, judged=store.judged(),
                    rejudge_changed=rejudge_changed)
    pending_drop: list[str] = []  # stored pairs whose changed rows were judged again

    def replaced(pair: Pair) -> None:
        old = intake.replaces.pop(pair.id, None)
        if old is not None:
            pending_drop.append(old)
        pending_drop.extend(intake.dropped)  # changed rows not judged again here
        intake.dropped.clear()

    def add_error(f: RowFailure) -> None:
        pending_errors.append(f.as_error())
        prog.errors += 1
        k = error_kind(f.reason)
        error_reasons[k] = error_reasons.get(k, 0) + 1
        examples = error_rows.setdefault(k, [])
        if len(examples) < ERROR_ROW_EXAMPLES:
            examples.append(f.row_number)

    def pairs() -> Iterator[Pair]:
        for item in intake:
            prog.rows_read = intake.rows_read
            prog.skipped = intake.skipped
            if isinstance(item, RowFailure):
                add_error(item)
            else:
                yield item
        prog.rows_read = intake.rows_read
        prog.skipped = intake.skipped

    judge = Judge(engine, js, n_ctx=n_ctx)
    batch: list[PairResult] = []
    last_commit = time.monotonic()
    counts = _Counts()
    try:
        deliver_pending()  # a signal held while the store was opened and the run recorded
        for item in judge.run(pairs()):
            if isinstance(item, Failure):
                replaced(item.pair)
                add_error(RowFailure.unjudged(item.pair, item.reason))
            else:
                replaced(item.pair)
                batch.append(item)
                counts.add(item)
                prog.done += 1
                prog.generations = counts.generations
                prog.parse_failures = counts.parse_failures
                prog.flips = counts.flips
            prog.generated_tokens = engine.generated_tokens
            if len(batch) >= commit_every or time.monotonic() - last_commit > COMMIT_EVERY_SECONDS:
                store.commit(batch, pending_errors, pending_drop)
                prog.committed += len(batch)
                batch, pending_errors, pending_drop = [], [], []
                last_commit = time.monotonic()
                deliver_pending()
            if on_progress:
                on_progress(prog)
            deliver_pending()
        pending_drop.extend(intake.dropped)
        intake.dropped.clear()
        store.commit(batch, pending_errors, pending_drop)
        prog.committed += len(batch)
        batch, pending_errors, pending_drop = [], [], []
        deliver_pending()
        files = [out] if fmt == "duckdb" else store.export(out, fmt)
    except BaseException as exc:
        if not isinstance(exc, (KeyboardInterrupt, Interrupted)):
            prog.committed += (len(batch) if _save_what_is_done(store, batch, pending_errors,
                                                                pending_drop) else 0)
            _end_run(store, prog, engine, FAILED)
            if isinstance(exc, ChangedRows):
                raise StoreError(changed_rows_message(source, out, exc)) from None
            raise
        saved = _save_what_is_done(store, batch, pending_errors, pending_drop)
        prog.committed += len(batch) if saved else 0
        _end_run(store, prog, engine, INTERRUPTED)
        n = store.pair_count()
        raise Interrupted(
            f"interrupted: {n} judged pairs are saved in {store.path}"
            + ("" if saved else " (the last few were lost)")
            + "; rerun the same command to resume") from None
    _end_run(store, prog, engine, FINISHED)
    if prog.done and hasattr(engine, "on_gpu"):
        from rmjudge.runs.dryrun import record_throughput, throughput_key
        from rmjudge.engine.vocab import device_name

        record_throughput(throughput_key(info.sha256, device_name(engine)), engine.generated_tokens,
                          counts.generations, prog.elapsed, spec.settings.max_tokens)
    summary = counts.summary(store, out, files, prog, error_reasons)
    summary.notes = spec.defaults_note()
    summary.error_rows = error_rows
    return replace(summary, **token_cost(engine))


def input_reading(mapper: Mapper) -> dict:
    """The options that decide how rows become pairs and gold labels (`--map`,
    `--label-values`, `--label`); empty when none was given."""
    d: dict = {}
    if mapper.mapping:
        d["map"] = dict(sorted(mapper.mapping.items()))
    values = getattr(mapper, "label_values", None)
    if values is not None:
        d["label_values"] = getattr(values, "spec", str(values))
    if getattr(mapper, "label_choice", None):
        d["label"] = mapper.label_choice
    return d


def changed_rows_message(source: str, store_file: str, exc: ChangedRows) -> str:
    rows = ", ".join(map(str, exc.rows)) + (", ..." if exc.more else "")
    return (f"{source} has changed since {store_file} judged it: row{'s' if len(exc.rows) > 1 else ''}"
            f" {rows} now hold{'' if len(exc.rows) > 1 else 's'} other content than the pair judged "
            f"there; rerun with --rejudge-changed to judge {'them' if len(exc.rows) > 1 else 'it'} "
            "again and replace the old verdict, --overwrite to start over, or -o to write "
            "elsewhere")


def _save_what_is_done(store: Store, batch: list[PairResult], errors: list[dict],
                       drop: list[str] = ()) -> bool:
    """Commit what a stopping run holds in memory; False when that write failed too."""
    if not batch and not errors and not drop:
        return True
    try:
        store.commit(batch, errors, drop)
        return True
    except Exception:
        return False


def _end_run(store: Store, prog: Progress, engine, status: str) -> None:
    try:
        store.finish_run(pairs_judged=prog.committed, errors=prog.errors,
                         generated_tokens=engine.generated_tokens, wall_seconds=prog.elapsed,
                         status=status, **token_cost(engine))
    except Exception:
        if status == FINISHED:
            raise


def token_cost(engine) -> dict[str, int]:
    """tokens_sent/tokens_received of an engine that counts them (the server engine)."""
    return {k: getattr(engine, k) for k in ("tokens_sent", "tokens_received")
            if isinstance(getattr(engine, k, None), int)}



class _Counts:
    """Running counts for progress; the final summary is read back from the store."""

    def __init__(self) -> None:
        self.generations = 0
        self.parse_failures = 0
        self.flips = 0

    def add(self, res: PairResult) -> None:
        for o in res.orders.values():
            for s in o.samples:
                self.generations += 1
                self.parse_failures += s.verdict_source != "generated"
        self.flips += res.consistent is False

    def summary(self, store: Store, out, files, prog: Progress, error_reasons) -> Summary:
        """Counts over the whole output (all runs), so a resumed run reports the full table."""
        from rmjudge.core.counts import metrics

        q = store.summary_counts()
        c, rollouts, verdicts = q["pairs"], q["rollouts"], q["verdicts"]
        gens, pf, forced, n_errors = (q["generations"], q["parse_failures"], q["forced"],
                                      q["errors"])
        return Summary(
            output=out, files=files, rows_read=prog.rows_read, judged=prog.done,
            skipped=prog.skipped, errors=n_errors, labelled=c["labelled"],
            consistent=c["consistent"], both_orders=c["both_orders"],
            verdicts=verdicts, parse_failures=pf, forced=forced, generations=gens,
            generated_tokens=prog.generated_tokens, wall_seconds=prog.elapsed,
            error_reasons=error_reasons, metrics=metrics(c), rollout_counts=rollouts,
        )
