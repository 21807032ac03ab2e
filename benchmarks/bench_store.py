"""Storing a run: one statement per chunk (rmjudge.store.bulk) against one statement per row.

    python benchmarks/bench_store.py --pairs 400 --samples 8 --bad-rows 3000

Scores the same pairs (../shared/data/pandalm by default: prompts and responses of real
length) twice in one process with a scripted judge that answers at once, so what is left is
intake, the protocol and the store: once with the rows written as rmjudge 0.6 wrote them (DuckDB
`executemany`, which runs one INSERT per row), once as rmjudge writes them now (each table's
rows of a chunk in one INSERT). Then the same for an input of `--bad-rows` rows that cannot be
judged (the error rows of a wrong --map). Reports wall seconds for each and checks that both
paths stored the same tables.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "pandalm" / "pairs.jsonl"
ANALYSIS = ("Response {slot} answers the question directly, keeps to the facts given in the "
            "prompt and explains each step; the other response repeats itself and leaves out "
            "the final check. ") * 4


def scripted_judge(req, i: int):
    from rmjudge.prompts import completion_text

    stage = req.share_key[2]
    pred = 1 if (i % 3) else 2
    task = "refl" if stage == "reflection" else "pref"
    return completion_text(task, ANALYSIS.format(slot=pred), pred)


def tables(path: str) -> list:
    import duckdb

    con = duckdb.connect(path, read_only=True)
    try:
        return [con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                for t in ("pairs", "samples", "errors")]
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--bad-rows", type=int, default=3000)
    args = ap.parse_args()
    from rmjudge.files import scratch

    with scratch(prefix="rmjudge-bench-store-") as tmp:
        run(Path(tmp), args)


def run(work: Path, args) -> None:
    import rmjudge.store.run_store as run_store
    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score
    from rmjudge.core.settings import JudgeSettings
    from rmjudge.store.bulk import delete_in_each, insert_rows_each

    bad = work / "bad.jsonl"
    with open(args.data, "rb") as f:
        good = [orjson.loads(line) for _, line in zip(range(2), f)]
    bad.write_bytes(b"".join(orjson.dumps({"prompt": "q", "chosen": "x"}) + b"\n"
                             for _ in range(args.bad_rows)) + orjson.dumps(good[0]) + b"\n")
    settings = JudgeSettings(samples=args.samples, max_tokens=256)
    fast = (run_store.insert_rows, run_store.delete_in)
    slow = (insert_rows_each, delete_in_each)
    print(f"{'input':<22} {'path':<14} {'pairs':>6} {'errors':>7} {'seconds':>8}")
    for name, data, limit in (("pairs", args.data, args.pairs), ("rows in error", str(bad), None)):
        stored = {}
        for path, (insert, delete) in (("row at a time", slow), ("one per chunk", fast)):
            run_store.insert_rows, run_store.delete_in = insert, delete
            out = str(work / f"{name.replace(' ', '_')}-{path.replace(' ', '_')}.duckdb")
            t0 = time.perf_counter()
            s = score(data, ScriptedEngine(scripted_judge), settings, output=out, limit=limit)
            dt = time.perf_counter() - t0
            stored[path] = tables(out)
            print(f"{name:<22} {path:<14} {s.judged:6d} {s.errors:7d} {dt:8.2f}")
        run_store.insert_rows, run_store.delete_in = fast
        same = stored["row at a time"] == stored["one per chunk"]
        print(f"{name:<22} same tables: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
