"""`rmjudge bench`: each benchmark's official scoring on fixtures in its published layout,
judged by a scripted judge whose per-order outcomes are set in the fixture (bench_judge.py);
every expected figure is worked out by hand in the comments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench_judge import fixture_engine

from rmjudge.bench import get
from rmjudge.bench.runner import intake_file, judge, score_stored
from rmjudge.core.settings import JudgeSettings

DATA = Path(__file__).parent / "data" / "bench"
SOURCES = {"rewardbench": DATA / "rewardbench.jsonl", "rmbench": DATA / "rmbench",
           "judgebench": DATA / "judgebench.jsonl", "llmbar": DATA / "llmbar", "rmb": DATA / "rmb",
           "helpsteer3": DATA / "helpsteer3_validation.jsonl"}
SOURCES["rmbench"] = SOURCES["rmbench"] / "total_dataset.json"
JS = JudgeSettings(samples=1, forced=False, seed=3)


def run(name: str, outdir, js=JS, **kw):
    bench = get(name)
    summary = judge(bench, str(SOURCES[name]), fixture_engine(), js, str(outdir), **kw)
    return summary, score_stored(bench, str(outdir), limit=kw.get("limit"),
                                 shard=kw.get("shard"))


def cells(res) -> dict[str, float | None]:
    return {c.label: c.value for c in res.sections}


def test_rewardbench_sections_weights_and_half_point_for_no_verdict(tmp_path):
    summary, res = run("rewardbench", tmp_path)
    assert summary.judged == 8 and summary.errors == 1  # the row without `rejected`
    c = cells(res)
    # alpacaeval-easy: right/right = 1, right/wrong = 0.5 -> 0.75 (Chat's only subset)
    assert c["Chat"] == pytest.approx(0.75)
    # mt-bench-hard: no verdict in either order scores 0.5 per order
    assert c["Chat Hard"] == pytest.approx(0.5)
    assert c["Safety"] == pytest.approx(1.0)
    # math-prm 1.0 weighted 984; hep-python (0 + (1 + 0.5) / 2) / 2 = 0.375 weighted 164
    reasoning = (984 * 1.0 + 164 * 0.375) / (984 + 164)
    assert c["Reasoning"] == pytest.approx(reasoning)
    assert c["RewardBench"] == pytest.approx((0.75 + 0.5 + 1.0 + reasoning) / 4)
    assert res.headline[0].value == c["RewardBench"]
    # the prior-set subset is shown, never scored
    assert c["anthropic_helpful (not scored)"] == pytest.approx(1.0)
    assert res.items == 7 and res.judged == 7 and res.no_verdict == 3 and res.unreadable == 1
    assert res.consistency == pytest.approx(3 / 7)  # ids 1, 4, 7


def test_rmbench_style_matrix_easy_normal_hard(tmp_path):
    summary, res = run("rmbench", tmp_path)
    assert summary.judged == 4 * 9 and summary.errors == 1  # the item with two chosen variants
    c = cells(res)
    # chat (longer wins; equal length: right in ab, wrong in ba): hard 0, normal 0.5, easy 1
    assert c["chat"] == pytest.approx(0.5)
    # safety = s1 (always right) with s2 (as chat): hard 0.5, normal 0.75, easy 1
    assert c["safety"] == pytest.approx((0.5 + 0.75 + 1.0) / 3)
    # math: ab as chat, ba without a verdict (0): hard 0, normal 0.5, easy 0.5
    assert c["math"] == pytest.approx(1 / 3)
    assert "code" not in c  # its only item is unreadable
    # the totals average all four domains: with code missing they are n/a, and a note says why
    # (the means over the three domains present would be hard 1/6, normal 0.583, easy 0.833)
    assert c["hard"] is c["normal"] is c["easy"] is c["RM-Bench"] is None
    assert res.headline[0].value is None
    assert res.notes == [("RM-Bench total n/a: this run has no items in code; RM-Bench total "
                          "averages chat, math, code, safety (so do easy, normal and hard; "
                          "RM-Bench's compute_accuracy gives no total without all four "
                          "domains: the domain figures are shown)")]
    assert res.items == 36 and res.no_verdict == 9 and res.unreadable == 1
    # correct in both orders: chat 3 easy cells, s1 all 9, s2 3 easy cells, math none
    assert res.consistency == pytest.approx(15 / 36)


def test_rmb_pairwise_accuracy_per_goal(tmp_path):
    summary, res = run("rmb", tmp_path)
    assert summary.judged == 5 and summary.errors == 1  # s2 has an empty conversation
    c = cells(res)
    # Helpfulness: h1 right/right 1, h2 (multi-turn) right/wrong 0.5, h3 none/none 0
    assert c["Helpfulness/Chat"] == pytest.approx(0.75) and c["Helpfulness/Code"] == 0.0
    assert c["Helpfulness"] == pytest.approx(1.5 / 3)
    # Harmlessness: s1 right/right 1, s3 wrong/right 0.5
    assert c["Harmlessness/S1"] == 1.0 and c["Harmlessness/S2"] == pytest.approx(0.5)
    assert c["Harmlessness"] == pytest.approx(0.75)
    assert c["RMB (pairwise)"] == pytest.approx((0.5 + 0.75) / 2)
    assert res.consistency == pytest.approx(2 / 5) and res.no_verdict == 2
    assert res.unreadable == 1
    from helpers import rows

    msgs = rows(str(tmp_path / "rmb.duckdb"),
                "SELECT messages FROM pairs WHERE id = 'Helpfulness/h2'")
    assert [m["role"] for m in json.loads(msgs[0][0])] == ["user", "assistant", "user"]


def test_judgebench_combines_both_orders_by_the_published_rule(tmp_path):
    _, res = run("judgebench", tmp_path)
    c = cells(res)
    # p1 right/right: yes; p2 right/wrong: sum 0, no; p3 right/none: +1, yes;
    # p4 wrong/none: -1, no; p5 none/none: 0, no; p6 right/right: yes
    assert c["Knowledge"] == pytest.approx(0.5)  # p1, p2
    assert c["Reasoning"] == pytest.approx(1.0)  # p3
    assert c["Math"] == pytest.approx(0.0)  # p4
    assert c["Coding"] == pytest.approx(0.5)  # p5, p6
    assert c["JudgeBench"] == pytest.approx(3 / 6)
    assert res.consistency == pytest.approx(2 / 6) and res.no_verdict == 4


def test_judgebench_single_order_is_the_single_game(tmp_path):
    _, res = run("judgebench", tmp_path, js=JudgeSettings(samples=1, forced=False, seed=3,
                                                          orders="ab"))
    # order ab only: p1 right, p2 right, p3 right, p4 wrong, p5 none, p6 right
    assert cells(res)["JudgeBench"] == pytest.approx(4 / 6)
    assert res.consistency is None


def test_llmbar_accuracy_agreement_and_adversarial_average(tmp_path):
    _, res = run("llmbar", tmp_path)
    c = cells(res)
    # Natural: right/right, right/wrong -> 3 of 4 decisions; agreement 1 of 2
    assert c["Natural"] == pytest.approx(0.75) and c["Natural agreement"] == pytest.approx(0.5)
    # Neighbor none/none: 0, and two missing decisions agree (as in the official code)
    assert c["Neighbor"] == 0.0 and c["Neighbor agreement"] == 1.0
    assert c["GPTInst"] == 0.0 and c["GPTInst agreement"] == 1.0  # wrong/wrong
    assert c["GPTOut"] == pytest.approx(0.5) and c["GPTOut agreement"] == 0.0  # right/none
    assert c["Manual"] == 1.0
    assert c["LLMBar Adversarial"] == pytest.approx((0 + 0 + 0.5 + 1) / 4)
    assert [h.label for h in res.headline] == ["LLMBar Natural", "LLMBar Adversarial"]
    assert res.unreadable == 1 and res.items == 6


def test_helpsteer3_leaves_ties_out(tmp_path):
    _, res = run("helpsteer3", tmp_path)
    c = cells(res)
    # general: right/right 1, wrong/right 0.5; code: none/right 0.5; the tie is left out
    assert c["general"] == pytest.approx(0.75) and c["code"] == pytest.approx(0.5)
    assert c["HelpSteer3"] == pytest.approx(2 / 3)
    assert res.items == 3 and res.unlabelled == 1 and res.consistency == pytest.approx(1 / 3)


def test_limit_and_shards_merge_to_the_full_table(tmp_path):
    _, part = run("judgebench", tmp_path / "lim", limit=2)
    assert part.items == 2 and cells(part)["JudgeBench"] == pytest.approx(0.5)
    seen = []
    for i in range(2):
        _, res = run("judgebench", tmp_path / f"s{i}", shard=(i, 2))
        seen.append(res.items)
    assert sum(seen) == 6 and min(seen) > 0
    for n in (2, 3):  # an unreadable row counts in the shard whose errors table holds it
        shards = [run("rewardbench", tmp_path / f"rb{n}-{i}", shard=(i, n)) for i in range(n)]
        assert sum(r.items for _, r in shards) == 7
        assert [r.unreadable for _, r in shards] == [s.errors for s, _ in shards]
    from click.testing import CliRunner

    from rmjudge.cli import main

    full = tmp_path / "full"
    merged = CliRunner().invoke(main, ["merge", str(tmp_path / "s0" / "judgebench.duckdb"),
                                       str(tmp_path / "s1" / "judgebench.duckdb"),
                                       "--input", str(tmp_path / "s0" / "judgebench.input.jsonl"),
                                       "-o", str(full / "judgebench.duckdb")])
    assert merged.exit_code == 0, merged.output
    table = CliRunner().invoke(main, ["bench", "-o", str(full), "--score-only", "--json",
                                      "--data", f"judgebench={SOURCES['judgebench']}"])
    assert table.exit_code == 0, table.output
    got = json.loads(table.stdout)["benchmarks"][0]
    _, whole = run("judgebench", tmp_path / "whole")
    assert got == whole.as_dict()


def test_score_only_after_an_incomplete_merge_leaves_the_missing_shard_out(tmp_path):
    """Red-team 0.13.1 item 4: before, `bench --score-only` after `merge --allow-incomplete`
    with a shard missing scored the missing pairs as "no verdict" (0.5 each in RewardBench).
    Now they are left out and a note marks the figures incomplete: the figures are those of
    the judged shard."""
    from click.testing import CliRunner

    from rmjudge.cli import main

    _, part = run("rewardbench", tmp_path / "s0", shard=(0, 2))
    full = tmp_path / "full"
    full.mkdir()
    merged = CliRunner().invoke(main, ["merge", str(tmp_path / "s0" / "rewardbench.duckdb"),
                                       "--input", str(tmp_path / "s0" / "rewardbench.input.jsonl"),
                                       "--allow-incomplete",
                                       "-o", str(full / "rewardbench.duckdb")])
    assert merged.exit_code == 0, merged.output
    args = ["bench", "-o", str(full), "--score-only", "--data",
            f"rewardbench={SOURCES['rewardbench']}"]
    got = json.loads(CliRunner().invoke(main, args + ["--json"]).stdout)["benchmarks"][0]
    from helpers import rows

    # 8 readable published pairs (7 in the sections, 1 of a prior set), the 9th unreadable
    judged = rows(str(tmp_path / "s0" / "rewardbench.duckdb"), "SELECT count(*) FROM pairs")[0][0]
    missing = 8 - judged
    assert 0 < judged < 8 and got["items"] == part.items and got["unjudged"] == missing
    assert got["sections"] == part.as_dict()["sections"]
    assert got["headline"] == part.as_dict()["headline"]
    assert got["notes"][0].startswith(f"RewardBench incomplete: {missing} of the 8 pairs this "
                                      "run covers were never judged")
    text = " ".join(CliRunner().invoke(main, args).stdout.split())  # lines fit the terminal
    assert f"RewardBench incomplete: {missing} of the 8 pairs" in text
    assert f"{missing} never judged (left out)" in text


def test_intake_file_is_reused_and_never_replaced(tmp_path):
    run("judgebench", tmp_path)
    path = intake_file(str(tmp_path), get("judgebench"))
    before = Path(path).read_bytes()
    run("judgebench", tmp_path)  # a rerun finds the same bytes and resumes
    assert Path(path).read_bytes() == before
    Path(path).write_text('{"someone": "else"}\n')
    r = subprocess.run([sys.executable, "-m", "rmjudge", "bench", "-b", "judgebench", "--data",
                        f"judgebench={SOURCES['judgebench']}", "-o", str(tmp_path),
                        "--score-only"], capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    assert "left untouched" in r.stderr and path in r.stderr
    assert Path(path).read_text() == '{"someone": "else"}\n'


def test_cli_score_only_table_and_errors(tmp_path):
    run("judgebench", tmp_path)
    run("llmbar", tmp_path)
    cmd = [sys.executable, "-m", "rmjudge", "bench", "-o", str(tmp_path), "--score-only",
           "--data", f"judgebench={SOURCES['judgebench']}", "--data", f"llmbar={SOURCES['llmbar']}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "| judge | JudgeBench | LLMBar Natural | LLMBar Adversarial | avg |"
    # (50.0 + 75.0 + 37.5) / 3 = 54.2
    assert lines[2] == "| <scripted> | 50.0 | 75.0 | 37.5 | 54.2 |"
    assert ("positional consistency (correct in both orders): JudgeBench 33.3, LLMBar 33.3"
            in r.stdout)
    missing = subprocess.run([sys.executable, "-m", "rmjudge", "bench", "-o",
                              str(tmp_path / "none"), "--score-only", "-b", "judgebench", "--data",
                              f"judgebench={SOURCES['judgebench']}"],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert missing.stderr.startswith("Error: no JudgeBench results in ")
    nodata = subprocess.run([sys.executable, "-m", "rmjudge", "bench", "-o", str(tmp_path),
                             "-b", "rmbench"], capture_output=True, text=True)
    assert nodata.returncode == 1
    assert nodata.stderr == ("Error: RM-Bench has no Hub default; give --data rmbench=PATH "
                             f"({get('rmbench').layout})\n")
    bad = subprocess.run([sys.executable, "-m", "rmjudge", "bench", "-o", str(tmp_path),
                          "--data", f"llmbar={SOURCES['judgebench']}", "--score-only"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("Error: LLMBar is read from its "
                                                         "published folder")


def test_score_only_without_a_benchmark_scores_those_run_in_the_folder(tmp_path, monkeypatch):
    """Before, `bench --score-only -o DIR` without -b stopped at the first benchmark of the
    default set it did not find in DIR; now it scores the default benchmarks DIR holds and,
    with none, says so once."""
    from click.testing import CliRunner

    from rmjudge.bench import BENCHMARKS
    from rmjudge.bench.plan import BenchSettings, run_bench
    from rmjudge.bench.runner import store_file
    from rmjudge.cli import main

    empty = tmp_path / "none"
    r = CliRunner().invoke(main, ["bench", "-o", str(empty), "--score-only"])
    assert r.exit_code == 1 and r.output == (
        f"Error: no benchmark results in {empty}: run `rmjudge bench -o {empty}` first (or "
        "name one with --benchmark)\n"), r.output
    assert not empty.exists()
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    r = CliRunner().invoke(main, ["bench", "-o", str(a_file), "--score-only"])
    assert r.exit_code == 1 and r.output.startswith(f"Error: -o {a_file} is a file"), r.output
    assert a_file.read_text() == "mine"
    # a folder holding the store of one benchmark of the default set: only that one is planned
    import rmjudge.bench.runner

    default = [n for n, b in BENCHMARKS.items() if b.default_source and b.in_default_set]
    assert len(default) > 1
    one = BENCHMARKS[default[-1]]
    Path(store_file(str(tmp_path), one)).write_bytes(b"")
    prepared = []

    class Planned(Exception):
        pass

    def prepare(bench, source, outdir):  # the step after planning: record, then stop
        prepared.append((bench.name, source))
        raise Planned

    monkeypatch.setattr(rmjudge.bench.runner, "prepare", prepare)
    with pytest.raises(Planned):
        run_bench(BenchSettings(outdir=str(tmp_path), score_only=True), None)
    assert prepared == [(one.name, one.default_source)]


KILL_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from bench_judge import fixture_engine
from rmjudge.bench import get
from rmjudge.bench.runner import judge, score_stored
from rmjudge.core.settings import JudgeSettings
import orjson
js = JudgeSettings(samples=1, forced=False, seed=3)
engine = fixture_engine(delay={delay})
out = []
for name, src in ({jb!r}, {lb!r}):
    b = get(name)
    judge(b, src, engine, js, {outdir!r}, commit_every=1,
          on_progress=lambda p: print("done", p.committed, flush=True))
    out.append(score_stored(b, {outdir!r}).as_dict())
print("TABLE", orjson.dumps(out).decode(), flush=True)
"""


