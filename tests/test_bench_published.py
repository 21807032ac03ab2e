"""`rmjudge bench` on benchmark files as their authors publish them: RM-Bench's domain files
(ids repeat across domains), `--limit` by items, RewardBench and RMB by their official rules on
hand-built decisions, partial coverage shown the same way for every benchmark, the table's
averages, and `bench --check`. The scripted judge (bench_judge.py) takes its per-order outcome
from a directive in each fixture prompt; every expected figure is worked out in the comments."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench_judge import fixture_engine

from rmjudge.bench import get
from rmjudge.bench.base import BenchResult, Cell, Item
from rmjudge.bench.runner import intake_file, judge, score_stored
from rmjudge.bench.table import render
from rmjudge.core.settings import JudgeSettings

DATA = Path(__file__).parent / "data" / "bench"
RMBENCH = DATA / "rmbench_data"  # data/ as published: five domain files, no domain field
JS = JudgeSettings(samples=1, forced=False, seed=3)


def run(name: str, source, outdir, **kw):
    bench = get(name)
    summary = judge(bench, str(source), fixture_engine(), JS, str(outdir), **kw)
    return summary, score_stored(bench, str(outdir), limit=kw.get("limit"))


def cells(res) -> dict[str, float | None]:
    return {c.label: c.value for c in res.sections}


def bench_cli(*args: str) -> subprocess.CompletedProcess:
    """`rmjudge bench` at 1,000 columns: these tests read whole lines and the table as it is
    (at 80 columns, lines wrap and a wide table turns on its side: tests/test_output_width.py)."""
    return subprocess.run([sys.executable, "-m", "rmjudge", "bench", *args],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "1000"})


# --- RM-Bench as published ---------------------------------------------------------------

def test_rmbench_domain_files_sharing_ids_are_all_judged(tmp_path):
    """2 chat + 2 code items with the same ids (1, 2), read from the published domain files
    (no domain field): all 36 cells are judged and both domains are scored."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("chat_filtered.json", "code_filtered.json"):
        shutil.copy(RMBENCH / name, data / name)
    summary, res = run("rmbench", data, tmp_path / "out")
    assert summary.judged == 36 and summary.errors == 0
    assert res.items == 36 and res.judged == 36 and res.unreadable == 0
    c = cells(res)
    # chat 1 (longer): hard 0, normal 0.5, easy 1; chat 2 right/right: 1 -> 0.5, 0.75, 1
    assert c["chat"] == pytest.approx((0.5 + 0.75 + 1) / 3)
    # code 1 wrong/wrong 0; code 2 right/none 0.5 -> 0.25 everywhere
    assert c["code"] == pytest.approx(0.25)
    assert [x.n for x in res.sections if x.label in ("chat", "code")] == [2, 2]
    # each domain's easy, normal and hard are shown, as RM-Bench's code gives them per file
    assert (c["chat easy"], c["chat normal"], c["chat hard"]) == pytest.approx((1, 0.75, 0.5))
    assert (c["code easy"], c["code normal"], c["code hard"]) == pytest.approx((0.25,) * 3)
    # math and safety are not in the run: no total, and the note says why
    assert res.headline[0].value is None
    assert res.notes[0].startswith("RM-Bench total n/a: this run has no items in math, safety")
    intake = Path(intake_file(str(tmp_path / "out"), get("rmbench")))
    ids = [json.loads(line)["id"] for line in intake.read_text().splitlines()]
    assert ids[:2] == ["chat/1/00", "chat/1/01"] and "code/1/00" in ids and len(set(ids)) == 36


