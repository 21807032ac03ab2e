"""The `score` job as a library call: input -> pairs -> Judge -> run store (-> export).

`score()` streams the input, records every bad row in `errors` with a reason, skips pairs that
an earlier run of the same output already judged, commits results in small chunks and returns a
`Summary`. The CLI only parses options, calls this and prints.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from rmjudge import __version__
from rmjudge.io.mapping import LabelOptions, Mapper, RowError, check_labels
from rmjudge.io.readers import RawRow, read_rows, split_duckdb_source
from rmjudge.judge import Failure, Judge
from rmjudge.protocol import PairResult
from rmjudge.settings import JudgeSettings
from rmjudge.store import Store
from rmjudge.types import Pair

COMMIT_EVERY_PAIRS = 8
COMMIT_EVERY_SECONDS = 20.0


def default_output(source: str) -> str:
    if source == "-":
        return "stdin.judged.duckdb"
    duck = split_duckdb_source(source)
    base = duck[0] if duck else source
    stem = os.path.splitext(base)[0]
    return f"{stem}.judged.duckdb"


def output_format(out: str) -> str:
    lower = out.lower()
    if lower.endswith(".parquet"):
        return "parquet"
    if lower.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "duckdb"


def store_path(out: str) -> str:
    """The DuckDB file that holds the run (the output itself, or a sidecar for Parquet/JSONL)."""
    return out if output_format(out) == "duckdb" else out + ".work.duckdb"


@dataclass
class Progress:
    done: int = 0
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

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.labelled if self.labelled else None

    @property
    def positional_consistency(self) -> float | None:
        return self.consistent_correct / self.both_orders_labelled if self.both_orders_labelled else None


def verdict_settings(js: JudgeSettings, info) -> dict:
    """What decides verdicts: a rerun on the same output must match these exactly."""
    d = js.as_dict()
    d["prompt_suffix"] = info.prompt_suffix if js.prompt_suffix is None else js.prompt_suffix
    d["model_sha256"] = info.sha256
    d["lora_sha256"] = info.lora_sha256
    return d


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
    overwrite: bool = False,
    limit: int | None = None,
    shard: tuple[int, int] | None = None,
    commit_every: int = COMMIT_EVERY_PAIRS,
    on_progress: Callable[[Progress], None] | None = None,
    command: str | None = None,
    labels: LabelOptions | None = None,
) -> Summary:
    out = output or default_output(source)
    fmt = output_format(out)
    db = store_path(out)
    # Gold labels (rmjudge.io.schemas): labels that need --label-values stop the run here,
    # before any output is touched.
    mapper = (labels or LabelOptions()).mapper(mapping, js.seed)
    rows: Iterator[RawRow] = check_labels(mapper, read_rows(source), source,
                                          **({"max_rows": limit} if limit else {}))
    first = next(rows, None)  # fails fast on a missing or unreadable input, before any output
    if overwrite:
        for p in (db, db + ".wal"):
            if os.path.exists(p):
                os.remove(p)
    store = Store(db)
    try:
        return _score(store, first, rows, engine, js, out, fmt, source, mapper, limit,
                      shard, commit_every, on_progress, command)
    finally:
        store.close()


def in_shard(key: str, shard: tuple[int, int] | None) -> bool:
    """Stable partition: shard (i, n) owns the keys whose hash is i modulo n."""
    if shard is None:
        return True
    i, n = shard
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % n == i


def _score(store: Store, first, rows, engine, js, out, fmt, source, mapper: Mapper, limit, shard,
           commit_every, on_progress, command) -> Summary:
    store.check_settings(verdict_settings(js, engine.info))
    info = engine.info
    store.start_run({
        "version": __version__, "model_path": info.path, "model_sha256": info.sha256,
        "lora_path": info.lora, "lora_sha256": info.lora_sha256,
        "settings": str(verdict_settings(js, info)), "input": source,
        "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
    })
    done = store.done_ids()
    prog = Progress()
    pending_errors: list[dict] = []
    seen: dict[str, int] = {}
    error_reasons: dict[str, int] = {}

    def add_error(row_number: int, reason: str, raw: str | None, pid: str | None = None) -> None:
        pending_errors.append({"row_number": row_number, "id": pid, "reason": reason, "raw": raw})
        prog.errors += 1
        k = _reason_kind(reason)
        error_reasons[k] = error_reasons.get(k, 0) + 1

    def pairs() -> Iterator[Pair]:
        stream = rows if first is None else _chain(first, rows)
        for raw in stream:
            if limit is not None and prog.rows_read >= limit:
                return
            prog.rows_read += 1
            if raw.obj is None:
                if in_shard(f"row:{raw.row_number}", shard):
                    add_error(raw.row_number, raw.error or "unreadable row", raw.raw)
                continue
            try:
                pair = mapper.to_pair(raw.row_number, raw.obj)
            except RowError as exc:
                if in_shard(f"row:{raw.row_number}", shard):
                    add_error(raw.row_number, f"row {raw.row_number}: {exc}", _raw(raw.obj),
                              _maybe_id(raw.obj))
                continue
            if not in_shard(pair.id, shard):
                continue
            if pair.id in seen:
                add_error(raw.row_number, f"row {raw.row_number}: duplicate id {pair.id!r} "
                          f"(first seen on row {seen[pair.id]}); give each pair a unique id",
                          _raw(raw.obj), pair.id)
                continue
            seen[pair.id] = raw.row_number
            if pair.id in done:
                prog.skipped += 1
                continue
            yield pair

    judge = Judge(engine, js)
    batch: list[PairResult] = []
    last_commit = time.monotonic()
    counts = _Counts()
    for item in judge.run(pairs()):
        if isinstance(item, Failure):
            add_error(item.pair.row_number, f"row {item.pair.row_number}: {item.reason}", None,
                      item.pair.id)
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
            batch, pending_errors = [], []
            last_commit = time.monotonic()
        if on_progress:
            on_progress(prog)
    store.commit(batch, pending_errors)
    store.finish_run(pairs_judged=prog.done, errors=prog.errors,
                     generated_tokens=engine.generated_tokens, wall_seconds=prog.elapsed,
                     status="finished")
    if prog.done and hasattr(engine, "on_gpu"):
        from rmjudge.dryrun import record_throughput, throughput_key
        from rmjudge.engine.llama import device_name

        record_throughput(throughput_key(info.sha256, device_name(engine)), engine.generated_tokens,
                          counts.generations, prog.elapsed)
    files = [out] if fmt == "duckdb" else store.export(out, fmt)
    return counts.summary(store, out, files, prog, error_reasons)


def _chain(first: RawRow, rest: Iterator[RawRow]) -> Iterator[RawRow]:
    yield first
    yield from rest


def _raw(obj: dict) -> str:
    import orjson

    from rmjudge.io.readers import _clip

    return _clip(orjson.dumps(obj, default=str))


def _maybe_id(obj: dict) -> str | None:
    v = obj.get("id")
    return None if v is None else str(v)


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
        q = store.con.execute
        labelled, correct, cc, both_l, cons, both = q("""
            SELECT count(*) FILTER (WHERE label IS NOT NULL),
                   count(*) FILTER (WHERE correct),
                   count(*) FILTER (WHERE label IS NOT NULL AND verdict_ab = label AND verdict_ba = label),
                   count(*) FILTER (WHERE label IS NOT NULL AND verdict_ba IS NOT NULL),
                   count(*) FILTER (WHERE consistent),
                   count(*) FILTER (WHERE consistent IS NOT NULL)
            FROM pairs""").fetchone()
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
