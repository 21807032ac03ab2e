"""`rmjudge rank` as a library call: prompts with K candidates -> comparisons judged through the
normal score pipeline (`rmjudge.runs.pipeline.score`, the run store's guarantees) -> rankings.

The run, round by round: every prompt's comparisons of the round (rmjudge/rank/strategies.py)
become intake rows in rmjudge's own layout (id `PROMPT#i-j`, i < j, the prompt, the two
candidates as responses A and B in a seeded order, the gold letter when the gold ranks them apart, and `prompt_id`, `cand_a`,
`cand_b`, `n_candidates`, `gold_a`, `gold_b`, `gold_kind`, `round` plus the prompt's own
columns passing through) and are judged by `pipeline.score` into the store: one row per
comparison, both orders, resumable, locked. Comparisons judged before are skipped, so a rerun
(after a kill -9) replays the rounds from the stored verdicts and judges only what is missing.
Prompts that cannot be ranked land in the errors table with their reason. At the end the store's
`rankings` table is rewritten from all stored comparisons (`rmjudge.rank.table`).

`--limit` counts prompts; `--shard I/N` splits by prompt id, so all comparisons of a prompt are
judged in one shard (merge the shard stores with `rmjudge merge`, then rerun rank on the merged
store to rewrite its rankings table, or read it with `eval`/`filter`, which rank on read).

Row numbers: a comparison's is `input row * ROW_STRIDE + 1 + its pair number`, a prompt that
cannot be ranked has `input row * ROW_STRIDE`, so each has its own errors row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rmjudge.core.errors import UserError
from rmjudge.rank.layouts import (DEFAULT_MAX_CANDIDATES, GOLD_FIELDS, HARD_MAX_CANDIDATES,
                                  LAYOUTS, ROW_STRIDE, LayoutError, Prompt, PromptProblem,
                                  read_prompts)
from rmjudge.rank.strategies import (ROUND_ROBIN_MAX, STRATEGIES, next_round_among, pair_number,
                                     resolve)
from rmjudge.core.settings import SettingsError, setting


def _quiet(line: str) -> None:
    pass


class RankError(UserError):
    """The input cannot be ranked as a whole, or the output cannot hold a ranking."""


def check_rank_output(out: str) -> None:
    from rmjudge.files import output_format

    if output_format(out) != "duckdb":
        raise RankError(f"-o {out}: rank writes a run store with its rankings table; give a "
                        ".duckdb file (export with `rmjudge filter` or DuckDB)")


def check_not_pairwise(out: str) -> None:
    """RankError when `out` is a run store of judged pairs (`rmjudge score`, `bench`), not a
    ranking: resuming it as one would be refused by its settings anyway, in the pipeline's
    terms; this says it in the user's."""
    import os

    from rmjudge.analysis.tables import open_judged
    from rmjudge.rank.table import is_ranked

    if not os.path.isfile(out):
        return
    try:
        with open_judged(out) as table:
            ranked = is_ranked(table) or not table.meta.get("settings")
    except UserError:
        return  # not a store (the store's own checks name what it is), or busy
    if not ranked:
        raise RankError(f"{out} holds pairs judged by `rmjudge score` (or bench), not a "
                        "ranking; rank into another -o, or --overwrite to replace it")


