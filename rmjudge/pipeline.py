"""The `score` job as a library call: input -> pairs -> Judge -> run store (-> export).

`score()` streams the input, records every bad row in `errors` with a reason, skips pairs that
an earlier run of the same output already judged, commits results in small chunks and returns a
`Summary`. The CLI only parses options, calls this and prints.
"""

from __future__ import annotations

import os
import time
from itertools import chain
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from rmjudge import __version__
from rmjudge.errors import EXIT_INTERRUPTED, UserError
from rmjudge.interrupts import deliver_pending, graceful
from rmjudge.io.intake import Intake, RowFailure, input_identity
from rmjudge.io.mapping import Mapper, check_labels
from rmjudge.io.readers import RawRow, default_output_stem, read_rows, split_duckdb_source
from rmjudge.judge import Failure, Judge
from rmjudge.protocol import PairResult
from rmjudge.runspec import resolve
from rmjudge.settings import JudgeSettings
from rmjudge.store import (FAILED, FINISHED, INTERRUPTED, Store, StoreError, output_format,
                           sidecar, store_path)
from rmjudge.types import Pair

COMMIT_EVERY_PAIRS = 8
COMMIT_EVERY_SECONDS = 20.0


class Interrupted(UserError):
    """Ctrl-C during a run: what was judged is saved; the message says how to resume."""

    exit_code = EXIT_INTERRUPTED


def default_output(source: str) -> str:
    """`x.jsonl` -> `x.judged.duckdb` (hub ids, folders and globs: see `default_output_stem`)."""
    return f"{default_output_stem(source)}.judged.duckdb"


def check_output(source: str, out: str) -> None:
    """Everything about the output that can be refused before a model loads: the input itself,
    a file rmjudge did not create, a store another run is writing."""
    from rmjudge.store import check_not_busy, check_writable_target

    check_output_is_not_input(source, out)
    db = store_path(out)
    check_not_busy(db)
    check_writable_target(db)
    if output_format(out) != "duckdb" and not os.path.exists(db):
        for f in (out, sidecar(out, "samples"), sidecar(out, "errors")):
            if os.path.exists(f):
                raise StoreError(f"{f} exists and no rmjudge run wrote it (its run store {db} "
                                 "is missing); it is left untouched: remove it or choose "
                                 "another -o")


def check_output_is_not_input(source: str, out: str) -> None:
    """Refuse an output (or a file it writes) that is the input itself, or that a folder or
    glob input would read back on a rerun."""
    if not out or out.endswith(os.sep) or os.path.isdir(out):
        raise StoreError(f"-o {out!r} is not a file name; give one such as "
                         f"{os.path.join(out or '.', 'judged.duckdb')}")
    if source == "-":
        return
    if "://" not in source and (os.path.isdir(source) or any(c in source for c in "*?[")):
        import fnmatch

        written = [out, store_path(out)] + ([sidecar(out, "samples"), sidecar(out, "errors")]
                                            if output_format(out) != "duckdb" else [])
        for w in written:
            real = os.path.realpath(w)
            inside = (os.path.isdir(source)
                      and real.startswith(os.path.realpath(source).rstrip(os.sep) + os.sep))
            if inside or fnmatch.fnmatch(os.path.abspath(w), os.path.abspath(source)):
                raise StoreError(f"the output {w} would be read back as input by {source} on the "
                                 "next run; write it outside the input folder or glob")
        return
    duck = split_duckdb_source(source)
    src = os.path.realpath(duck[0] if duck else source)
    written = [out, store_path(out)]
    if output_format(out) != "duckdb":
        written += [sidecar(out, "samples"), sidecar(out, "errors")]
    for w in written:
        if os.path.realpath(w) == src:
            raise StoreError(f"the output {out} would overwrite the input {source}; choose "
                             "another -o")


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
    correct: int
    consistent_correct: int
    both_orders_labelled: int
    consistent: int
    both_orders: int
    verdicts: dict[str, int]
    parse_failures: int
    forced: int
    generations: int
    generated_tokens: int
    wall_seconds: float
    error_reasons: dict[str, int]
    # through --server: this run's prompt tokens sent and tokens received (None in-process)
    tokens_sent: int | None = None
    tokens_received: int | None = None

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.labelled if self.labelled else None

    @property
    def positional_consistency(self) -> float | None:
        return self.consistent_correct / self.both_orders_labelled if self.both_orders_labelled else None


def verdict_settings(js: JudgeSettings, info) -> dict:
    """What decides verdicts (see `RunSpec.verdict_settings`)."""
    return resolve(js, info).verdict_settings()


def _reason_kind(reason: str) -> str:
    """A short bucket of an error reason, for the one-line summary."""
    r = reason.split(";")[0]
    if r.startswith("line ") and " is " in r:
        r = r.split(" is ", 1)[1]
    return r.split("(")[0].strip()[:60]


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
) -> Summary:
    """Judge `source` into `output` (a run: intake -> Judge -> store). `mapper` (or the plain
    `mapping` of --map) turns rows into pairs; `announce` hears how the input is read, once,
    before judging starts."""
    out = output or default_output(source)
    fmt = output_format(out)
    check_output(source, out)
    mapper = mapper or Mapper(mapping or {}, seed=js.seed)
    # Labels that need --label-values stop the run here, before any output is touched.
    rows: Iterator[RawRow] = check_labels(mapper, read_rows(source), source,
                                          **({"max_rows": limit} if limit else {}))
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
    store = Store(store_path(out), overwrite=overwrite)
    try:
        with graceful():
            return _score(store, first, rows, engine, js, out, fmt, source, mapper, limit, shard,
                          commit_every, on_progress, identity)
    finally:
        store.close()