def test_rmbench_data_folder_scores_every_domain(tmp_path):
    """The published data/ folder (domain files only, as a checkout without the large
    total_dataset.json has it): 7 items, 63 cells, the totals over all four domains."""
    summary, res = run("rmbench", RMBENCH, tmp_path)
    assert summary.judged == 63 and summary.errors == 0 and res.unreadable == 0
    c = cells(res)
    chat, code, math = (0.5 + 0.75 + 1) / 3, 0.25, 1.0
    # safety: refuse none/none 0; response longer: hard 0, normal 0.5, easy 1 -> 0, .25, .5
    safety = (0 + 0.25 + 0.5) / 3
    assert (c["chat"], c["code"], c["math"], c["safety"]) == pytest.approx(
        (chat, code, math, safety))
    assert c["hard"] == pytest.approx((0.5 + 0.25 + 1 + 0) / 4)
    assert c["normal"] == pytest.approx((0.75 + 0.25 + 1 + 0.25) / 4)
    assert c["easy"] == pytest.approx((1 + 0.25 + 1 + 0.5) / 4)
    assert res.headline[0].value == pytest.approx((chat + code + math + safety) / 4)
    assert res.notes == []
    # total_dataset.json (the same rows joined, with a domain field) scores the same
    joined = []
    for name in ("chat", "code", "math", "safety-refuse", "safety-response"):
        for row in json.loads((RMBENCH / f"{name}_filtered.json").read_text()):
            joined.append({**row, "domain": name})
    total = tmp_path / "total" / "total_dataset.json"
    total.parent.mkdir()
    total.write_text(json.dumps(joined))
    _, again = run("rmbench", total, tmp_path / "from-total")
    assert again.as_dict() == res.as_dict()
    # a folder holding total_dataset.json reads it alone (not the domain files twice)
    for name in RMBENCH.iterdir():
        shutil.copy(name, total.parent / name.name)
    _, folder = run("rmbench", total.parent, tmp_path / "from-folder")
    assert folder.as_dict() == res.as_dict()


def test_rmbench_limit_counts_items_not_cells(tmp_path):
    summary, res = run("rmbench", RMBENCH, tmp_path / "one", limit=1)
    assert summary.judged == 9  # chat 1's nine cells, never a part of them
    assert res.items == 9 and cells(res)["chat"] == pytest.approx(0.5)
    summary, res = run("rmbench", RMBENCH, tmp_path / "three", limit=3)
    assert summary.judged == 27 and res.items == 27  # chat 1, chat 2, code 1
    assert res.notes[0] == "RM-Bench: --limit 3: the first 3 of its 7 published items only"
    assert cells(res)["code"] == 0.0


def test_rmbench_rows_without_a_domain_and_duplicates_are_refused_with_reasons(tmp_path):
    rows = json.loads((RMBENCH / "chat_filtered.json").read_text())
    odd = tmp_path / "rows.json"  # a name that names no domain, rows without a domain field
    odd.write_text(json.dumps(rows + [{**rows[0], "domain": "chat"}, {**rows[0],
                                                                       "domain": "chat"}]))
    summary, res = run("rmbench", odd, tmp_path / "out")
    assert summary.judged == 9 and summary.errors == 3 and res.unreadable == 3
    from helpers import rows as query

    # the errors table keeps each refused row with the reason in its raw text
    reasons = [r[0] for r in query(
        str(tmp_path / "out" / "rmbench.duckdb"), "SELECT raw FROM errors ORDER BY row_number")]
    assert sum("no 'domain' column, and the file's name names no domain" in r
               for r in reasons) == 2
    assert any("duplicate key 'chat/1'" in r for r in reasons)
    wrong = tmp_path / "code_filtered.json"  # a domain field that contradicts the file's name
    wrong.write_text(json.dumps([{**rows[0], "domain": "chat"}, rows[1]]))
    summary, _ = run("rmbench", wrong, tmp_path / "wrong")
    assert summary.judged == 9 and summary.errors == 1


# --- RewardBench: the official rule on hand-built decisions ------------------------------

def rb_item(i: int, subset: str, ab, ba) -> Item:
    return Item(f"{subset}/{i}", {"subset": subset}, {"ab": ab, "ba": ba})


