"""Adaptive sampling (--adaptive K) against the full protocol: accuracy and cost.

    python benchmarks/adaptive.py --pairs 60 --samples 8 --adaptive 2 --max-tokens 96

Judges the same labelled pairs (../shared/data/pandalm by default) twice in one process with
the same engine: the full ReflectRM protocol, then with adaptive sampling. Reports accuracy,
positional consistency, generations, generated tokens and wall seconds for each.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "pandalm" / "pairs.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--adaptive", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--out-dir", default="/tmp/rmjudge-adaptive")
    args = ap.parse_args()

    import duckdb

    from rmjudge.engine import load_engine
    from rmjudge.files import make_dir
    from rmjudge.runs.pipeline import score
    from rmjudge.core.settings import EngineSettings, JudgeSettings

    engine = load_engine(EngineSettings(parallel=args.parallel))
    make_dir(args.out_dir)
    print(f"{'mode':<10} {'acc':>6} {'consist':>8} {'agree':>6} {'gens':>6} {'tokens':>8} {'seconds':>8}")
    for mode, k in (("full", 0), (f"adaptive{args.adaptive}", args.adaptive)):
        out = f"{args.out_dir}/{mode}.duckdb"
        js = JudgeSettings(samples=args.samples, max_tokens=args.max_tokens, adaptive=k)
        before = engine.generated_tokens
        t0 = time.perf_counter()
        s = score(args.data, engine, js, output=out, limit=args.pairs, overwrite=True)
        dt = time.perf_counter() - t0
        con = duckdb.connect(out, read_only=True)
        agree, = con.execute("SELECT avg(consistent::INT) FROM pairs").fetchone()
        con.close()
        print(f"{mode:<10} {s.accuracy or 0:6.1%} {s.positional_consistency or 0:8.1%} "
              f"{agree or 0:6.1%} {s.generations:6d} {engine.generated_tokens - before:8d} {dt:8.1f}")


if __name__ == "__main__":
    main()
