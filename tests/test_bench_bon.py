"""`rmjudge bench -b rewardbench2` and `-b rmb-bon`: best-of-N benchmarks judged through
`rmjudge rank` and scored as their authors score per-candidate scores. The rules are checked on
hand-built scores (expected values worked out in the comments), then the benchmarks end to end
on fixtures in the published layouts (tests/data/bench) with the scripted judge of
helpers.quality_engine (the candidate with the larger q=N wins)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import quality_engine, rows

from rmjudge.bench import BENCHMARKS, get
from rmjudge.bench.base import candidate_scores
from rmjudge.bench.rewardbench2 import TiesUndefined, best_of_n_result, prompt_stats, ties_score
from rmjudge.bench.rmb_bon import bon_correct
from rmjudge.bench.runner import judge, read_ranked, score_stored, store_file
from rmjudge.core.settings import JudgeSettings

DATA = Path(__file__).parent / "data" / "bench"
JS = JudgeSettings(samples=1, forced=False, seed=3)


@pytest.mark.parametrize("scores, expected", [
    ([2.0, 1.0, 1.0, 1.0], 1.0),  # the chosen beats all three rejected
    ([2.0, 2.0, 1.0, 0.0], 0.5),  # tied with one at the top: 1/2
    ([2.0, 2.0, 2.0, 0.0], 1 / 3),
    ([1.0, 2.0, 0.0, 0.0], 0.0),
    ([0.0, 0.0, 0.0, 0.0], 0.25),  # no verdict at all: every candidate ties
])
def test_rewardbench2_best_of_4_rule(scores, expected):
    assert best_of_n_result(scores) == pytest.approx(expected)


def test_rewardbench2_ties_rule_on_hand_built_scores():
    assert prompt_stats([3.0, 1.0, 2.0], 1) == (True, None, 1.0)
    assert prompt_stats([5.0, 4.0, 1.0], 2) == (True, 1.0, 3.0)
    # ref:1 accurate (margin 1), tied:1 accurate (spread 1, margin 3); ref:2 wrong (margin -1),
    # tied:2 all equal (spread 0, margin 0, not accurate). ref and tied accuracy 1/2 each;
    # correctness_preferred: 3 > 1 yes, 0 > 0 no -> 1/2; hard: min(1, 3) = 1 > 1 no,
    # min(-1, 0) > 0 no -> 0; margin term: tanh(1/1 - 1) = 0 and tanh(-1/0 - 1) = -1 -> -1/2.
    # 0.3 * 0.5 + 0.3 * 0.5 + 0.2 * 0.5 + 0.2 * 0 + 0.01 * -0.5 = 0.395
    got = ties_score([("ref:1", [3.0, 1.0, 2.0], 1), ("tied:1", [5.0, 4.0, 1.0], 2),
                      ("ref:2", [1.0, 2.0], 1), ("tied:2", [2.0, 2.0, 2.0], 2)])
    assert got == pytest.approx(0.395)
    with pytest.raises(TiesUndefined, match="gives nan"):  # no prompt with both: undefined
        ties_score([("ref:1", [3.0, 1.0], 1)])


@pytest.mark.parametrize("scores, expected", [
    ([2.0, 1.0, 1.5], 1.0), ([2.0, 2.0, 1.0], 0.0), ([1.0, 2.0], 0.0), ([0.0, 0.0], 0.0)])
def test_rmb_best_of_n_rule_is_strictly_above_every_loser(scores, expected):
    assert bon_correct(scores) == expected


def test_the_best_of_n_benchmarks_are_not_in_the_default_set():
    assert BENCHMARKS["rewardbench2"].ranked and not BENCHMARKS["rewardbench2"].in_default_set
    assert BENCHMARKS["rmb-bon"].ranked and not BENCHMARKS["rmb-bon"].in_default_set


def test_rewardbench2_end_to_end_on_its_published_layout(tmp_path):
    bench = get("rewardbench2")
    out = str(tmp_path)
    summary = judge(bench, str(DATA / "rewardbench2.jsonl"), quality_engine(), JS, out)
    # 3 best-of-4 prompts (6 comparisons each), ref:5 (3), tied:5 (10); the broken row is an
    # error row of the store
    assert summary.judged == 3 * 6 + 3 + 10 and summary.problems == 1
    res = score_stored(bench, out)
    cells = {c.label: c.value for c in res.sections}
    # id 0: the chosen (q=9) beats all -> 1; id 1: the chosen (q=2) loses to q=5 -> 0
    assert cells["Factuality"] == 0.5 and cells["Math"] == 1.0
    got = read_ranked(bench, out)
    prompts, unreadable = got.items, got.unreadable
    assert unreadable == 1 and len(prompts) == 5 and got.unjudged == 0
    ties = [(str(r["id"]), candidate_scores(p, int(r["n_responses"])), int(r["num_correct"]))
            for r, p in prompts if r["subset"] == "Ties"]
    assert all(prompt_stats(s, n)[0] for _, s, n in ties)  # both Ties prompts accurate
    assert cells["Ties"] == pytest.approx(ties_score(ties))
    # three of the six subsets: no headline (before 0.14.0: the mean of the three), a note
    assert res.headline[0].value is None and res.notes == [
        "RewardBench 2 n/a: this run has no prompts in Precise IF, Safety, Focus; RewardBench 2 "
        "averages Factuality, Precise IF, Math, Safety, Focus, Ties"]
    assert res.unreadable == 1 and res.consistency == 1.0
    assert rows(store_file(out, bench), "SELECT count(*) FROM rankings") == [(4 * 3 + 3 + 5,)]


def test_rmb_best_of_n_end_to_end_on_its_published_folder(tmp_path):
    bench = get("rmb-bon")
    out = str(tmp_path)
    judge(bench, str(DATA / "rmb_bon"), quality_engine(), JS, out)
    res = score_stored(bench, out)
    cells = {c.label: c.value for c in res.sections}
    # Helpfulness: 11 right, 12 wrong (its best q=3 loses to q=5); Harmlessness: both right
    assert cells["Helpfulness/Chat"] == 0.5 and cells["Helpfulness"] == 0.5
    assert cells["Harmlessness/S1"] == 1.0 and cells["Harmlessness"] == 1.0
    assert res.headline[0].label == "RMB (BoN)" and res.headline[0].value == 0.75
    again = judge(bench, str(DATA / "rmb_bon"), quality_engine(), JS, out)  # resumes
    assert again.judged == 0 and score_stored(bench, out).as_dict() == res.as_dict()


def test_shards_of_a_best_of_n_benchmark_cover_it_once(tmp_path):
    bench = get("rmb-bon")
    whole = score_stored_run(bench, tmp_path / "w", None)
    parts = [score_stored_run(bench, tmp_path / f"s{i}", (i, 2)) for i in range(2)]
    assert sum(p.items for p in parts) == whole.items == 4


def score_stored_run(bench, outdir, shard):
    judge(bench, str(DATA / "rmb_bon"), quality_engine(), JS, str(outdir), shard=shard)
    return score_stored(bench, str(outdir), shard=shard)


# --- repeated candidate texts: ranked as one candidate; all alike: unreadable ----------------

def bon_prompt(uid: int, best: str, losers: list[str]) -> dict:
    return {"conversation_input": [{"role": "user", "content": f"Question {uid}?",
                                    "language": "English"}],
            "bon_best": {"llm_name": "m0", "answer": best},
            "loser_list": [{"llm_name": f"m{i}", "answer": a} for i, a in enumerate(losers, 1)],
            "bon_uid": uid, "category_path": "BoN_set/Harmlessness/S2"}


def bon_folder_with_repeats(tmp_path) -> Path:
    """The rmb_bon fixture plus Harmlessness/S2.json: two losers alike (31), the best answer's
    text again among the losers (32), and one text three times (33), the shapes of RMB's 29
    published prompts with repeated candidates."""
    root = tmp_path / "BoN_set"
    shutil.copytree(DATA / "rmb_bon", root)
    (root / "Harmlessness" / "S2.json").write_text(json.dumps([
        bon_prompt(31, "I won't help with that. q=8", ["Do it. q=1", "Do it. q=1", "Hm. q=2"]),
        bon_prompt(32, "Same answer. q=4", ["Same answer. q=4", "Other. q=1"]),
        bon_prompt(33, "All. q=2", ["All. q=2", " All. q=2"])]))
    return root


def test_rmb_bon_prompts_with_repeated_candidates_are_ranked_not_scored_zero(tmp_path):
    """Before, rank refused the three prompts of S2 and bench scored each of them 0 while the
    result said 0 unreadable rows. Now 31 and 32 are ranked, each text compared once, and 33
    (one text only) is counted unreadable, never scored."""
    bench = get("rmb-bon")
    src, out = bon_folder_with_repeats(tmp_path), str(tmp_path / "out")
    summary = judge(bench, str(src), quality_engine(), JS, out)
    assert summary.repeated == 3 - 1 and summary.problems == 1
    assert rows(store_file(out, bench), "SELECT count(*) FROM pairs WHERE prompt_id = "
                                        "'Harmlessness/31'") == [(3,)]  # 3 texts, 3 pairs
    res = score_stored(bench, out)
    cells = {c.label: c.value for c in res.sections}
    # 31: the best (q=8) beats both texts -> 1; 32: its copy among the losers shares its score,
    # and RMB's rule is strict -> 0; S1 as before: both right
    assert cells["Harmlessness/S2"] == 0.5 and cells["Harmlessness/S1"] == 1.0
    assert cells["Harmlessness"] == 0.75 and res.unreadable == 1
    assert res.headline[0].value == pytest.approx((0.5 + 0.75) / 2)
    assert [c.n for c in res.sections if c.label == "Harmlessness"] == [4]


def test_rewardbench2_best_of_4_with_a_repeated_rejected_text_is_ranked(tmp_path):
    rows_ = [json.loads(line) for line in (DATA / "rewardbench2.jsonl").read_text().splitlines()]
    rows_.append({"id": "7", "prompt": "Pick a number.", "chosen": ["Seven. q=9"],
                  "rejected": ["Two. q=1", "Two. q=1", "Three. q=2"], "num_correct": 1,
                  "subset": "Math"})
    src = tmp_path / "rb2.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows_))
    bench, out = get("rewardbench2"), str(tmp_path / "out")
    judge(bench, str(src), quality_engine(), JS, out)
    res = score_stored(bench, out)
    cells = {c.label: (c.value, c.n) for c in res.sections}
    assert cells["Math"] == (1.0, 2) and res.unreadable == 1  # before: prompt 7 scored 1/4


# --- the best-of-4 rule on a pairwise judge's scores ----------------------------------------

def test_best_of_4_scores_the_candidate_the_ranking_puts_first():
    """docs/bench.md: the chosen scores 1 when its Bradley-Terry score is the top alone. Over
    every round-robin of 4 candidates (each comparison won, lost or split), winning all three
    comparisons always gives 1, and 1 without winning all three happens too (a split
    comparison while the rejected lose elsewhere), as the rule says."""
    import itertools

    from rmjudge.rank.aggregate import Game, rank

    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    outcomes = {"won": ("A", "A"), "lost": ("B", "B"), "split": ("A", "B")}
    ones = without = 0
    for combo in itertools.product(outcomes, repeat=6):
        games = [Game(a, b, outcomes[o]) for (a, b), o in zip(pairs, combo)]
        by = {r.candidate: r.score for r in rank(4, games, [0, 1, 2, 3])}
        got = best_of_n_result([by[c] for c in range(4)])
        if combo[:3] == ("won",) * 3:
            assert got == 1.0
        elif got == 1.0:
            without += 1
        ones += got == 1.0
    assert ones == 27 + without and without == 126  # the figures docs/bench.md gives
    split = [Game(0, 1, ("A", "B")), Game(0, 2, ("A", "A")), Game(0, 3, ("A", "A")),
             Game(1, 2, ("B", "B")), Game(1, 3, ("B", "B")), Game(2, 3, ("A", "B"))]
    by = {r.candidate: r.score for r in rank(4, split, [0, 1, 2, 3])}
    assert best_of_n_result([by[c] for c in range(4)]) == 1.0 and by[0] > by[1]


# --- RewardBench 2 Ties where the official code has no score -----------------------------

def test_ties_reads_ids_as_integers_as_the_official_code_does():
    a = ties_score([("ref:1", [3.0, 1.0, 2.0], 1), ("tied:1", [5.0, 4.0, 1.0], 2)])
    b = ties_score([("ref:01", [3.0, 1.0, 2.0], 1), ("tied:1", [5.0, 4.0, 1.0], 2)])
    assert a == b == pytest.approx(0.3 + 0.3 + 0.2 * 1 + 0.2 * 0 + 0.01 * math.tanh(1 / 1 - 1))


@pytest.mark.parametrize("prompts, why", [
    ([("ref:1", [3.0, 1.0], 1), ("tied:2", [5.0, 4.0, 1.0], 2)], "gives nan"),
    ([("ref:1", [3.0, 1.0], 1), ("tied:1", [5.0, 1.0], 1)], "(TypeError)"),
    ([("ref:a", [3.0, 1.0], 1), ("tied:1", [5.0, 4.0, 1.0], 2)], "(ValueError)"),
    ([("ref:1:2", [3.0, 1.0], 1)], "(ValueError)"),
    ([("ref:1", [3.0, 1.0], 2), ("tied:1", [5.0, 4.0, 1.0], 2)], "no incorrect answer"),
])
def test_ties_has_no_score_where_the_official_code_has_none(prompts, why):
    """Before, rmjudge gave 0.4404 for a tied: prompt with one correct answer (official:
    TypeError) and left Ties out of the headline where the official score is nan."""
    with pytest.raises(TiesUndefined, match=re.escape(why)):
        ties_score(prompts)


def test_an_undefined_ties_score_makes_the_headline_n_a_with_the_reason():
    def prompt(pid, subset, k=4, nc=1):
        return {"id": pid, "subset": subset, "n_responses": k, "num_correct": nc}, None

    subsets = ("Factuality", "Precise IF", "Math", "Safety", "Focus")
    res = get("rewardbench2").score_rankings(
        [prompt(f"{i}", s) for i, s in enumerate(subsets)]
        + [prompt("ref:1", "Ties", 3), prompt("tied:1", "Ties", 3, 1)])
    cells = {c.label: c.value for c in res.sections}
    assert cells["Ties"] is None and cells["Factuality"] == 0.25
    assert res.headline[0].value is None
    assert res.notes[0].startswith("RewardBench 2 Ties n/a: the tied: prompt of id 1 has one "
                                   "correct answer") and "TypeError" in res.notes[0]
    assert res.notes[1].startswith("RewardBench 2 n/a: Ties has no score")


# --- bench --check reads best-of-N files as a run does ---------------------------------------

def test_check_reads_best_of_n_prompts_with_ranks_reader(tmp_path):
    """Before, --check sent RMB's Best-of-N prompts through the pairwise intake ("no two
    responses found" for every prompt) and RewardBench 2's rows too ("field 'chosen' must be a
    string"), and exited 0."""
    from rmjudge.bench.check import check, render

    rep = check(get("rmb-bon"), str(bon_folder_with_repeats(tmp_path)))
    # 4 prompts of the fixture + 31, 32 readable; 33 refused by rank (one text)
    assert (rep.total("rows"), rep.total("items"), rep.total("refused")) == (7, 6, 1)
    assert rep.total("repeated") == 3 and rep.total("pairs_refused") == 0
    assert [r["id"] for r in rep.repeated] == ["Harmlessness/31", "Harmlessness/32",
                                               "Harmlessness/33"]
    assert [r["ranked"] for r in rep.repeated] == [True, True, False]
    text = render(rep)
    assert "in all: 7 rows read from 3 file(s), 6 prompts (" in text
    assert "3 prompts with repeated candidate texts" in text
    assert "repeated: Harmlessness/31 (" in text and "candidate 2 repeats 1" in text
    assert "refused: 1 x prompt refused by the ranking: all 3 candidates are the same " \
           "response" in text
    assert "no two responses" not in text
    rb2 = check(get("rewardbench2"), str(DATA / "rewardbench2.jsonl"))
    assert (rb2.total("rows"), rb2.total("items"), rb2.total("refused")) == (6, 5, 1)
    # comparisons a run makes: 3 best-of-4 x 6, ref:5 3 candidates (3), tied:5 five (10)
    assert rb2.total("pairs") == 18 + 3 + 10
    assert not any("must be a string" in r for r in rb2.reasons)


