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
from typing import Any, Callable, Iterable, Iterator

from rmjudge.core.errors import EXIT_INTERRUPTED, UserError
from rmjudge.core.interrupts import critical, deliver_pending, graceful, is_interrupt
from rmjudge.core.words import count
from rmjudge.io.intake import ChangedRows, Intake, RowFailure, checked_rows, input_identity
from rmjudge.io.mapping import Mapper
from rmjudge.io.readers import RawRow, default_output_stem
from rmjudge.judging.judge import Failure, Judge
from rmjudge.judging.protocol import PairResult
from rmjudge.judging.runspec import RunSpec, resolve, run_record
from rmjudge.core.settings import JudgeSettings
from rmjudge.files import StoreError, export_files, output_format, store_path
from rmjudge.store import FAILED, FINISHED, INTERRUPTED, Store, check_output
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
    # the work a pair takes at most (generations: rollouts and reflections, both orders), and
    # the Judge's finished generations, live (rmjudge.judging.judge.Finished): the time left
    planned_per_pair: int = 0
    finished: Any = None

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
    js: JudgeSettings | RunSpec,
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
    on_commit: Callable[[Store, list[str], list[int]], None] | None = None,
    rows: Iterable[RawRow] | None = None,
    identity: dict | None = None,
    extra_settings: dict | None = None,
) -> Summary:
    """Judge `source` into `output` (a run: intake -> Judge -> store). `source`: an input path
    (every form `rmjudge.io.readers` reads) or a `MemoryInput` (rows held in Python). `js`: the
    judge settings, resolved here for the engine's model within `n_ctx` (the per-sequence limit
    `--ctx-size` sets), or a `RunSpec` already resolved for it. `mapper` (or the plain `mapping`
    of --map) turns rows into pairs; `announce` hears how the input is read, once, before
    judging starts. A row judged by an earlier run that has changed since stops the run
    (`StoreError` naming the rows), or with `rejudge_changed` is judged again and its new
    verdict replaces the old one. `on_commit(store, pair ids, error row numbers)` hears each
    chunk once it is committed (the streaming Python API reads it back); what it raises stops
    the run as an exception from the loop would (KeyboardInterrupt: as an interrupt).
    `rows` (with the input's `identity`): raw rows made by the caller instead of read from
    `source` (`rmjudge rank`'s comparisons; `limit` and `shard` were applied when they were
    made); `extra_settings`: more settings a rerun must match (rank's strategy and layout).
    """
    out = output or default_output(source)
    check_output(source, out)
    spec = js if isinstance(js, RunSpec) else resolve(js, engine.info, n_ctx)
    return score_checked(source, out, engine, spec,
                         mapper or Mapper(mapping or {}, seed=spec.settings.seed),
                         overwrite=overwrite, limit=limit, shard=shard,
                         commit_every=commit_every, on_progress=on_progress, announce=announce,
                         rejudge_changed=rejudge_changed, on_commit=on_commit, rows=rows,
                         identity=identity, extra_settings=extra_settings)


def score_checked(source: str, out: str, engine, spec: RunSpec, mapper: Mapper, *,
                  overwrite: bool = False, limit: int | None = None,
                  shard: tuple[int, int] | None = None, commit_every: int = COMMIT_EVERY_PAIRS,
                  on_progress: Callable[[Progress], None] | None = None,
                  announce: Callable[[str], None] | None = None,
                  rejudge_changed: bool = False,
                  on_commit: Callable[[Store, list[str], list[int]], None] | None = None,
                  rows: Iterable[RawRow] | None = None, identity: dict | None = None,
                  extra_settings: dict | None = None, input_format: str | None = None) -> Summary:
    """`score` once its output `out` is checked (`check_output`) and its spec resolved for
    `engine`'s model: `run.judge_input` checks the output before the model loads and builds
    the spec once it has, so neither is done twice. `input_format`: the input's format, when the run
    found it already (`io.readers.detect_format`)."""
    fmt = output_format(out)
    # Labels that need --label-values stop the run here, before any output is touched.
    given = rows is not None
    rows = iter(rows) if given else checked_rows(source, mapper, limit, input_format)
    first = next(rows, None)  # fails fast on a missing or unreadable input, before any output
    ahead = [first] if first is not None else []
    while ahead and ahead[-1].obj is None and len(ahead) < 10_000:  # the first readable row
        nxt = next(rows, None)
        if nxt is None:
            break
        ahead.append(nxt)
    if not given:
        identity = input_identity(source, next((r for r in ahead if r.obj is not None),
                                               ahead[0] if ahead else None))
    rows = chain(ahead[1:], rows)
    if announce and mapper.schema is not None:
        announce(f"input read as {mapper.describe()}")
    with critical():  # a Ctrl-C while DuckDB creates the tables is held, not a DuckDB error
        store = Store(store_path(out), overwrite=overwrite, exports=export_files(out))
    try:
        with graceful():
            return _score(store, first, rows, engine, spec, out, fmt, source, mapper,
                          None if given else limit, shard, commit_every, on_progress, identity,
                          rejudge_changed, on_commit, given, extra_settings)
    finally:
        store.close()