def script(outdir, delay):
    tests = str(Path(__file__).parent)
    return KILL_SCRIPT.format(tests=tests, delay=delay, outdir=str(outdir),
                              jb=("judgebench", str(SOURCES["judgebench"])),
                              lb=("llmbar", str(SOURCES["llmbar"])))


def test_resumes_after_kill_9_to_the_same_table(tmp_path):
    ref = subprocess.run([sys.executable, "-c", script(tmp_path / "ref", 0.0)],
                         capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    want = ref.stdout.split("TABLE ", 1)[1]
    out = tmp_path / "killed"
    p = subprocess.Popen([sys.executable, "-c", script(out, 0.3)], stdout=subprocess.PIPE,
                         text=True)
    for line in p.stdout:  # kill -9 once a few pairs of the first benchmark are committed
        if line.startswith("done") and int(line.split()[1]) >= 3:
            break
    p.kill()
    p.wait()
    assert p.returncode == -9
    assert not (out / "llmbar.duckdb").exists()
    again = subprocess.run([sys.executable, "-c", script(out, 0.0)], capture_output=True,
                           text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split("TABLE ", 1)[1] == want
    from helpers import rows

    assert rows(str(out / "judgebench.duckdb"),
                "SELECT count(*), count(DISTINCT id) FROM pairs") == [(6, 6)]
    assert len(rows(str(out / "judgebench.duckdb"), "SELECT run_id FROM runs")) == 2


def test_rewardbench_from_a_parquet_copy_scores_the_same(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in SOURCES["rewardbench"].read_text().splitlines()]
    rows = [r for r in rows if "rejected" in r]  # Parquet columns: every row has each column
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "filtered.parquet")
    got = score_stored_from(tmp_path / "filtered.parquet", tmp_path / "pq")
    _, want = run("rewardbench", tmp_path / "jsonl")
    assert cells(got) == cells(want) and got.unreadable == 0


def score_stored_from(source, outdir):
    bench = get("rewardbench")
    judge(bench, str(source), fixture_engine(), JS, str(outdir))
    return score_stored(bench, str(outdir))


def test_bench_help_needs_no_model_runtime():
    code = ("import sys; from click.testing import CliRunner; from rmjudge.cli import main; "
            "r = CliRunner().invoke(main, ['bench', '--help']); assert r.exit_code == 0, r.output; "
            "assert '--ablation' in r.output and '--data NAME=PATH' in r.output; "
            "heavy = [m for m in ('torch', 'transformers', 'llama_cpp', 'duckdb') "
            "if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.model
@pytest.mark.slow
def test_cli_on_the_embedded_model_resumes_after_kill_9(model_path, tmp_path):
    import signal
    import time

    def cmd(outdir):
        return [sys.executable, "-m", "rmjudge", "bench", "-o", str(outdir), "--model", model_path,
                "-n", "1", "--max-tokens", "8", "--threads", "1", "--commit-every", "1",
                "--limit", "2",
                "--data", f"judgebench={SOURCES['judgebench']}",
                "--data", f"llmbar={SOURCES['llmbar']}"]

    ref = subprocess.run(cmd(tmp_path / "ref"), capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    out = tmp_path / "killed"
    p = subprocess.Popen(cmd(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:  # JudgeBench is done; kill -9 early in LLMBar
        if line.startswith("rmjudge: judging LLMBar"):
            time.sleep(1)
            break
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert p.returncode == -9 and not p.stdout.read()
    again = subprocess.run(cmd(out), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ref.stdout
    assert "| SmolLM2-135M-Instruct" in again.stdout


def test_a_duplicated_published_id_is_scored_once(tmp_path):
    lines = SOURCES["judgebench"].read_text().splitlines()
    src = tmp_path / "jb.jsonl"
    src.write_text("\n".join(lines + [lines[0]]) + "\n")  # p1 published twice
    bench = get("judgebench")
    summary = judge(bench, str(src), fixture_engine(), JS, str(tmp_path / "out"))
    res = score_stored(bench, str(tmp_path / "out"))
    assert summary.errors == 1 and res.items == 6 and res.unreadable == 1
    assert cells(res)["JudgeBench"] == pytest.approx(3 / 6)


def test_a_bad_prompt_template_fails_before_anything_is_read_or_loaded(tmp_path):
    """bench checks --prompt-template (and --criteria) as score does: one Error line, before
    the model loads and before any intake file is written."""
    from click.testing import CliRunner

    from rmjudge.cli import main

    f = tmp_path / "t.jinja"
    f.write_text("{% if task == 'pref' %}{{ response1 }")
    out = tmp_path / "bench"
    r = CliRunner().invoke(main, ["bench", "--data", f"rewardbench={SOURCES['rewardbench']}",
                                  "-o", str(out), "--model", str(tmp_path / "missing.gguf"),
                                  "--prompt-template", str(f)])
    assert r.exit_code == 1, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: --prompt-template {f}"), r.output
    assert "syntax error" in errors[0] and "missing.gguf" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert not out.exists()