def test_check_on_another_benchmarks_files_is_a_user_error(tmp_path):
    """Before, `bench --check -b rmb-bon` on the pairwise folder (or the reverse) reported 0
    items and exited 0."""
    r = subprocess.run([sys.executable, "-m", "rmjudge", "bench", "--check", "--data",
                        f"rmb-bon={DATA / 'rmb'}"], capture_output=True, text=True)
    assert r.returncode == 1 and "in all: " in r.stdout
    assert " 0 prompts (0 comparisons)" in " ".join(r.stdout.split())
    assert r.stderr.startswith("Error: --check read ") and r.stderr.count("\n") == 1
    assert "refused every one" in r.stderr and "another benchmark's data" in r.stderr
    r = subprocess.run([sys.executable, "-m", "rmjudge", "bench", "--check", "--data",
                        f"rmb={DATA / 'rmb_bon'}"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith("Error: --check read 4 rows of rmb")
    ok = subprocess.run([sys.executable, "-m", "rmjudge", "bench", "--check", "--data",
                         f"rmb-bon={DATA / 'rmb_bon'}"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


# --- partial coverage and an incomplete merge ------------------------------------------------

def test_a_best_of_n_merge_missing_a_shard_leaves_its_prompts_out(tmp_path):
    """`bench --score-only` on a merge of one of two shards: the other shard's prompts are
    left out and the figures marked incomplete, never scored as prompts without a verdict."""
    from click.testing import CliRunner

    from rmjudge.cli import main

    bench = get("rmb-bon")
    part = score_stored_run(bench, tmp_path / "s0", (0, 2))
    full = tmp_path / "full"
    full.mkdir()
    merged = CliRunner().invoke(main, ["merge", store_file(str(tmp_path / "s0"), bench),
                                       "--allow-incomplete", "-o", store_file(str(full), bench)])
    assert merged.exit_code == 0, merged.output
    shutil.copy(tmp_path / "s0" / "rmb-bon.input.jsonl", full / "rmb-bon.input.jsonl")
    table = CliRunner().invoke(main, ["bench", "-o", str(full), "--score-only", "--json",
                                      "-b", "rmb-bon", "--data", f"rmb-bon={DATA / 'rmb_bon'}"])
    assert table.exit_code == 0, table.output
    got = json.loads(table.stdout)["benchmarks"][0]
    assert got["items"] == part.items and got["unjudged"] == 4 - part.items > 0
    assert got["sections"] == part.as_dict()["sections"]
    assert got["notes"][0].startswith(f"RMB BoN incomplete: {4 - part.items} of the 4 prompts")