def _score(store: Store, first, rows, engine, js, out, fmt, source, mapper, limit, shard,
           commit_every, on_progress, identity) -> Summary:
    settings = verdict_settings(js, engine.info)
    reading = input_reading(mapper)
    if reading:  # how rows become pairs and labels: a rerun must read them alike
        settings["input_reading"] = reading
    store.check_settings(settings)
    store.check_input(identity)
    info = engine.info
    store.start_run({
        "version": __version__, "model_path": info.path, "model_sha256": info.sha256,
        "lora_path": info.lora, "lora_sha256": info.lora_sha256,
        "settings": settings, "input": source,
        "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
        "schema": mapper.describe() if mapper.schema is not None else None,
    })
    prog = Progress()
    pending_errors: list[dict] = []
    error_reasons: dict[str, int] = {}
    stream = rows if first is None else _chain(first, rows)
    intake = Intake(stream, mapper, shard=shard, limit=limit, done=store.done_ids())

    def add_error(f: RowFailure) -> None:
        pending_errors.append(f.as_error())
        prog.errors += 1
        k = _reason_kind(f.reason)
        error_reasons[k] = error_reasons.get(k, 0) + 1

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

    judge = Judge(engine, js)
    batch: list[PairResult] = []
    last_commit = time.monotonic()
    counts = _Counts()
    try:
        for item in judge.run(pairs()):
            if isinstance(item, Failure):
                add_error(RowFailure(item.pair.row_number,
                                     f"row {item.pair.row_number}: {item.reason}", None,
                                     item.pair.id))
            else:
                batch.append(item)
                counts.add(item)
                prog.done += 1
                prog.generations = counts.generations
                prog.parse_failures = counts.parse_failures
                prog.flips = counts.flips
            prog.generated_tokens = engine.generated_tokens
            if len(batch) >= commit_every or time.monotonic() - last_commit > COMMIT_EVERY_SECONDS:
                store.commit(batch, pending_errors)
                prog.committed += len(batch)
                batch, pending_errors = [], []
                last_commit = time.monotonic()
                deliver_pending()
            if on_progress:
                on_progress(prog)
            deliver_pending()
        store.commit(batch, pending_errors)
        prog.committed += len(batch)
        batch, pending_errors = [], []
        deliver_pending()
        files = [out] if fmt == "duckdb" else store.export(out, fmt)
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt) and "interrupted" not in str(exc).lower():
            prog.committed += len(batch) if _save_what_is_done(store, batch, pending_errors) else 0
            _end_run(store, prog, engine, FAILED)
            raise
        saved = _save_what_is_done(store, batch, pending_errors)
        prog.committed += len(batch) if saved else 0
        _end_run(store, prog, engine, INTERRUPTED)
        n = store.con.execute("SELECT count(*) FROM pairs").fetchone()[0]
        raise Interrupted(
            f"interrupted: {n} judged pairs are saved in {store.path}"
            + ("" if saved else " (the last few were lost)")
            + "; rerun the same command to resume") from None
    _end_run(store, prog, engine, FINISHED)
    if prog.done and hasattr(engine, "on_gpu"):
        from rmjudge.dryrun import record_throughput, throughput_key
        from rmjudge.engine.vocab import device_name

        record_throughput(throughput_key(info.sha256, device_name(engine)), engine.generated_tokens,
                          counts.generations, prog.elapsed)
    return replace(counts.summary(store, out, files, prog, error_reasons), **token_cost(engine))


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


def _save_what_is_done(store: Store, batch: list[PairResult], errors: list[dict]) -> bool:
    """Commit what a stopping run holds in memory; False when that write failed too."""
    if not batch and not errors:
        return True
    try:
        store.commit(batch, errors)
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


def _chain(first: RawRow, rest: Iterator[RawRow]) -> Iterator[RawRow]:
    yield first
    yield from rest


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
        from rmjudge.analysis.counts import pair_counts

        q = store.con.execute
        c = pair_counts(lambda sql, params: q(sql, params).fetchone())
        labelled, correct, cc, both_l, cons, both = (
            c["labelled"], c["correct"], c["consistent_correct"], c["both_orders_labelled"],
            c["consistent"], c["both_orders"])
        verdicts = dict(q("SELECT verdict, count(*) FROM pairs GROUP BY 1 ORDER BY 1").fetchall())
        gens, pf, forced = q("""SELECT count(*), count(*) FILTER (WHERE verdict_source IS DISTINCT
                                FROM 'generated'), count(*) FILTER (WHERE verdict_source = 'forced')
                                FROM samples""").fetchone()
        n_errors = q("SELECT count(*) FROM errors").fetchone()[0]
        return Summary(
            output=out, files=files, rows_read=prog.rows_read, judged=prog.done,
            skipped=prog.skipped, errors=n_errors, labelled=labelled, correct=correct,
            consistent_correct=cc, both_orders_labelled=both_l, consistent=cons, both_orders=both,
            verdicts=verdicts, parse_failures=pf, forced=forced, generations=gens,
            generated_tokens=prog.generated_tokens, wall_seconds=prog.elapsed,
            error_reasons=error_reasons,
        )
