"""One benchmark as a run: its published rows -> an intake file in the output folder -> the
normal score pipeline (`rmjudge.runs.pipeline.score`) into its own run store -> official figures read
back from that store.

Output folder layout, per benchmark NAME:

- `NAME.input.jsonl`: the benchmark in rmjudge's intake layout (id, prompt, two responses,
  gold; grouping columns such as subset or style pass through). Written once; a rerun reads the
  same data, finds the same bytes and reuses it, and refuses a file that differs.
- `NAME.duckdb`: the run store, with the store's usual contract (resume after a kill,
  `--shard` and `rmjudge merge`).

Published rows that lack the benchmark's layout, and rows whose item key (`base.item_key`) an
earlier row already gave, are written after the good ones, so they land in the store's errors
table with their raw text; they are counted, never scored. `--limit N` counts items (an
RM-Bench prompt is one item of nine pairs), so an item is never cut partway. An item the store
holds no outcome of (neither a verdict nor an error row: a shard missing from `rmjudge merge
--allow-incomplete`, a run not finished) is left out of the figures, which a note marks
incomplete; it is never scored as a missing verdict. A best-of-N benchmark is read back with
rank's own reader, so a prompt rank refuses is counted as unreadable, never scored.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import orjson

from rmjudge.bench.base import BenchError, BenchResult, Benchmark, Item, RowProblem, item_key
from rmjudge.bench.sources import Published, read_published
from rmjudge.core.errors import DiskError
from rmjudge.io.intake import in_shard, raw_text
from rmjudge.files import make_dir, write_once

# Intake columns that hold the texts judged or the gold; every other column groups results.
TEXT_KEYS = frozenset({"prompt", "chosen", "rejected", "response_a", "response_b", "label",
                       "context", "response1", "response2"})
ORDERS = {"both": ("ab", "ba"), "ab": ("ab",)}


def intake_file(outdir: str, bench: Benchmark) -> str:
    return os.path.join(outdir, f"{bench.name}.input.jsonl")


def store_file(outdir: str, bench: Benchmark) -> str:
    return os.path.join(outdir, f"{bench.name}.duckdb")


@dataclass
class Converted:
    """One published row: its intake rows, or why it is refused (`problem`, its `raw` text)."""

    published: Published
    rows: list[dict[str, Any]] = field(default_factory=list)
    problem: str | None = None
    raw: str | None = None
    duplicate: bool = False  # refused because an earlier row gave the same item key


def converted(bench: Benchmark, source: str,
              published: Iterable[Published] | None = None) -> Iterator[Converted]:
    """Every published row of `bench` under `source` (or the rows `published` gives),
    converted or refused, in file order; a row whose item key an earlier row gave is refused as
    a duplicate, naming the first."""
    first: dict[str, Published] = {}
    for p in (read_published(bench, source) if published is None else published):
        if p.obj is None:
            yield Converted(p, problem=p.problem or "unreadable row", raw=p.raw)
            continue
        try:
            rows = list(bench.convert(p.row_number, p.obj, p.fields))
        except RowProblem as exc:
            yield Converted(p, problem=str(exc), raw=raw_text(p.obj))
            continue
        if not rows:
            continue
        key = item_key(rows[0])
        if key in first:
            was = first[key]
            yield Converted(p, problem=f"duplicate key {key!r} (first at {was.file} row "
                            f"{was.row_number})", raw=raw_text(p.obj), duplicate=True)
            continue
        first[key] = p
        yield Converted(p, rows)


@dataclass
class Covered:
    """What a run covers of a benchmark, read back from its store: the items (pairwise) or
    (fields, ranking) prompts (best-of-N) to score; the published rows it cannot score
    (`unreadable`, each an error row); the items it holds no outcome of (`unjudged`: neither a
    verdict nor an error row), left out; and notes on what the figures cover."""

    items: list
    unreadable: int = 0
    unjudged: int = 0
    notes: list[str] = field(default_factory=list)


def intake_rows(bench: Benchmark, source: str) -> Iterator[dict[str, Any]]:
    """The benchmark's rows in rmjudge's intake layout, streamed; rows without the layout (and
    duplicates) come last as problem rows (`problem`, `raw`), which the intake records as
    errors."""
    problems: list[dict] = []
    good = 0
    for c in converted(bench, source):
        if c.rows:
            good += len(c.rows)
            yield from c.rows
            continue
        p = c.published
        problems.append({"id": f"unreadable/{os.path.basename(p.file)}/{p.row_number}",
                         "problem": f"{p.file} row {p.row_number}: {c.problem}", "raw": c.raw})
    if not good:
        raise BenchError(f"no {bench.title} pairs could be read from {source}"
                         + (f" ({problems[0]['problem']})" if problems else "")
                         + f"; give its published files ({bench.layout})")
    yield from problems


def item_rows(rows: Iterable[dict[str, Any]], limit: int | None) -> int | None:
    """How many intake rows hold the first `limit` items (None: no limit)."""
    if limit is None:
        return None
    keys: set[str] = set()
    n = 0
    for r in rows:
        key = str(r["id"]) if "problem" in r else item_key(r)
        if key not in keys:
            if len(keys) == limit:
                break
            keys.add(key)
        n += 1
    return n


def intake_keys(path: str) -> Iterator[dict[str, Any]]:
    """The intake file's rows without their texts (ids and grouping columns)."""
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                yield {k: v for k, v in orjson.loads(line).items() if k not in TEXT_KEYS}


