"""Reading rows held in Python (`rmjudge.io.memory.MemoryInput`, the Python API's input) against
reading the same rows from a JSONL file (`rmjudge.io.readers.read_rows`).

    python benchmarks/bench_python_inputs.py --rows 50000

Builds `--rows` pairs of realistic length (a 250-character prompt, two 1,000-character
responses, an id and a number), writes them as JSONL, and times one pass over the raw rows of
each form in the same process: the JSONL file, the list of dicts, a pandas DataFrame (converted
chunk by chunk, NaN as null), and a pyarrow Table. Judging takes seconds per pair, so what is
measured is the intake's share of a run, which should stay negligible.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import orjson


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=50_000)
    args = ap.parse_args()
    import pandas as pd

    from rmjudge.files import scratch
    from rmjudge.io.memory import MemoryInput
    from rmjudge.io.readers import read_rows

    text = "word " * 200
    rows = [{"id": f"p{i}", "prompt": text[:250] + str(i), "chosen": text + "a",
             "rejected": text + "b", "score": float(i)} for i in range(args.rows)]
    forms = {"list of dicts": MemoryInput(rows), "pandas DataFrame": MemoryInput(pd.DataFrame(rows))}
    try:
        import pyarrow as pa

        forms["pyarrow Table"] = MemoryInput(pa.Table.from_pylist(rows))
    except ImportError:
        pass
    with scratch() as d:
        path = Path(d) / "rows.jsonl"
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
        timings = {"JSONL file": _time(lambda: read_rows(str(path)))}
        for name, source in forms.items():
            timings[name] = _time(source.rows)
    for name, seconds in timings.items():
        print(f"{name:18} {args.rows} rows in {seconds:.2f} s ({args.rows / seconds:,.0f} rows/s)")


def _time(rows) -> float:
    start = time.perf_counter()
    n = sum(1 for _ in rows())
    assert n > 0
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
