"""`rmjudge score` killed with SIGKILL twice, right after a commit each time, then run to the
end: one row per pair and one sample per slot, no error rows, and every stored verdict follows
from the stored samples. The scripted judge stands in for the model (`SCRIPTED_CLI`); the
engine's own kill -9 and resume on the embedded model is in tests/test_model.py and
tests/test_reproducible.py."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import SCRIPTED_CLI, kill_after_commits, rows
from recompute import recompute_all


def test_kill_9_twice_then_rerun_leaves_one_row_per_pair(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"question {i}",
                                       "chosen": f"answer q={i + 10}",
                                       "rejected": f"answer q={i}"}) + "\n" for i in range(5)))
    out = str(tmp_path / "k.duckdb")
    args = ["score", str(src), "-o", out, "--samples", "2", "--max-tokens", "16",
            "--commit-every", "1", "--quiet"]
    assert kill_after_commits(args, 1, preamble=SCRIPTED_CLI) == 1  # after its first pair
    assert rows(out, "SELECT count(*) FROM pairs") == [(1,)]
    assert kill_after_commits(args, 2, preamble=SCRIPTED_CLI) == 2  # the resumed run, two more
    assert rows(out, "SELECT count(*) FROM pairs") == [(3,)]
    done = subprocess.run([sys.executable, "-c", SCRIPTED_CLI
                           + "\nfrom rmjudge.cli import main\nmain(prog_name='rmjudge')", *args],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert rows(out, "SELECT count(*), count(DISTINCT id) FROM pairs") == [(5, 5)]
    assert rows(out, """SELECT count(*) FROM (SELECT pair_id, "order", stage, idx FROM samples
                     GROUP BY ALL HAVING count(*) > 1)""") == [(0,)]
    assert rows(out, "SELECT count(*) FROM errors") == [(0,)]
    assert rows(out, "SELECT count(*) FROM runs") == [(3,)]
    assert recompute_all(out) == 5
    assert rows(out, "SELECT count(*) FROM pairs WHERE correct") == [(5,)]  # the larger q won