@dataclass(frozen=True)
class RankOptions:
    """How an input becomes prompts and which comparisons rank them."""

    strategy: str = setting("auto", f"Which pairs are compared: every pair (round-robin), Swiss "
                            f"rounds (about K/2 (log2 K + 1) comparisons), or auto (round-robin "
                            f"up to {ROUND_ROBIN_MAX} candidates, Swiss above).",
                            choices=STRATEGIES)
    layout: str | None = setting(None, "The input's layout (default: recognized from the first "
                                 "row).", choices=LAYOUTS)
    group_by: str | None = setting(None, "One row per response: group rows into prompts by this "
                                   "prompt id column.", metavar="COLUMN")
    gold_field: str = setting(GOLD_FIELDS[0], "UltraFeedback: the completion score read as "
                              "gold.", choices=GOLD_FIELDS)
    max_candidates: int = setting(DEFAULT_MAX_CANDIDATES, f"Prompts with more candidates are "
                                  f"error rows (at most {HARD_MAX_CANDIDATES}).",
                                  range=(2, HARD_MAX_CANDIDATES))

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise SettingsError(f"--strategy must be one of {', '.join(STRATEGIES)}")
        if self.layout is not None and self.layout not in LAYOUTS:
            raise SettingsError(f"--layout must be one of {', '.join(LAYOUTS)}")
        if self.gold_field not in GOLD_FIELDS:
            raise SettingsError(f"--gold-field must be one of {', '.join(GOLD_FIELDS)}")
        if not 2 <= self.max_candidates <= HARD_MAX_CANDIDATES:
            raise SettingsError(f"--max-candidates must be within 2..{HARD_MAX_CANDIDATES}")

    def settings(self, seed: int) -> dict:
        """What a resume must match: the comparisons and their gold depend on all of it."""
        return {"strategy": self.strategy, "layout": self.layout, "group_by": self.group_by,
                "gold_field": self.gold_field, "seed": seed}


# `rank`'s wording of the RunOptions options it has (rmjudge.runs.setup.RunOptions)
RUN_OPTION_HELP = {
    "limit": "Rank only the first N prompts.",
    "shard": "Rank only shard I of N (stable partition by prompt id), for array jobs.",
    "commit_every": "Commit results every N comparisons.",
    "overwrite": "Discard an existing output (a store no other run is writing) and start again.",
    "rejudge_changed": "On resume, judge again the comparisons whose prompt or candidates were "
                       "edited since, replacing their verdicts (without it such a resume is "
                       "refused).",
}


@dataclass
class RankSummary:
    output: str
    prompts: int  # prompts read (within --limit and --shard), ranked or not
    ranked: int  # prompts with at least one judged comparison
    problems: int  # prompts that cannot be ranked (errors table)
    problem_kinds: dict[str, int]
    problem_rows: dict[str, list[int]]
    comparisons: int  # comparisons stored (all runs)
    judged: int  # comparisons judged by this run
    skipped: int  # comparisons found judged before
    failed: int  # comparisons the judge could not judge (errors table)
    rounds: int
    generated_tokens: int
    wall_seconds: float
    strategies: dict[str, int] = field(default_factory=dict)  # strategy -> prompts
    engine: Any = field(default=None, repr=False, compare=False)
    rankings: list = field(default_factory=list, repr=False)  # PromptRanking, by input row
    others: int = 0  # ranked prompts of the store that this run's input (--limit, --shard) lacks
    prompt_ids: frozenset = field(default_factory=frozenset, repr=False)  # this run's prompts
    candidates: tuple[int, int] | None = None  # the fewest and most candidates of its prompts
    # prompts without gold that another --gold-field would give one: {field: prompts}
    gold_elsewhere: dict[str, int] = field(default_factory=dict)
    repeated: int = 0  # prompts with repeated candidate texts (each text compared once)

    def own_rankings(self) -> list:
        """The rankings of the prompts this run read (the store may hold others: an earlier
        run of a larger input, another --limit)."""
        return [r for r in self.rankings if r.prompt_id in self.prompt_ids]


def default_output(source: str) -> str:
    from rmjudge.io.readers import default_output_stem

    return f"{default_output_stem(source)}.ranked.duckdb"


def comparison_row(p: Prompt, i: int, j: int, round_no: int, seed: int = 0) -> dict:
    """The intake row of comparing candidates i < j. Which of the two sits in slot A is drawn
    from the seed and the comparison id (as `score` places chosen/rejected), so with
    `--orders ab` no candidate (RewardBench 2's chosen is candidate 0) always has the first
    slot; `cand_a` names the candidate in slot A."""
    from rmjudge.core.seeds import derive_seed

    cid = f"{p.id}#{i}-{j}"
    if derive_seed(seed, cid, "slot") & 1:
        i, j = j, i
    ga = p.gold[i] if p.gold else None
    gb = p.gold[j] if p.gold else None
    label = None if ga is None or gb is None or ga == gb else ("A" if ga < gb else "B")
    row = {"id": cid, "prompt": list(p.messages), "response_a": p.candidates[i],
           "response_b": p.candidates[j], "label": label, "prompt_id": p.id, "cand_a": i,
           "cand_b": j, "n_candidates": p.k, "gold_a": ga, "gold_b": gb,
           "gold_kind": p.gold_kind, "round": round_no, **p.fields}
    if len(p.distinct) < p.k:  # repeated texts: which candidate each one is, and every gold
        row["same_as"] = list(p.same_as)
        row["gold_ranks"] = None if p.gold is None else list(p.gold)
    return row


