"""Best-of-N: rank K candidate responses per prompt with the ReflectRM pairwise judge
(docs/rank.md).

- `layouts.py`: input layouts -> `Prompt` (candidates and gold ranks) or `PromptProblem`;
- `strategies.py`: which pairs are compared, round by round (round-robin, Swiss);
- `aggregate.py`: a prompt's comparisons -> Bradley-Terry scores, wins, confidence per rank;
- `runner.py`: the run (comparisons through `rmjudge.runs.pipeline.score` into a run store);
- `table.py`: a ranked store read back as rankings (`read_rankings`);
- `outputs.py`: `filter` and `eval` on a ranked store (preference pairs, top-1 and Kendall tau).

`rank(source, output, ...)` is the library call (also `rmjudge.rank_candidates`, since the name
`rmjudge.rank` is this package).
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["rank"]


def rank(source: str, output: str | None = None, *, engine=None, judge=None,
         engine_settings=None, strategy: str = "auto", layout: str | None = None,
         group_by: str | None = None, gold_field: str = "fine-grained_score",
         max_candidates: int = 64, limit: int | None = None,
         shard: tuple[int, int] | None = None, overwrite: bool = False, commit_every: int = 8,
         status: Callable[[str], None] | None = None, progress: Any = None):
    """Rank the candidates of every prompt in `source` into the run store `output` (default
    INPUT.ranked.duckdb) and return the `RankSummary` (its `rankings`: every prompt's ranking).

    `engine`: an engine already loaded (else one is loaded from `engine_settings`, an
    `EngineSettings`); `judge`: the `JudgeSettings` (defaults as `rmjudge score`). The other
    arguments are `rmjudge rank`'s options (docs/rank.md)."""
    import os

    from rmjudge.io.mapping import Mapper
    from rmjudge.io.rows import InputError

    if not isinstance(source, (str, os.PathLike)):
        raise InputError(f"rank_candidates reads a file or a Hub id, not a "
                         f"{type(source).__name__}: write the rows to a JSONL file and give "
                         "its path (docs/rank.md)")
    source = os.fspath(source)
    from rmjudge.rank.runner import RankOptions, rank_input
    from rmjudge.runs.setup import RunOptions
    from rmjudge.core.settings import EngineSettings, JudgeSettings

    js = judge or JudgeSettings()
    opts = RunOptions(js, engine_settings or EngineSettings(), Mapper({}, seed=js.seed),
                      limit=limit, shard=shard, commit_every=commit_every, overwrite=overwrite)
    ropts = RankOptions(strategy=strategy, layout=layout, group_by=group_by,
                        gold_field=gold_field, max_candidates=max_candidates)
    kw = {} if status is None else {"status": status}
    return rank_input(source, output, opts, ropts, engine=engine, progress=progress, **kw)
