"""Assembling a Ray run: `rmjudge.store.import_batches` over N batch folders.

    python benchmarks/bench_ray_import.py --batches 2000 --work /tmp/rayimport
    python benchmarks/bench_ray_import.py --batches 2000 --work /tmp/rayimport --src OLD_TREE

Builds N batch folders of 8 pairs each, as Ray workers write them (pairs, samples, errors as
Parquet, `columns.json`), from one scripted run with typed passthrough columns (BIGINT, DOUBLE,
JSON, BOOLEAN), once per `--work` folder; then times the import of all of them into a new store
and prints the counts and the passthrough column types it gave. `--src` imports rmjudge from
another tree (e.g. a checkout of the previous release) to time its import on the same folders.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--work", required=True, help="Folder for the batches (kept for reruns).")
    ap.add_argument("--src", default=str(HERE.parent), help="The rmjudge tree to time.")
    a = ap.parse_args()
    sys.path[:0] = [a.src, str(HERE.parent / "tests")]
    import duckdb

    from rmjudge.store import NewStore, import_batches

    batches = os.path.join(a.work, "batches")
    if not os.path.isdir(batches):
        make_batches(a.work, a.batches)
    out = os.path.join(a.work, f"out-{os.getpid()}.duckdb")
    t = time.perf_counter()
    new = NewStore(out, {"bench": 1}, overwrite=False)
    counts = import_batches(new.store, batches, [])
    new.install()
    dt = time.perf_counter() - t
    with duckdb.connect(out, read_only=True) as con:
        types = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE "
                            "table_name = 'pairs' AND column_name IN ('n', 'score', 'meta', "
                            "'flag') ORDER BY column_index").fetchall()
    os.remove(out)
    print(f"{len(os.listdir(batches))} batches -> (pairs, errors, duplicates) {counts} in "
          f"{dt:.2f} s; passthrough types {types}")


def make_batches(work: str, n: int) -> None:
    import duckdb
    from test_score import length_judge

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score
    from rmjudge.core.settings import JudgeSettings
    from rmjudge.files import make_dir, write_json, write_query_file

    make_dir(os.path.join(work, "batches"))
    src = os.path.join(work, "in.jsonl")
    with open(src, "w") as f:
        for i in range(8):
            f.write(json.dumps({"id": f"p{i}", "prompt": f"q{i}", "chosen": "a long answer",
                                "rejected": "b", "n": i, "score": i + 0.5, "meta": {"k": i},
                                "flag": i % 2 == 0}) + "\n")
    one = os.path.join(work, "one.duckdb")
    score(src, ScriptedEngine(length_judge), JudgeSettings(samples=2), output=one)
    with duckdb.connect(one, read_only=True) as con:
        cmap = json.loads(con.execute(
            "SELECT value FROM meta WHERE key = 'passthrough'").fetchone()[0])
        types = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE "
                                 "table_name = 'pairs'").fetchall())
        for b in range(n):
            d = os.path.join(work, "batches", f"f00000-r{b * 8 + 1:012d}-{b * 8 + 8:012d}")
            make_dir(d)
            write_query_file(con, f"SELECT * REPLACE (id || '-{b}' AS id, row_number + "
                             f"{b * 8} AS row_number) FROM pairs", f"{d}/pairs.parquet", "parquet")
            write_query_file(con, f"SELECT * REPLACE (pair_id || '-{b}' AS pair_id) FROM "
                             "samples", f"{d}/samples.parquet", "parquet")
            write_query_file(con, "SELECT * FROM errors", f"{d}/errors.parquet", "parquet")
            write_json(os.path.join(d, "columns.json"), [[k, c, types[c]] for k, c in cmap.items()])


if __name__ == "__main__":
    main()
