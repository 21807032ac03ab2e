"""The "base model, greedy" baseline: one greedy rollout per pair and order, stored beside a
judged table so `rmjudge eval` can show it next to the sampled systems.

The prompt is exactly the run's stage-1 prompt (`PairOrderJob.rollout_request`, with the run's
settings from the table's `meta`), decoded at temperature 0 with one sample, and parsed by
`PairOrderJob.add_rollouts`, so forced verdicts and confidence follow the run's rules. Results go
to a `greedy` table in the DuckDB output (or `x.greedy.parquet`/`.jsonl` beside an export);
a rerun only generates the pairs and orders not stored yet for the same model and settings.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import orjson

from rmjudge.analysis.tables import JudgedTable, TableError
from rmjudge.files import sidecar
from rmjudge.judging.protocol import PairOrderJob, to_letter, usable
from rmjudge.judging.runspec import resolve
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import Pair

BATCH_REQUESTS = 64


@dataclass
class GreedySummary:
    generated: int  # pair-orders generated now
    reused: int  # pair-orders already stored
    parse_failures: int
    target: str


def run_settings(table: JudgedTable) -> JudgeSettings:
    """The judge settings the table was made with (from its meta)."""
    stored = table.meta.get("settings")
    if not isinstance(stored, dict):
        raise TableError(
            f"{table.path} does not record the settings it was judged with (no meta table; "
            "Parquet/JSONL exports keep it in the hidden working file .x.parquet.rmjudge.duckdb "
            "beside them): evaluate the .duckdb output, or keep that file next to the export")
    names = set(JudgeSettings.field_names())
    return JudgeSettings(**{k: v for k, v in stored.items() if k in names})


def with_judge_format(table: JudgedTable, js: JudgeSettings,
                      judge_format: str | None) -> JudgeSettings:
    """The table's settings with the format file `--judge-format` gives (a table judged with a
    format file records its name, not its path); a table judged with a format file and no file
    given is one error naming what to give."""
    from rmjudge.prompts.builtin_formats import BUILTIN

    if judge_format is not None:
        return dataclasses.replace(js, judge_format=judge_format)
    if js.judge_format not in BUILTIN:
        raise TableError(
            f"{table.path} was judged with the format file of the judge format "
            f"{js.judge_format!r}: give that file with --judge-format FILE.toml for the greedy "
            "baseline")
    return js


def greedy_target(table: JudgedTable) -> str:
    return table.path if table.fmt == "duckdb" else sidecar(table.path, "greedy")


def _pairs_to_run(table: JudgedTable, orders: tuple[str, ...], sha: str, max_tokens: int,
                  limit: int | None) -> tuple[list[tuple[Pair, str]], int]:
    have: set[tuple[str, str]] = set()
    if table.has_greedy:
        have = {(r[0], r[1]) for r in table.sql(
            'SELECT pair_id, "order" FROM greedy WHERE model_sha256 = ? AND max_tokens = ?',
            [sha, max_tokens])}
    rows = table.sql("""SELECT id, row_number, messages, response_a, response_b, label FROM pairs
                        WHERE label IN ('A', 'B') AND verdict IS DISTINCT FROM 'error'
                        ORDER BY row_number""")
    if limit is not None:
        rows = rows[:limit]
    todo = []
    reused = 0
    for pid, rn, msgs, a, b, label in rows:
        pair = Pair(pid, rn or 0, tuple(orjson.loads(msgs)), a, b, label)
        for o in orders:
            if (pid, o) in have:
                reused += 1
            else:
                todo.append((pair, o))
    return todo, reused


def run_greedy(table: JudgedTable, engine, settings: JudgeSettings | None = None,
               limit: int | None = None,
               on_progress: Callable[[int, int], None] | None = None,
               judge_format: str | None = None) -> GreedySummary:
    """Generate the missing greedy rollouts of `table`'s labelled pairs and store them.

    Results are stored after every batch of `BATCH_REQUESTS` pair-orders, so an interrupted run
    keeps what it generated and a rerun goes on from there. `on_progress(done, total)` is called
    after each batch, with pair-orders generated so far and to generate in this call."""
    from rmjudge.prompts.builtin_formats import BUILTIN

    js = with_judge_format(table, settings or run_settings(table), judge_format)
    stored = table.meta.get("settings") or {}
    want_sha = stored.get("model_sha256")
    if want_sha and want_sha != engine.info.sha256:
        raise TableError(
            f"{table.path} was judged by the model with sha256 {want_sha[:12]}..., not "
            f"{engine.info.path} ({engine.info.sha256[:12]}...): pass the same --model (and "
            "--lora) as the scoring run, so the greedy row compares like with like")
    spec = resolve(js, engine.info)
    want_template = stored.get("prompt_template_sha256")
    if want_template and want_template != spec.verdict_settings().get("prompt_template_sha256"):
        raise TableError(
            f"{table.path} was judged with a --prompt-template (sha256 {want_template[:12]}...), "
            "which the table does not hold: the greedy baseline would be prompted otherwise "
            "than the judge was; compare the judge with another run instead")
    if stored.get("judge_format_sha256") != spec.verdict_settings().get("judge_format_sha256"):
        was = stored.get("judge_format") or "reflectrm"
        raise TableError(
            f"{table.path} was judged in the judge format {was}, not the one --judge-format "
            f"{judge_format} gives: leave --judge-format out"
            + (" (the greedy baseline prompts in the table's format)" if was in BUILTIN
               else ", or give the format file the table was judged with, unedited"))
    js, suffix = spec.settings, spec.suffix  # an old store's unset values resolve as scoring does
    todo, reused = _pairs_to_run(table, js.order_list, engine.info.sha256, js.max_tokens, limit)
    target = greedy_target(table)
    done = failures = 0
    if not todo:
        _write(table, target, [])  # the (empty) greedy table exists after a call
    for start in range(0, len(todo), BATCH_REQUESTS):
        chunk = todo[start:start + BATCH_REQUESTS]
        jobs = [PairOrderJob(p, o, js, suffix, spec.style) for p, o in chunk]
        reqs = [dataclasses.replace(j.rollout_request(1), temperature=0.0, top_p=1.0, n=1)
                for j in jobs]
        rows: list[list] = []
        for job, gens in zip(jobs, engine.generate(reqs)):
            g = gens[0]
            if g.finish_reason == "error":
                rows.append([job.pair.id, job.order, g.text, None, "error", None, None,
                             g.n_tokens, "error", engine.info.sha256, js.max_tokens])
                failures += 1
                continue
            job.add_rollouts([g])
            smp = job.rollouts[0]
            failures += smp.verdict_source != "generated"
            counts = usable(smp) or smp.verdict_source == "forced"  # protocol.py's rule
            rows.append([job.pair.id, job.order, smp.text, smp.prediction,
                         (to_letter(job.order, smp.prediction) if counts else None) or "error",
                         smp.verdict_source,
                         smp.confidence, smp.tokens, smp.finish_reason, engine.info.sha256,
                         js.max_tokens])
        _write(table, target, rows)  # adds to what is stored, so a crash keeps earlier batches
        done += len(rows)
        if on_progress:
            on_progress(done, len(todo))
    return GreedySummary(done, reused, failures, target)


def _write(table: JudgedTable, target: str, rows: list[list]) -> None:
    """Add rows to the greedy table: in the run store itself, or in the Parquet/JSONL sidecar
    beside an export (rewritten with the rows it held)."""
    from rmjudge.store import GREEDY_COLUMNS, Store, write_rows_file

    if table.fmt == "duckdb":
        table.release()  # our read-only handle; the store writes
        try:
            with Store(target) as store:
                store.add_greedy(rows)
        finally:
            table.refresh("greedy")
    else:
        old = table.sql("SELECT * FROM greedy") if table.has_greedy else []
        write_rows_file(GREEDY_COLUMNS, old + [list(r) for r in rows], target, table.fmt,
                        key=("pair_id", "order"))
        table.refresh("greedy")