def test_rewardbench_without_a_section_shows_no_score_and_both_candidates():
    items = [rb_item(1, "alpacaeval-easy", True, True),  # 1
             rb_item(2, "alpacaeval-easy", True, False),  # 0.5
             rb_item(3, "mt-bench-easy", False, False),  # 0
             rb_item(4, "llmbar-natural", True, True),  # 1
             rb_item(5, "donotanswer", None, None)]  # no verdict: 0.5 per order
    res = get("rewardbench").score(items)
    c = cells(res)
    chat = (0.75 * 100 + 0.0 * 28) / (100 + 28)  # weighted by the leaderboard's counts
    assert c["Chat"] == pytest.approx(chat)
    assert c["Chat Hard"] == 1.0 and c["Safety"] == 0.5 and c["Reasoning"] is None
    # calculate_scores_per_section scores the empty Reasoning 0, then the mean of four:
    official = (chat + 1.0 + 0.5 + 0) / 4  # 0.5215 -> 52.15
    present = (chat + 1.0 + 0.5) / 3  # 0.6953 -> 69.53
    assert res.headline[0].value is None and c["RewardBench"] is None
    assert res.notes == [(
        "RewardBench n/a: this run has no pairs in Reasoning; RewardBench averages Chat, Chat "
        "Hard, Safety, Reasoning; RewardBench's calculate_scores_per_section scores an empty "
        f"section 0, which gives {100 * official:.2f}, and the mean of the sections present is "
        f"{100 * present:.2f}: neither is a RewardBench score")]
    assert f"{100 * official:.2f}" == "52.15" and f"{100 * present:.2f}" == "69.53"
    # the rule itself: Chat 75.0, Chat Hard 50.0, Safety 56.65, no Reasoning -> 45.41, where the
    # mean of the three present is 60.55
    from rmjudge.bench.rewardbench import official_score

    got = official_score({"Chat": 0.75, "Chat Hard": 0.5, "Safety": 0.5665, "Reasoning": None})
    assert f"{100 * got:.2f}" == "45.41"
    assert f"{100 * (0.75 + 0.5 + 0.5665) / 3:.2f}" == "60.55"
    # with Reasoning present the score is the official mean of four
    full = get("rewardbench").score(items + [rb_item(6, "math-prm", True, False)])
    assert full.headline[0].value == pytest.approx((chat + 1.0 + 0.5 + 0.5) / 4)
    assert full.notes == []


# --- RMB: whitespace-only answers are judged, as RMB's code does ------------------------

def test_rmb_whitespace_only_answers_are_judged(tmp_path):
    blank = "\n\n \n \n \n"  # the shape of Harmlessness S5 pair_uid 13586/13587's rejected
    row = {"pair_uid": "13586", "conversation_input": [
        {"role": "user", "content": "How do I remove an airbag fuse?", "language": "English"}],
        "chosen": {"llm_name": "m1", "answer": "Disconnect the battery first; correct."},
        "reject": {"llm_name": "m2", "answer": blank},
        "category_path": "Pairwise_set/Harmlessness/S5"}
    root = tmp_path / "Pairwise_set"
    (root / "Harmlessness").mkdir(parents=True)
    (root / "Harmlessness" / "S5.json").write_text(json.dumps(
        [row, {**row, "pair_uid": "13587", "chosen": {"answer": "I won't; correct."}}]))
    (root / "Helpfulness" / "Chat").mkdir(parents=True)
    shutil.copy(DATA / "rmb" / "Helpfulness" / "Chat" / "Discussion.json",
                root / "Helpfulness" / "Chat")
    summary, res = run("rmb", root, tmp_path / "out")
    assert summary.errors == 0 and res.unreadable == 0
    assert cells(res)["Harmlessness/S5"] == 1.0 and res.headline[0].value is not None
    from helpers import rows

    got = rows(str(tmp_path / "out" / "rmb.duckdb"),
               "SELECT response_a, response_b FROM pairs WHERE id = 'Harmlessness/13586'")
    assert blank in got[0]  # the judge saw the answer as published


def test_mapper_keeps_refusing_blank_responses_unless_asked():
    from rmjudge.io.mapping import Mapper, RowError

    row = {"prompt": "p", "chosen": "a", "rejected": " \n "}
    with pytest.raises(RowError, match="field 'rejected' is empty"):
        Mapper().to_pair(1, row)
    pair = Mapper(blank_responses=True).to_pair(1, row)
    assert " \n " in (pair.response_a, pair.response_b)


# --- partial coverage, the same for every benchmark; the table's averages ----------------

def result(name: str, title: str, head: list[Cell], notes=()) -> BenchResult:
    return BenchResult(name, title, head, head, None, 1, 1, 0, notes=list(notes))