def prepare(bench: Benchmark, source: str, outdir: str) -> str:
    """Write (or find, byte for byte) the benchmark's intake file in `outdir`; its path. The
    rows are written to a file of this process's own beside it, then linked into place, so an
    existing file is never replaced: one with the same bytes is reused, another is refused."""
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise BenchError(f"-o {outdir} is a file; bench writes a folder of run stores, give a "
                         "folder name")
    path = intake_file(outdir, bench)
    try:
        make_dir(outdir)
        if not write_once(path, (orjson.dumps(row) + b"\n" for row in intake_rows(bench, source))):
            raise BenchError(
                f"{path} exists and holds other rows than {bench.title} from {source} "
                "gives (another copy or version of the data, or a file bench did not "
                "write); it is left untouched: choose another -o folder")
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS):
            raise DiskError(f"cannot write {exc.filename or path}: {exc.strerror}") from None
        raise
    return path


def judge(bench: Benchmark, source: str, engine, js, outdir: str, *,
          limit: int | None = None, shard: tuple[int, int] | None = None,
          commit_every: int | None = None, on_progress: Callable | None = None,
          announce: Callable[[str], None] | None = None, n_ctx: int | None = None):
    """Judge the benchmark into `outdir/NAME.duckdb` with the score pipeline (resumes what an
    earlier run of the same settings left); the pipeline's `Summary`. `js`: the judge settings
    or the run's `RunSpec` (`pipeline.score`); `n_ctx`: `--ctx-size`."""
    from rmjudge.io.mapping import Mapper
    from rmjudge.runs.pipeline import COMMIT_EVERY_PAIRS, score
    from rmjudge.judging.runspec import RunSpec

    path = prepare(bench, source, outdir)
    # blank_responses: each benchmark's `convert` decides which answers it keeps (RMB keeps
    # whitespace-only ones, as its authors' code scores them)
    settings = js.settings if isinstance(js, RunSpec) else js
    seed = settings.seed
    if bench.ranked:  # best-of-N: rank's comparisons, through the same pipeline
        from rmjudge.rank.runner import rank_input
        from rmjudge.runs.setup import RunOptions
        from rmjudge.core.settings import EngineSettings

        opts = RunOptions(settings, EngineSettings(n_ctx=n_ctx), Mapper({}, seed=seed),
                          limit=limit, shard=shard,
                          commit_every=commit_every or COMMIT_EVERY_PAIRS)
        ropts = rank_options(bench)
        return rank_input(path, store_file(outdir, bench), opts, ropts, engine=engine,
                          progress=None if on_progress is None else
                          (lambda total, engine: _SharedDisplay(on_progress)))
    return score(path, engine, js, output=store_file(outdir, bench),
                 mapper=Mapper({}, seed=seed, blank_responses=True),
                 limit=item_rows(intake_keys(path), limit), shard=shard,
                 commit_every=commit_every or COMMIT_EVERY_PAIRS, on_progress=on_progress,
                 announce=announce, n_ctx=n_ctx)


