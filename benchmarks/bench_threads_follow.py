"""A job that starts in the middle of a run: the thread count following the load against the
thread count fixed when the run started, in one run, same machine.

    python benchmarks/bench_threads_follow.py --pairs 2 --busy-after 5

Each variant judges the first PAIRS pairs of examples/pairs.jsonl with the embedded demo judge
and the settings `rmjudge score` uses by default (no `--threads`), in its own process; BUSY_AFTER
seconds after the engine is loaded, one competing CPU-bound process (`while True: pass`)
starts and runs to the end of the variant. Variants:
  follow   the default: the engine's `LoadFollower` looks at the load every 2 s and changes
           llama.cpp's thread count when it asks for another one
  fixed    the thread count chosen when the run starts, kept to the end (rmjudge 0.8)
Both start on a quiet machine, so both start with every core. Reported: judging wall seconds,
generated tokens/s, the thread count at the end and how many times it changed. The samples of
both variants must be equal (the thread count changes none); the script checks it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def variant(name: str, pairs: int, busy_after: float, work: str) -> dict:
    import duckdb

    import rmjudge
    from rmjudge.engine import cpu_load

    made = []
    init = cpu_load.LoadFollower.__init__

    def register(self, *args, **kw):
        init(self, *args, **kw)
        made.append(self)

    cpu_load.LoadFollower.__init__ = register
    if name == "fixed":  # the count chosen at the start, kept (rmjudge 0.8)
        cpu_load.LoadFollower.check = lambda self: None
    src = os.path.join(work, "pairs.jsonl")
    with open(ROOT / "examples" / "pairs.jsonl", "rb") as f:
        lines = f.read().splitlines(True)[:pairs]
    with open(src, "wb") as f:
        f.write(b"".join(lines))
    out = os.path.join(work, f"{name}.duckdb")
    # the hog sleeps through the engine's loading (about 2 s here) and BUSY_AFTER more
    spin = f"import time; time.sleep({busy_after + 2})\nwhile True: pass"
    hog = subprocess.Popen([sys.executable, "-c", spin])
    try:
        rmjudge.score(src, output=out)  # `rmjudge score`'s defaults: the embedded demo judge
    finally:
        hog.kill()
    with duckdb.connect(out, read_only=True) as c:
        samples = c.execute('SELECT pair_id, "order", stage, idx, text FROM samples '
                            "ORDER BY ALL").fetchall()
        tokens, wall = c.execute("SELECT generated_tokens, wall_seconds FROM runs").fetchone()
    f = made[0]
    return {"variant": name, "wall_s": round(wall, 1), "generated_tok_s": round(tokens / wall, 1),
            "generated_tokens": tokens, "threads_at_end": f.threads,
            "thread_changes": f.changes, "samples_digest": hash(tuple(map(tuple, samples)))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--busy-after", type=float, default=5.0)
    ap.add_argument("--work", default=None)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.variant:
        print(json.dumps(variant(a.variant, a.pairs, a.busy_after, a.work)))
        return
    from rmjudge.files import scratch

    with scratch("bench_threads_follow") as work:
        results = []
        for name in ("follow", "fixed"):
            r = subprocess.run([sys.executable, __file__, "--variant", name, "--pairs",
                                str(a.pairs), "--busy-after", str(a.busy_after), "--work", work],
                               capture_output=True, text=True, check=True,
                               env={**os.environ, "PYTHONHASHSEED": "0"})
            results.append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(results[-1], flush=True)
    same = len({r["samples_digest"] for r in results}) == 1
    print(f"load average {os.getloadavg()[0]:.1f}; samples equal: {same}; follow / fixed "
          f"wall: {results[1]['wall_s'] / results[0]['wall_s']:.2f}x faster")


if __name__ == "__main__":
    main()
