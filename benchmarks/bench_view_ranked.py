"""`rmjudge view` of a ranked store: rank synthetic prompts with a scripted judge, then time the
explorer's build and its prompts' part.

    python benchmarks/bench_view_ranked.py --prompts 500 --candidates 4 --work /tmp/view-ranked

1. Writes `--prompts` prompts of `--candidates` candidates (prompts of about 500 characters,
   candidates of about 850, gold ratings) and ranks them with `rmjudge.rank_candidates` and a
   scripted judge (the candidate with the higher hidden quality wins; nothing is generated, so
   the store holds every comparison with 2 rollouts per order);
2. builds the explorer (`build_view`) and reports its wall and CPU time, files and bytes;
3. times the prompts' part alone (`rmjudge.view.ranked.PromptItems`: the rankings from the
   comparisons, the list, the details, the search text) against the pairs' part
   (`rmjudge.view.data.PairItems`) on the same store.
Nothing is asserted: the figures are printed (docs/view.md records them with this command).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson


def judge():
    from rmjudge.engine.fake import ScriptedEngine, stage_of
    from rmjudge.prompts import completion_text
    from rmjudge.core.types import Generation

    def q(text: str) -> int:
        return int(re.search(r"quality (\d+)", text).group(1))

    def respond(req, i):
        if stage_of(req) != "rollout":
            return Generation(completion_text("refl", "meta", 1), [-0.1] * 5, "stop")
        body = req.messages[-1]["content"]
        one = body.split("### Response 1\n", 1)[1]
        two = body.split("### Response 2\n", 1)[1]
        pred = 1 if q(one) > q(two) else 2
        return Generation(completion_text("pref", "The first is clearer.", pred), [-0.3] * 5,
                          "stop")

    return ScriptedEngine(respond)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=500)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--work", default="/tmp/view-ranked")
    a = ap.parse_args()
    from rmjudge.files import make_dir

    make_dir(a.work)
    src = os.path.join(a.work, "cands.jsonl")
    with open(src, "wb") as f:
        for p in range(a.prompts):
            quality = [(p * 7 + c * 5) % 11 + c for c in range(a.candidates)]
            f.write(orjson.dumps({
                "id": f"p{p}", "prompt": f"question {p}: " + "some context " * 38,
                "subset": f"s{p % 3}", "ratings": quality,
                "responses": [f"answer {c}, quality {v}. " + "a detail " * 92
                              for c, v in enumerate(quality)]}) + b"\n")
    import rmjudge
    from rmjudge.core.settings import JudgeSettings

    store = os.path.join(a.work, "cands.ranked.duckdb")
    t = time.perf_counter()
    s = rmjudge.rank_candidates(src, store, engine=judge(), overwrite=True, commit_every=64,
                                judge=JudgeSettings(samples=2, max_tokens=32, seed=3))
    print(f"ranked {s.ranked} prompts, {s.comparisons} comparisons in "
          f"{time.perf_counter() - t:.1f} s (scripted judge)")
    from rmjudge.view.site import build_view

    out = os.path.join(a.work, "cands.view")
    w, c = time.perf_counter(), time.process_time()
    v = build_view(store, out)
    print(f"rmjudge view: {time.perf_counter() - w:.1f} s wall, {time.process_time() - c:.1f} s "
          f"CPU, {v.files} files, {v.bytes / 1e6:.1f} MB, load average "
          f"{os.getloadavg()[0]:.0f}")
    from rmjudge.analysis.tables import open_judged
    from rmjudge.view.data import PairItems
    from rmjudge.view.ranked import PromptItems

    with open_judged(store) as table:
        for name, kind in (("prompts", PromptItems), ("pairs", PairItems)):
            w, c = time.perf_counter(), time.process_time()
            items = kind(table)
            items.index_columns()
            n = sum(1 for _ in items.detail_rows())
            sum(1 for _ in items.search_texts())
            print(f"  {name}' part: {n} items, {time.perf_counter() - w:.2f} s wall, "
                  f"{time.process_time() - c:.2f} s CPU")


if __name__ == "__main__":
    main()