class _SharedDisplay:
    """The caller's progress display, for every round of a ranking (the caller closes it)."""

    def __init__(self, display):
        self.display = display

    def __call__(self, prog) -> None:
        self.display(prog)

    def note(self, line: str) -> None:
        getattr(self.display, "note", lambda _: None)(line)

    def close(self) -> None:
        pass


def require_results(bench: Benchmark, outdir: str, intake: bool = False) -> None:
    """BenchError unless `outdir` holds the benchmark's store (and, with `intake`, its intake
    file)."""
    path, db = intake_file(outdir, bench), store_file(outdir, bench)
    if not os.path.exists(db) or (intake and not os.path.exists(path)):
        raise BenchError(f"no {bench.title} results in {outdir} (no {os.path.basename(db)} "
                         f"with its {os.path.basename(path)}): run `rmjudge bench --benchmark "
                         f"{bench.name} -o {outdir}` first")


def read_items(bench: Benchmark, outdir: str, *, limit: int | None = None,
               shard: tuple[int, int] | None = None) -> Covered:
    """The benchmark's items the run covers (the intake rows within `limit` and `shard`), each
    with its per-order verdicts from the store; the count of unreadable published rows; and
    notes: what `limit` left out of the published items, and the items not judged at all (in
    neither the store's pairs nor its errors: a shard missing from a merge, a run not
    finished), which are left out, never scored as "no verdict"."""
    from rmjudge.analysis.tables import open_judged

    require_results(bench, outdir, intake=True)
    path, db = intake_file(outdir, bench), store_file(outdir, bench)
    rows = list(intake_keys(path))  # the grouping columns only: the texts stay on disk
    cut = item_rows(rows, limit)
    notes = []
    if cut is not None:
        published = len({item_key(r) for r in rows if "problem" not in r})
        rows = rows[:cut]
        covered = len({item_key(r) for r in rows if "problem" not in r})
        if covered < published:
            notes.append(f"{bench.title}: --limit {limit}: the first {covered} of its "
                         f"{published} published items only")
    # the intake's shard rule: pairs by id, rows it cannot map by their row number
    numbered = [(n, r) for n, r in enumerate(rows, 1)
                if in_shard(f"row:{n}" if "problem" in r else str(r["id"]), shard)]
    with open_judged(db) as table:
        settings = table.meta.get("settings") or {}
        orders = ORDERS.get(settings.get("orders", "both"), ("ab", "ba"))
        judged = {r[0]: r[1:] for r in table.sql(
            "SELECT id, label, verdict_ab, verdict_ba FROM pairs")}
        failed_ids, failed_rows = error_rows(table)
    items = []
    unreadable = unjudged = 0
    seen: set[str] = set()
    for n, r in numbered:
        rid = str(r["id"])
        if "problem" in r or rid in seen:  # the intake records both as error rows
            unreadable += 1
            continue
        seen.add(rid)
        fields = {k: v for k, v in r.items() if k != "id"}
        if rid in judged:
            label, vab, vba = judged[rid]
            letters = {o: (v if v in ("A", "B") else None)
                       for o, v in zip(("ab", "ba"), (vab, vba)) if o in orders}
            gold = label in ("A", "B")
            correct = {o: (None if v is None or not gold else v == label)
                       for o, v in letters.items()}
            items.append(Item(rid, fields, correct, letters, labelled=gold))
        elif rid in failed_ids or n in failed_rows:  # an error row: no verdict in any order
            items.append(Item(rid, fields, {o: None for o in orders},
                              {o: None for o in orders}, labelled=bench.labelled(r),
                              judged=False))
        else:
            unjudged += 1
    return Covered(items, unreadable, unjudged, notes)


def error_rows(table) -> tuple[set[str], set[int]]:
    """The ids and row numbers of the store's errors table (rows the run could not judge)."""
    if not table.has_errors:
        return set(), set()
    got = table.sql("SELECT id, row_number FROM errors")
    return {str(i) for i, _ in got if i is not None}, {int(n) for _, n in got if n is not None}