def test_averages_say_what_they_average():
    from rmjudge.bench.table import averages

    rs = [result("rewardbench", "RewardBench", [Cell("RewardBench", 0.8, 10)]),
          result("rmbench", "RM-Bench", [Cell("RM-Bench", 0.7, 10)]),
          result("rmb", "RMB", [Cell("RMB (pairwise)", 0.6, 10)]),
          result("llmbar", "LLMBar", [Cell("LLMBar Natural", 0.9, 5),
                                      Cell("LLMBar Adversarial", 0.4, 5)])]
    avg, paper = averages(rs)
    assert avg.value == pytest.approx((0.8 + 0.7 + 0.6 + 0.9 + 0.4) / 5)  # LLMBar twice
    assert paper.label == "avg (RB, RM-Bench, RMB)" and paper.value == pytest.approx(0.7)
    lines = render(rs, "j").splitlines()
    assert lines[0] == ("| judge | RewardBench | RM-Bench | RMB (pairwise) | LLMBar Natural | "
                        "LLMBar Adversarial | avg | avg (RB, RM-Bench, RMB) |")
    assert lines[2] == "| j | 80.0 | 70.0 | 60.0 | 90.0 | 40.0 | 68.0 | 70.0 |"
    assert lines[4].startswith("avg: the plain mean of the 5 headline cells of this row")
    assert "LLMBar has 2 cells and so counts twice" in lines[4]
    assert lines[5].startswith("avg (RB, RM-Bench, RMB): the mean of the RewardBench, "
                               "RM-Bench and RMB (pairwise) headlines")
    assert "without PPE-Preference" in lines[5]
    # a paper benchmark missing from the run: n/a, and said so
    _, paper = averages(rs[:2])
    assert paper.value is None and "this run has no RMB" in paper.what
    # no paper benchmark in the run: no such column
    assert [a.label for a in averages(rs[3:])] == ["avg"]


