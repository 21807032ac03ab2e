"""Seeded train / held-out split of labelled pair files, by item, for examples/train_judge.sh.

    python examples/split_pairs.py OUT_DIR --train 128 --test 200 --max-chars 900 --seed 0 \
        A.jsonl B.jsonl ... [--exclude examples/pairs.jsonl]

Rows are grouped into items by (source file, prompt text), so no prompt is in both splits.
Only rows whose prompt + chosen + rejected fit in --max-chars characters are kept (the
experiment is sized for a 2-core CPU). Each file gives the same share of the train and test
rows (a file too small for its share gives what it has). Writes OUT_DIR/train.jsonl and
OUT_DIR/test.jsonl and prints the counts. `--exclude FILE` (repeatable) leaves out every row
whose prompt or id is in FILE, so neither split holds a pair judged elsewhere (the demo's
examples/pairs.jsonl).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--train", type=int, required=True, help="Training rows in all.")
    ap.add_argument("--test", type=int, required=True, help="Held-out rows in all.")
    ap.add_argument("--max-chars", type=int, default=900)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exclude", action="append", default=[],
                    help="Leave out rows whose prompt or id is in this JSONL file.")
    a = ap.parse_args()
    excluded: set[str] = set()
    for path in a.exclude:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    excluded |= {json.dumps(row.get("prompt")), f"id:{row.get('id')}"}
    dropped = 0
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, test = [], []
    k = len(a.files)
    for i, path in enumerate(a.files):
        items: dict[str, list[str]] = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                row = json.loads(line)
                if {json.dumps(row.get("prompt")), f"id:{row.get('id')}"} & excluded:
                    dropped += 1
                    continue
                size = sum(len(str(row.get(c) or "")) for c in ("prompt", "chosen", "rejected"))
                if size <= a.max_chars:
                    items.setdefault(str(row.get("prompt")), []).append(line)
        keys = sorted(items)
        random.Random(f"{a.seed}:{Path(path).name}").shuffle(keys)
        # this file's shares (the remainders go to the first files)
        n_test = a.test // k + (i < a.test % k)
        n_train = a.train // k + (i < a.train % k)
        got_test, got_train = [], []
        for key in keys:
            target = got_test if len(got_test) < n_test else got_train
            if target is got_train and len(got_train) >= n_train:
                break
            target.extend(items[key])
        test += got_test
        train += got_train[:n_train] if len(got_train) > n_train else got_train
        print(f"{path}: {len(keys)} items within {a.max_chars} chars -> "
              f"{len(got_test)} test rows, {min(len(got_train), n_train)} train rows")
    (out / "train.jsonl").write_text("".join(train), encoding="utf-8")
    (out / "test.jsonl").write_text("".join(test), encoding="utf-8")
    print(f"split: {len(train)} train rows, {len(test)} test rows -> {out}"
          + (f" ({dropped} rows left out by --exclude)" if a.exclude else ""))


if __name__ == "__main__":
    main()