def _score(store: Store, first, rows, engine, spec: RunSpec, out, fmt, source, mapper, limit,
           shard, commit_every, on_progress, identity, rejudge_changed=False,
           on_commit=None, given=False, extra_settings=None) -> Summary:
    """A run in named steps: record it, judge every pair (committing in chunks), end it.
    `given`: the rows were made by the caller, who applied --limit and --shard."""
    with critical():  # a Ctrl-C here is delivered by the loop, which records the interrupt
        _start_run(store, engine, spec, mapper, source, shard, identity, extra_settings)
        stream = rows if first is None else chain([first], rows)
        intake = Intake(stream, mapper, shard=None if given else shard, limit=limit,
                        judged=store.judged(), rejudge_changed=rejudge_changed)
    run = _ScoreRun(store, intake, engine, commit_every, on_progress, on_commit)
    judge = Judge(engine, spec)
    run.prog.planned_per_pair = planned_generations(spec.settings)
    run.prog.finished = judge.finished
    try:
        files = run.judge_all(judge, out, fmt)
    except BaseException as exc:
        replacement = run.stop(exc, source, out)
        if replacement is None:
            raise
        raise replacement from None
    _end_run(store, run.prog, engine, FINISHED)
    _record_speed(engine, spec, run)
    return run.summary(spec, out, files)


def planned_generations(s: JudgeSettings) -> int:
    """The generations one pair takes at most: per order, N rollouts and, with
    self-reflection, the N - 1 others compared with the anchor."""
    per_order = s.samples + (s.samples - 1 if s.reflect is not False else 0)
    return per_order * len(s.order_list)


def _start_run(store: Store, engine, spec: RunSpec, mapper: Mapper, source: str,
               shard: tuple[int, int] | None, identity, extra_settings=None) -> None:
    """Check that the store's earlier runs judged alike and read the same input, then record
    this run."""
    settings = spec.verdict_settings()
    settings.update(extra_settings or {})
    reading = input_reading(mapper)
    if reading:  # how rows become pairs and labels: a rerun must read them alike
        settings["input_reading"] = reading
    store.check_settings(settings)
    store.check_input(identity)
    store.start_run({
        **run_record(engine.info, settings, str(source),
                     None if shard is None else f"{shard[0]}/{shard[1]}"),
        "schema": mapper.describe() if mapper.schema is not None else None,
    })