def comparison_rows(plan: list[tuple[Prompt, list[tuple[int, int]]]], round_no: int,
                    seed: int = 0):
    """The raw rows of one round, in the order that lets the engine's prefix cache serve a
    prompt's comparisons (`schedule`)."""
    from rmjudge.io.rows import RawRow

    for p, i, j in schedule(plan):
        yield RawRow(p.row_number * ROW_STRIDE + 1 + pair_number(i, j, p.k),
                     comparison_row(p, i, j, round_no, seed))


def schedule(plan: list[tuple[Prompt, list[tuple[int, int]]]]
             ) -> Iterator[tuple[Prompt, int, int]]:
    """A round's comparisons in judging order: prompt by prompt, and within a prompt candidate
    by candidate ((0,1), (0,2), ..., (1,2), ...), so consecutive comparisons share the prompt
    and often their first response, which the engine's prefix cache then restores instead of
    evaluating again; comparisons that start together copy that opening from the one
    evaluating it (docs/engine.md, "Openings shared in flight"). (Interleaving the comparisons of several prompts, so that a prompt's
    first comparison is cached before its next one starts, was measured slower: with 8 prompts
    at a time their cached prefixes no longer fit the cache together; docs/speed.md.) The
    order changes the time a run takes, never its verdicts."""
    for p, pairs in plan:
        for i, j in sorted(pairs):
            yield p, i, j


def problem_rows(problems: list[PromptProblem]):
    from rmjudge.io.rows import RawRow

    for q in problems:
        yield RawRow(q.row_number * ROW_STRIDE, None, q.reason, q.raw)


def read_input(source: str, ropts: RankOptions, limit: int | None,
               shard: tuple[int, int] | None, fmt: str | None = None):
    """(prompts, problems, the input's identity) of `source` (of format `fmt`, when known)
    within --limit and --shard."""
    from rmjudge.io.intake import in_shard, input_identity
    from rmjudge.io.readers import read_rows

    first: list = []

    def rows():
        for raw in read_rows(source, fmt=fmt):
            if not first and raw.obj is not None:
                first.append(raw)
            yield raw

    prompts: list[Prompt] = []
    problems: list[PromptProblem] = []
    seen = 0
    try:
        for item in read_prompts(rows(), layout=ropts.layout, group_by=ropts.group_by,
                                 gold_field=ropts.gold_field,
                                 max_candidates=ropts.max_candidates):
            if limit is not None and seen >= limit:
                break
            seen += 1
            key = item.id if isinstance(item, Prompt) else f"row:{item.row_number}"
            if not in_shard(key, shard):
                continue
            (prompts if isinstance(item, Prompt) else problems).append(item)
    except LayoutError as exc:
        raise RankError(f"{source}: {exc}") from None
    return prompts, problems, input_identity(source, first[0] if first else None)


def stored_outcomes(path: str, before_round: int
                    ) -> dict[str, list[tuple[int, int, float | None]]]:
    """prompt id -> (cand_a, cand_b, score of cand_a) of the stored comparisons of the rounds
    before `before_round` (a resumed run pairs each round from what the first run saw then)."""
    from rmjudge.analysis.tables import open_judged
    from rmjudge.rank.aggregate import Game

    out: dict[str, list] = {}
    with open_judged(path) as table:
        if "prompt_id" not in table.pair_columns:
            return out
        for pid, a, b, vab, vba in table.sql(
                "SELECT CAST(prompt_id AS VARCHAR), cand_a, cand_b, verdict_ab, verdict_ba "
                "FROM pairs WHERE TRY_CAST(round AS INTEGER) < ?", [before_round]):
            out.setdefault(pid, []).append(
                (int(a), int(b), Game(int(a), int(b), (vab, vba)).score()))
    return out