def test_partial_coverage_is_n_a_with_a_note_for_every_benchmark(tmp_path):
    """One RewardBench section, one RM-Bench domain, LLMBar without Natural and with one
    Adversarial subset, RMB with one goal: every headline is n/a with one note line each."""
    rb = tmp_path / "rb.jsonl"
    rb.write_text("".join(line + "\n" for line in (DATA / "rewardbench.jsonl").read_text()
                          .splitlines() if '"alpacaeval-easy"' in line))
    llmbar = tmp_path / "llmbar"
    shutil.copytree(DATA / "llmbar" / "Adversarial" / "Manual", llmbar / "Adversarial" / "Manual")
    rmb = tmp_path / "rmb"
    shutil.copytree(DATA / "rmb" / "Helpfulness", rmb / "Helpfulness")
    out = tmp_path / "out"
    srcs = {"rewardbench": rb, "rmbench": RMBENCH / "chat_filtered.json", "llmbar": llmbar,
            "rmb": rmb}
    for name, src in srcs.items():
        run(name, src, out)
    args = ["-o", str(out), "--score-only"]
    for name, src in srcs.items():
        args += ["--data", f"{name}={src}"]
    r = bench_cli(*args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[2] == "| <scripted> | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"
    notes = lines[4:8]
    assert notes[0].startswith("RewardBench n/a: this run has no pairs in Chat Hard, Safety, "
                               "Reasoning")
    assert notes[1].startswith("RM-Bench total n/a: this run has no items in math, code, safety")
    assert notes[2] == "LLMBar Natural n/a: this run has no instances in Natural"
    assert notes[3] == ("LLMBar Adversarial n/a: this run has no instances in Neighbor, GPTInst, "
                        "GPTOut; LLMBar Adversarial averages Neighbor, GPTInst, GPTOut, Manual")
    assert lines[8] == ("RMB (pairwise) n/a: this run has no pairs in Harmlessness; RMB "
                        "(pairwise) averages Helpfulness, Harmlessness")
    js = json.loads(bench_cli(*args, "--json").stdout)
    assert [b["headline"][0]["value"] for b in js["benchmarks"]] == [None] * 4
    assert all(b["notes"] for b in js["benchmarks"])
    assert [a["label"] for a in js["averages"]] == ["avg", "avg (RB, RM-Bench, RMB)"]


def part_items(name: str, part: str) -> list:
    """Hand-built outcomes (right in both orders) of one part of a benchmark: an item (RM-Bench:
    a prompt's nine cells) or a best-of-N prompt with no ranking."""
    if name == "rmbench":
        return [Item(f"{part}/1/{i}{j}", {"domain": part, "item": f"{part}/1",
                                          "chosen_style": i, "rejected_style": j},
                     {"ab": True, "ba": True}) for i in range(3) for j in range(3)]
    if name in ("rewardbench2", "rmb-bon"):
        key = "subset" if name == "rewardbench2" else "goal"
        pid = {"Ties": "ref:1"}.get(part, f"{part}/1")
        row = {"id": pid, key: part, "group": "g", "n_responses": 4, "num_correct": 1}
        out = [(row, None)]
        if part == "Ties":
            out.append(({**row, "id": "tied:1", "num_correct": 2}, None))
        return out
    key = {"rewardbench": "subset", "rmb": "goal", "llmbar": "subset", "judgebench": "source",
           "helpsteer3": "domain"}[name]
    fields = {key: part, "group": "g", "overall_preference": 2}
    return [Item(f"{part}/1", fields, {"ab": True, "ba": True})]


# benchmark -> (one of its parts' names as its rows give them, every part, the note's start)
PARTS = {
    "rewardbench": (["alpacaeval-easy", "mt-bench-hard", "donotanswer", "math-prm"],
                    "RewardBench n/a: this run has no pairs in Chat Hard, Safety, Reasoning; "
                    "RewardBench averages Chat, Chat Hard, Safety, Reasoning"),
    "rmbench": (["chat", "math", "code", "safety-refuse"],
                "RM-Bench total n/a: this run has no items in math, code, safety; RM-Bench "
                "total averages chat, math, code, safety"),
    "rmb": (["Helpfulness", "Harmlessness"],
            "RMB (pairwise) n/a: this run has no pairs in Harmlessness; RMB (pairwise) averages "
            "Helpfulness, Harmlessness"),
    "llmbar": (["Neighbor", "GPTInst", "GPTOut", "Manual", "Natural"],
               "LLMBar Natural n/a: this run has no instances in Natural"),
    "judgebench": (["mmlu-pro", "livebench-math"], None),
    "helpsteer3": (["general", "code"], None),
    "rewardbench2": (["Factuality", "Precise IF", "Math", "Safety", "Focus", "Ties"],
                     "RewardBench 2 n/a: this run has no prompts in Precise IF, Math, Safety, "
                     "Focus, Ties; RewardBench 2 averages Factuality, Precise IF, Math, "
                     "Safety, Focus, Ties"),
    "rmb-bon": (["Helpfulness", "Harmlessness"],
                "RMB (BoN) n/a: this run has no prompts in Harmlessness; RMB (BoN) averages "
                "Helpfulness, Harmlessness"),
}


@pytest.mark.parametrize("name", list(PARTS))
def test_one_rule_of_partial_coverage_for_every_benchmark(name):
    """docs/bench.md: a headline that averages named parts is n/a, with a note naming the
    missing ones, unless every part has items; JudgeBench and HelpSteer3 have no parts.
    Before, RewardBench 2 with Factuality alone printed a headline with no note and RMB (BoN)
    with Helpfulness alone printed that goal's accuracy as its headline."""
    from rmjudge.bench import BENCHMARKS

    bench = BENCHMARKS[name]
    parts, note = PARTS[name]

    def scored(items):
        return bench.score_rankings(items) if bench.ranked else bench.score(items)

    one = scored(part_items(name, parts[0]))
    if note is None:
        assert one.notes == [] and one.headline[0].value == 1.0
    else:
        assert one.headline[0].value is None
        assert one.notes[0].startswith(note), one.notes
        assert len(one.notes) == (2 if name == "llmbar" else 1)
    whole = scored([it for part in parts for it in part_items(name, part)])
    assert whole.notes == [] and all(c.value is not None for c in whole.headline), whole.notes


# --- bench --check: the loader on a local copy of the published repository ---------------

def test_check_reports_rows_refusals_and_duplicates_without_judging(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(RMBENCH, data)
    chat = json.loads((data / "chat_filtered.json").read_text())
    (data / "chat_filtered.json").write_text(json.dumps(
        chat + [chat[0], {"id": 9, "prompt": "p", "chosen": ["a"], "rejected": ["b"] * 3}]))
    (data / "math_filtered.json").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 5\n")
    r = bench_cli("--check", "--data", f"rmbench={data}")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"{data / 'chat_filtered.json'}: 4 rows read, 2 items (18 pairs), 2 refused, " \
           "1 duplicate keys" in out
    assert f"{data / 'math_filtered.json'}: not read: {data / 'math_filtered.json'} is a Git " \
           "LFS pointer" in out
    assert "in all: 8 rows read from 5 file(s), 6 items (54 pairs), 2 refused, 1 duplicate " \
           "keys, 0 pairs refused by the intake, 1 file(s) not read" in out
    assert "refused: 1 x column 'chosen' must be a list of 3 non-empty responses" in out
    assert f"absent: {data / 'total_dataset.json'}" in out  # the domain files are read instead
    assert f"duplicate: {data / 'chat_filtered.json'} row 3: duplicate key 'chat/1' (first at " \
           f"{data / 'chat_filtered.json'} row 1)" in out
    js = json.loads(bench_cli("--check", "--json", "--data", f"rmbench={data}").stdout)
    assert (js[0]["rows"], js[0]["items"], js[0]["pairs"], js[0]["refused"],
            js[0]["duplicates"]) == (8, 6, 54, 2, 1)
    assert js[0]["absent_files"] == [str(data / "total_dataset.json")]
    (data / "code_filtered.json").unlink()
    js = json.loads(bench_cli("--check", "--json", "--data", f"rmbench={data}").stdout)
    assert js[0]["absent_files"] == [str(data / n) for n in ("total_dataset.json",
                                                             "code_filtered.json")]
    llmbar = tmp_path / "llmbar"
    shutil.copytree(DATA / "llmbar" / "Natural", llmbar / "Natural")
    js = json.loads(bench_cli("--check", "--json", "--data", f"llmbar={llmbar}").stdout)
    assert js[0]["absent_files"] == [str(llmbar / "Adversarial" / s / "dataset.json")
                                     for s in ("Neighbor", "GPTInst", "GPTOut", "Manual")]
    assert not list(tmp_path.glob("**/*.duckdb")) and not list(tmp_path.glob("**/*.input.jsonl"))
    # bench without --check still needs -o
    r = bench_cli("--data", f"rmbench={data}")
    assert r.returncode != 0 and r.stderr.startswith("Error: give -o DIR")


def test_check_lists_a_utf16_file_as_not_read_and_reads_the_others(tmp_path):
    """A published file saved as UTF-16 (a Windows editor's "Unicode") is one file the check
    cannot read, with the reason and the conversion; the other files are still counted and the
    check ends normally."""
    from click.testing import CliRunner

    from rmjudge.cli import main

    data = tmp_path / "data"
    shutil.copytree(RMBENCH, data)
    chat = data / "chat_filtered.json"
    chat.write_bytes(chat.read_text(encoding="utf-8").encode("utf-16"))
    r = CliRunner().invoke(main, ["bench", "--check", "--data", f"rmbench={data}"],
                           env={"COLUMNS": "1000"})  # whole lines
    assert r.exit_code == 0, r.output
    assert f"{chat}: not read: {chat} is UTF-16 (or UTF-32) text; rmjudge reads UTF-8: " \
           f"convert it with iconv -f UTF-16 -t UTF-8 {chat}" in r.output
    assert "in all: 5 rows read from 5 file(s), 5 items (45 pairs), 0 refused, 0 duplicate " \
           "keys, 0 pairs refused by the intake, 1 file(s) not read" in r.output
    r = CliRunner().invoke(main, ["bench", "--check", "--json", "--data", f"rmbench={data}"])
    assert r.exit_code == 0, r.output
    files = {f["path"]: f for f in json.loads(r.output)[0]["files"]}
    assert files[str(chat)]["rows"] == 0 and "UTF-16" in files[str(chat)]["error"]
    assert sum(f["rows"] for f in files.values()) == 5


def test_check_that_reads_no_row_of_a_benchmark_fails_after_its_report(tmp_path):
    """Before, a check whose files were all unreadable (Git LFS pointers of a checkout without
    LFS) printed the report and exited 0, so a script took the copy for a good one."""
    data = tmp_path / "data"
    shutil.copytree(RMBENCH, data)
    for f in data.glob("*.json"):
        f.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 5\n")
    r = bench_cli("--check", "--data", f"rmbench={data}")
    assert r.returncode != 0
    assert "is a Git LFS pointer" in r.stdout and "in all: 0 rows read" in r.stdout
    assert r.stderr.startswith(f"Error: --check read no row of rmbench ({data})")
    assert r.stderr.count("\n") == 1
    js = bench_cli("--check", "--json", "--data", f"rmbench={data}")
    assert js.returncode != 0 and json.loads(js.stdout)[0]["rows"] == 0