class _ScoreRun:
    """The judging loop of one run: the results, error rows and replaced pairs held until the
    next commit, the progress counts, and what stopping keeps."""

    def __init__(self, store: Store, intake: Intake, engine, commit_every: int,
                 on_progress: Callable[[Progress], None] | None,
                 on_commit: Callable[[Store, list[str], list[int]], None] | None = None):
        self.store, self.intake, self.engine = store, intake, engine
        self.commit_every, self.on_progress = commit_every, on_progress
        self.on_commit = on_commit
        self.prog = Progress()
        self.batch: list[PairResult] = []
        self.errors: list[dict] = []
        self.drop: list[str] = []  # stored pairs whose changed rows were judged again
        self.error_reasons: dict[str, int] = {}
        self.error_rows: dict[str, list[int]] = {}
        self.counts = _Counts()
        self.last_commit = time.monotonic()
        self.held: Exception | None = None  # the input's own failure, raised once stored

    def replaced(self, pair: Pair) -> None:
        old = self.intake.replaces.pop(pair.id, None)
        if old is not None:
            self.drop.append(old)
        self.drop.extend(self.intake.dropped)  # changed rows not judged again here
        self.intake.dropped.clear()

    def add_error(self, f: RowFailure) -> None:
        self.errors.append(f.as_error())
        self.prog.errors += 1
        k = error_kind(f.reason)
        self.error_reasons[k] = self.error_reasons.get(k, 0) + 1
        examples = self.error_rows.setdefault(k, [])
        if len(examples) < ERROR_ROW_EXAMPLES:
            examples.append(f.row_number)

    def pairs(self) -> Iterator[Pair]:
        """The intake's pairs (its error rows recorded). When the input itself fails midway (a
        generator of rows that raises, a stream cut off), the pairs end there and the failure
        is held (`held`): the pairs read before it are judged and stored, then `judge_all`
        raises it. A refusal of changed rows and Ctrl-C are raised at once."""
        prog, intake = self.prog, self.intake
        try:
            for item in intake:
                prog.rows_read = intake.rows_read
                prog.skipped = intake.skipped
                if isinstance(item, RowFailure):
                    self.add_error(item)
                else:
                    yield item
        except Exception as exc:
            if isinstance(exc, (ChangedRows, Interrupted)) or is_interrupt(exc):
                raise
            self.held = exc
        prog.rows_read = intake.rows_read
        prog.skipped = intake.skipped

    def add(self, item: PairResult | Failure) -> None:
        """One judged pair (or one the judge could not judge) into the next chunk."""
        self.replaced(item.pair)
        if isinstance(item, Failure):
            self.add_error(RowFailure.unjudged(item.pair, item.reason))
            return
        self.batch.append(item)
        self.counts.add(item)
        prog = self.prog
        prog.done += 1
        prog.generations = self.counts.generations
        prog.parse_failures = self.counts.parse_failures
        prog.flips = self.counts.flips

    def commit(self) -> tuple[list[PairResult], list[dict]]:
        """Commit the chunk; the results and error rows it held (for `heard`)."""
        self.store.commit(self.batch, self.errors, self.drop)
        self.prog.committed += len(self.batch)
        done = self.batch, self.errors
        self.batch, self.errors, self.drop = [], [], []
        return done

    def heard(self, done: tuple[list[PairResult], list[dict]]) -> None:
        """`on_commit` hears a committed chunk (after any held signal is delivered)."""
        batch, errors = done
        if self.on_commit is not None and (batch or errors):
            self.on_commit(self.store, [r.pair.id for r in batch],
                           [e["row_number"] for e in errors])

    def judge_all(self, judge: Judge, out: str, fmt: str) -> list[str]:
        """Judge every pair, committing every `commit_every` pairs or COMMIT_EVERY_SECONDS;
        the files written (the store, or its export)."""
        deliver_pending()  # a signal held while the store was opened and the run recorded
        if self.on_progress:  # the display follows the work before the first pair ends
            self.on_progress(self.prog)
        for item in judge.run(self.pairs()):
            self.add(item)
            self.prog.generated_tokens = self.engine.generated_tokens
            if (len(self.batch) >= self.commit_every
                    or time.monotonic() - self.last_commit > COMMIT_EVERY_SECONDS):
                done = self.commit()
                self.last_commit = time.monotonic()
                deliver_pending()
                self.heard(done)
            if self.on_progress:
                self.on_progress(self.prog)
            deliver_pending()
        self.drop.extend(self.intake.dropped)
        self.intake.dropped.clear()
        done = self.commit()
        deliver_pending()
        self.heard(done)
        if self.held is not None:  # the input failed midway: what it gave is stored now
            raise self.held
        return [out] if fmt == "duckdb" else self.store.export(out, fmt)

    def stop(self, exc: BaseException, source: str, out: str) -> UserError | None:
        """Keep what is done after `exc` stopped the run: the exception to raise instead
        (Interrupted with the resume hint; a StoreError naming changed rows), or None to
        raise `exc` itself."""
        saved = _save_what_is_done(self.store, self.batch, self.errors, self.drop)
        self.prog.committed += len(self.batch) if saved else 0
        if not isinstance(exc, Interrupted) and not is_interrupt(exc):
            _end_run(self.store, self.prog, self.engine, FAILED)
            if isinstance(exc, ChangedRows):
                return ChangedRowsError(changed_rows_message(source, out, exc), exc.rows,
                                        exc.more)
            return None
        _end_run(self.store, self.prog, self.engine, INTERRUPTED)
        n = self.store.pair_count()
        return Interrupted(
            f"interrupted: {count(n, 'judged pair')} {'is' if n == 1 else 'are'} saved in "
            f"{self.store.path}"
            + ("" if saved else " (the last few were lost)")
            + "; rerun the same command to resume")

    def summary(self, spec: RunSpec, out: str, files: list[str]) -> Summary:
        summary = self.counts.summary(self.store, out, files, self.prog, self.error_reasons)
        summary.notes = spec.defaults_note()
        if self.intake.lookalike_note():
            summary.notes.append(self.intake.lookalike_note())
        summary.error_rows = self.error_rows
        return replace(summary, **token_cost(self.engine))


def _record_speed(engine, spec: RunSpec, run: _ScoreRun) -> None:
    """The measured throughput the dry run estimates from (in-process engines)."""
    if run.prog.done:
        from rmjudge.runs.dryrun import record_engine_throughput

        record_engine_throughput(engine, run.counts.generations, run.prog.elapsed,
                                 spec.settings.max_tokens)


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


class ChangedRowsError(StoreError):
    """A resume refused because rows judged before hold other content now; `rows` are their
    row numbers (for a caller that numbers rows its own way, such as `rmjudge rank`)."""

    def __init__(self, message: str, rows: list[int], more: bool):
        super().__init__(message)
        self.rows = rows
        self.more = more


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
    counts = {"tokens_sent": engine.tokens_sent, "tokens_received": engine.tokens_received}
    return {k: v for k, v in counts.items() if v is not None}



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