def changed_prompts_message(source: str, out: str, rows: list[int], more: bool,
                            prompts: list[Prompt]) -> str:
    """A refused resume in the user's terms: the input rows of the edited prompts and their
    comparisons (candidate numbers), not the comparisons' internal row numbers."""
    from rmjudge.rank.strategies import round_robin

    by_row = {p.row_number: p for p in prompts}
    edited: dict[int, list[str]] = {}
    for rn in rows:
        row, n = divmod(rn, ROW_STRIDE)
        p = by_row.get(row)
        pairs = round_robin(p.k) if p is not None else []
        if 1 <= n <= len(pairs):
            i, j = pairs[n - 1]
            edited.setdefault(row, []).append(f"#{i}-#{j}")
        else:
            edited.setdefault(row, [])
    parts = []
    for row, cmp in edited.items():
        p = by_row.get(row)
        name = f" (prompt {p.id!r}" + (f": comparison{'s' if len(cmp) > 1 else ''} "
                                       f"{', '.join(cmp)})" if cmp else ")") if p else ""
        parts.append(f"{row}{name}")
    many = len(edited) > 1 or more
    return (f"{source} has changed since {out} ranked it: the prompt{'s' if many else ''} on "
            f"row{'s' if many else ''} {'; '.join(parts)}{', ...' if more else ''} now "
            f"hold{'' if many else 's'} other text or candidates than were judged; rerun with "
            "--rejudge-changed to judge the changed comparisons again (a Swiss ranking: "
            "--overwrite), --overwrite to start over, or -o to write elsewhere")


def rank_input(source: str, output: str | None, opts, ropts: RankOptions, *, engine=None,
               status: Callable[[str], None] = _quiet,
               progress: Callable[[int | None, Any], Any] | None = None) -> RankSummary:
    """Rank the candidates of every prompt in `source` into the store `output` (default
    INPUT.ranked.duckdb). `opts`: the `rmjudge.runs.setup.RunOptions` of the judge (the mapping
    options are not used); `engine`: one already loaded. `status` hears one-line notes;
    `progress(total, engine)` makes a progress display per round (see `run.judge_input`)."""
    from rmjudge.core.interrupts import graceful

    with graceful():
        return _rank(source, output, opts, ropts, engine, status, progress)


def _rank(source, output, opts, ropts: RankOptions, engine, status, progress) -> RankSummary:
    import time

    from rmjudge.core.interrupts import is_interrupt
    from rmjudge.io.mapping import Mapper
    from rmjudge.runs.pipeline import ChangedRowsError, Interrupted, score
    from rmjudge.runs.setup import check_prompting, check_run_paths, load_judge_engine, run_spec

    out = output or default_output(source)
    check_rank_output(out)
    if not opts.overwrite:
        check_not_pairwise(out)
    fmt = check_run_paths(source, out).fmt  # the input's format, found once
    style = check_prompting(opts.judge)  # --criteria @FILE and --prompt-template read once
    started = time.monotonic()
    prompts, problems, identity = read_input(source, ropts, opts.limit, opts.shard, fmt)
    if not prompts and not problems:  # before a model loads
        if opts.shard:  # an empty shard: more shards than prompts
            raise RankError(f"nothing was ranked: shard {opts.shard[0]}/{opts.shard[1]} of "
                            f"{source} holds no prompt"
                            + (" within --limit" if opts.limit else "")
                            + "; use fewer shards (each takes whole prompts)")
        raise RankError(f"nothing was ranked: {source} holds no rows"
                        + (" within --limit" if opts.limit else "")
                        + "; give a file with a prompt and its candidates per row (docs/rank.md)")
    strategies = {p.id: resolve(ropts.strategy, len(p.distinct)) for p in prompts}
    settings = {"rank": ropts.settings(opts.judge.seed)}
    judged = skipped = rounds = 0
    try:
        if engine is None:
            engine = load_judge_engine(opts.engine, opts.server, status)
        spec = run_spec(engine, opts, style)  # one spec for every round
        outcomes: dict[str, list] = {}
        round_no = 1
        while True:
            plan = []
            for p in prompts:
                pairs = next_round_among(strategies[p.id], p.distinct, opts.judge.seed, p.id,
                                         round_no, outcomes.get(p.id, []))
                if pairs:
                    plan.append((p, pairs))
            if not plan and round_no > 1:
                break
            total = sum(len(pairs) for _, pairs in plan)
            rows: Iterator = comparison_rows(plan, round_no, opts.judge.seed)
            if round_no == 1:
                from itertools import chain

                rows = chain(problem_rows(problems), rows)
                total += len(problems)
            display = progress(total, engine) if progress is not None else None
            try:
                s = score(source, engine, spec, output=out, mapper=Mapper({}, seed=0),
                          overwrite=opts.overwrite and round_no == 1, limit=opts.limit,
                          shard=opts.shard, commit_every=opts.commit_every,
                          rejudge_changed=opts.rejudge_changed,
                          on_progress=display, rows=rows,
                          identity=identity, extra_settings=settings)
            finally:
                if display is not None:
                    display.close()
            judged += s.judged
            skipped += s.skipped
            rounds = round_no
            if not plan:
                break
            round_no += 1
            outcomes = stored_outcomes(out, round_no)
    except ChangedRowsError as exc:
        raise ChangedRowsError(changed_prompts_message(source, out, exc.rows, exc.more, prompts),
                               exc.rows, exc.more) from None
    except (KeyboardInterrupt, RuntimeError) as exc:  # RuntimeError: DuckDB's form of it
        if not is_interrupt(exc):
            raise
        raise Interrupted("interrupted; no judged comparison is lost: rerun the same command "
                          "to resume") from None
    return _finish(out, prompts, problems, strategies, judged, skipped, rounds, engine,
                   time.monotonic() - started)


