"""The experiment helpers in examples/: the by-prompt split and the paired gain (now in\nrmjudge.analysis.compare)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _split(out: Path, files: list[str], train: int, test: int, **kw) -> tuple[list, list]:
    args = [sys.executable, str(EXAMPLES / "split_pairs.py"), str(out), *files,
            "--train", str(train), "--test", str(test)]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    subprocess.run(args, check=True, capture_output=True)
    read = lambda name: [json.loads(x) for x in (out / name).read_text().splitlines()]  # noqa: E731
    return read("train.jsonl"), read("test.jsonl")


def test_split_keeps_every_prompt_on_one_side_and_shares_files(tmp_path):
    a = [{"id": f"a{i}", "prompt": f"q{i // 2}", "chosen": "x", "rejected": "y"}
         for i in range(40)]  # 20 prompts, 2 rows each
    b = [{"id": f"b{i}", "prompt": f"r{i}", "chosen": "x", "rejected": "y"} for i in range(40)]
    b.append({"id": "long", "prompt": "p" * 2000, "chosen": "x", "rejected": "y"})
    fa, fb = _write(tmp_path / "a.jsonl", a), _write(tmp_path / "b.jsonl", b)
    train, test = _split(tmp_path / "s", [fa, fb], 10, 10, max_chars=900, seed=3)
    assert {r["prompt"] for r in train}.isdisjoint({r["prompt"] for r in test})
    assert sum(r["id"].startswith("b") for r in test) == 5  # the same share from each file
    assert sum(r["id"].startswith("a") for r in test) >= 5  # whole prompts: may overshoot
    assert len(train) == 10 and "long" not in {r["id"] for r in train + test}
    again = _split(tmp_path / "s2", [fa, fb], 10, 10, max_chars=900, seed=3)
    assert again == (train, test)  # seeded
    other = _split(tmp_path / "s3", [fa, fb], 10, 10, max_chars=900, seed=4)
    assert other != (train, test)


def test_paired_gain_is_the_mean_difference_with_an_interval():
    from rmjudge.analysis.compare import paired_gain

    base = {f"p{i}": 0.5 for i in range(100)}
    same = paired_gain(base, dict(base))
    assert same == (0.0, 0.0, 0.0)
    better = {k: (1.0 if i < 30 else 0.5) for i, k in enumerate(base)}  # +0.5 on 30 pairs
    g, lo, hi = paired_gain(base, better)
    assert g == pytest.approx(0.15) and 0 < lo < 0.15 < hi < 0.3


def test_split_leaves_out_the_prompts_and_ids_of_excluded_files(tmp_path):
    a = [{"id": f"a{i}", "prompt": f"q{i}", "chosen": "x", "rejected": "y"} for i in range(20)]
    demo = [{"id": "a3", "prompt": "other", "chosen": "x", "rejected": "y"},
            {"id": "d1", "prompt": "q7", "chosen": "x", "rejected": "y"}]
    fa, fd = _write(tmp_path / "a.jsonl", a), _write(tmp_path / "demo.jsonl", demo)
    train, test = _split(tmp_path / "s", [fa], 10, 5, exclude=fd)
    ids = {r["id"] for r in train + test}
    assert "a3" not in ids and "a7" not in ids and len(train) == 10 and len(test) == 5