def incomplete_note(bench: Benchmark, unjudged: int, total: int, what: str) -> str:
    """The note of figures that leave out items the store holds no outcome of."""
    return (f"{bench.title} incomplete: {unjudged} of the {total} {what} this run covers were "
            "never judged (the store holds neither a verdict nor an error for them: a shard "
            "missing from `rmjudge merge --allow-incomplete`, or a run not finished); they are "
            "left out, so every figure of it covers the judged ones only: judge the rest (rerun "
            "the shard, or the same command) for the benchmark's figures")


def stored_judge(bench: Benchmark, outdir: str) -> str:
    """The judge model (and adapter) of the store's latest run, for a table of stored results."""
    from rmjudge.analysis.tables import open_judged

    with open_judged(store_file(outdir, bench)) as table:
        runs = table.runs()
    if not runs:
        return "(unknown judge)"
    last = runs[-1]
    return judge_name(last.get("model_path") or "", last.get("lora_path"))


def judge_name(model_path: str, lora: str | None = None) -> str:
    """A short name for a judge: the model file's name (a served model: its URL or name)."""
    name = model_path if "://" in model_path else os.path.basename(model_path)
    return name + (f" + {os.path.basename(lora)}" if lora else "")


def read_ranked(bench: Benchmark, outdir: str, *, limit: int | None = None,
                shard: tuple[int, int] | None = None) -> Covered:
    """A best-of-N benchmark's prompts the run covers, read from its intake file by rank's own
    reader with the run's options (`--limit` and `--shard` by rank's rules), each with its
    grouping fields and its ranking from the store (None: every comparison of it failed, so it
    has no verdict); the count of prompts that cannot be ranked (unreadable published rows,
    duplicates, candidates rank refuses: the store's errors table holds each); and notes: the
    prompts never judged (no comparison stored, none failed) are left out, never scored."""
    from rmjudge.analysis.tables import open_judged
    from rmjudge.rank.layouts import ROW_STRIDE
    from rmjudge.rank.runner import read_input
    from rmjudge.rank.table import read_rankings

    require_results(bench, outdir, intake=True)
    prompts, problems, _ = read_input(intake_file(outdir, bench), rank_options(bench), limit,
                                      shard)
    with open_judged(store_file(outdir, bench)) as table:
        ranked = {p.prompt_id: p for p in read_rankings(table)}
        _, failed = error_rows(table)
    failed_prompts = {n // ROW_STRIDE for n in failed if n % ROW_STRIDE}
    out, unjudged = [], 0
    for p in prompts:
        ranking = ranked.get(p.id)
        if ranking is None and p.row_number not in failed_prompts:
            unjudged += 1
            continue
        out.append(({"id": p.id, **p.fields}, ranking))
    return Covered(out, len(problems), unjudged)


def rank_options(bench: Benchmark):
    """The `RankOptions` a best-of-N benchmark is judged with (and read back with)."""
    from rmjudge.rank.layouts import HARD_MAX_CANDIDATES
    from rmjudge.rank.runner import RankOptions

    return RankOptions(layout=bench.rank_layout, max_candidates=HARD_MAX_CANDIDATES)


def score_stored(bench: Benchmark, outdir: str, *, limit: int | None = None,
                 shard: tuple[int, int] | None = None) -> BenchResult:
    """The benchmark's official figures from the store in `outdir` (read-only)."""
    if bench.ranked:
        got = read_ranked(bench, outdir, limit=limit, shard=shard)
        res = bench.score_rankings(got.items)  # type: ignore[attr-defined]
    else:
        got = read_items(bench, outdir, limit=limit, shard=shard)
        res = bench.score(got.items)
    res.unreadable, res.unjudged = got.unreadable, got.unjudged
    if got.unjudged:
        got.notes.append(incomplete_note(bench, got.unjudged, got.unjudged + len(got.items),
                                         "prompts" if bench.ranked else "pairs"))
    res.notes[:0] = got.notes
    return res