def _finish(out, prompts, problems, strategies, judged, skipped, rounds, engine,
            wall) -> RankSummary:
    from rmjudge.analysis.tables import open_judged
    from rmjudge.runs.pipeline import ERROR_ROW_EXAMPLES, error_kind
    from rmjudge.rank.table import ranking_rows, read_rankings
    from rmjudge.store import Store

    input_rows = sorted({p.row_number for p in prompts})
    with open_judged(out) as table:
        rankings = read_rankings(table)
        stored = table.one("SELECT count(*) FROM pairs")[0]
        failed = table.one(
            f"SELECT count(*) FROM judged.errors WHERE row_number % {ROW_STRIDE} <> 0 AND "
            f"row_number // {ROW_STRIDE} IN (SELECT unnest(?::BIGINT[]))", [input_rows])[0]
    with Store(out) as store:
        store.set_rankings(ranking_rows(rankings))
        # a prompt that was an error row in an earlier run and is fine now
        store.drop_errors([p.row_number * ROW_STRIDE for p in prompts])
    kinds: dict[str, int] = {}
    rows: dict[str, list[int]] = {}
    for q in problems:
        k = error_kind(q.reason)
        kinds[k] = kinds.get(k, 0) + 1
        if len(rows.setdefault(k, [])) < ERROR_ROW_EXAMPLES:
            rows[k].append(q.row_number)
    mine = {p.id for p in prompts}
    elsewhere: dict[str, int] = {}
    for p in prompts:
        if p.gold_elsewhere:
            elsewhere[p.gold_elsewhere] = elsewhere.get(p.gold_elsewhere, 0) + 1
    counts: dict[str, int] = {}
    for s in strategies.values():
        counts[s] = counts.get(s, 0) + 1
    return RankSummary(
        output=out, prompts=len(prompts) + len(problems),
        ranked=sum(1 for r in rankings if r.prompt_id in mine and r.games),
        problems=len(problems), problem_kinds=kinds, problem_rows=rows, comparisons=stored,
        judged=judged, skipped=skipped, failed=failed, rounds=rounds,
        generated_tokens=engine.generated_tokens, wall_seconds=wall,
        strategies=counts, engine=engine, rankings=rankings,
        others=sum(1 for r in rankings if r.prompt_id not in mine),
        prompt_ids=frozenset(mine),
        candidates=(min(p.k for p in prompts), max(p.k for p in prompts)) if prompts else None,
        gold_elsewhere=elsewhere, repeated=sum(len(p.distinct) < p.k for p in prompts))
