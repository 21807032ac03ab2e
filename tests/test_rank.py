"""`rmjudge rank`: input layouts and bad input, comparisons through the score pipeline (one row
per comparison, resume after kill -9, shards, byte-identical reruns), strategies, Bradley-Terry
aggregation, and `filter`/`eval` on a ranked store. The judge is scripted (helpers.quality_engine:
the response with the larger q=N wins)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SCRIPTED_CLI, kill_after_commits, quality_engine, rows

from rmjudge.analysis.tables import open_judged
from rmjudge.io.intake import in_shard
from rmjudge.io.rows import RawRow
from rmjudge.rank import rank
from rmjudge.rank.aggregate import Game, rank as rank_games
from rmjudge.rank.layouts import Prompt, PromptProblem, read_prompts
from rmjudge.rank.outputs import evaluate_ranked, kendall_tau, top1_correct
from rmjudge.rank.strategies import (comparison_count, pair_number, round_robin, swiss_pairs,
                                     swiss_rounds)
from rmjudge.rank.table import read_rankings
from rmjudge.core.settings import JudgeSettings

JS = JudgeSettings(samples=2, max_tokens=32, seed=3)
PAIRS_Q = ("SELECT id, row_number, verdict, verdict_ab, verdict_ba, label, cand_a, cand_b, "
           "gold_a, gold_b FROM pairs ORDER BY id")
RANKINGS_Q = "SELECT * FROM rankings ORDER BY prompt_id, candidate"


def write_jsonl(path: Path, objs) -> str:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return str(path)


def raws(objs):
    return [RawRow(n, o) for n, o in enumerate(objs, 1)]


def responses_rows(n: int = 3, k: int = 4):
    """n prompts with k candidates `answer q=V`, gold ratings = V (so the scripted judge agrees
    with the gold)."""
    out = []
    for p in range(n):
        vals = [(p * 7 + c * 5) % 11 + c for c in range(k)]
        out.append({"id": f"p{p}", "prompt": f"question {p}", "subset": f"s{p % 2}",
                    "responses": [f"answer {c} q={v}" for c, v in enumerate(vals)],
                    "ratings": vals})
    return out


# -- layouts ------------------------------------------------------------------------------------

def test_the_five_layouts_give_candidates_and_gold_as_published():
    got = list(read_prompts(raws([{"prompt": "q", "responses": ["a", "b", "c"], "best": 2}])))
    assert got[0].candidates == ("a", "b", "c") and got[0].gold == (2, 2, 1)
    got = list(read_prompts(raws([{"prompt": "q", "responses": ["a", "b", "c"],
                                   "order": [1, 2, 0]}])))
    assert got[0].gold == (3, 1, 2) and got[0].gold_kind == "order"
    got = list(read_prompts(raws([{"prompt": "q", "responses": ["a", "b", "c"],
                                   "ratings": [1, 5, 5]}])))
    assert got[0].gold == (3, 1, 1)  # equal ratings share a rank
    uf = {"instruction": "q", "completions": [
        {"response": "a", "fine-grained_score": 3.5, "overall_score": 9},
        {"response": "b", "fine-grained_score": 4.25, "overall_score": 6}]}
    assert list(read_prompts(raws([uf])))[0].gold == (2, 1)
    assert list(read_prompts(raws([uf]), gold_field="overall_score"))[0].gold == (1, 2)
    rb2 = {"id": "7", "prompt": "q", "chosen": ["c1", "c2"], "rejected": ["r1", "r2", "r3"],
           "subset": "Ties", "num_correct": 2}
    p = list(read_prompts(raws([rb2])))[0]
    assert p.id == "7" and p.candidates == ("c1", "c2", "r1", "r2", "r3")
    assert p.gold == (1, 1, 3, 3, 3) and p.fields["subset"] == "Ties"
    bon = {"bon_uid": 9, "conversation_input": [{"role": "user", "content": "q",
                                                 "language": "English"}],
           "bon_best": {"llm_name": "m1", "answer": "best"},
           "loser_list": [{"llm_name": "m2", "answer": "l1"}, {"llm_name": "m3", "answer": "l2"}],
           "category_path": "BoN_set/Harmlessness/S1"}
    p = list(read_prompts(raws([bon])))[0]
    assert p.id == "9" and p.candidates == ("best", "l1", "l2") and p.gold == (1, 2, 2)
    grouped = [{"qid": "x", "prompt": "q", "response": "a", "rating": 1},
               {"qid": "y", "prompt": "r", "response": "c", "rating": 2},
               {"qid": "x", "prompt": "q", "response": "b", "rating": 3},
               {"qid": "y", "prompt": "r", "response": "d", "rating": 2}]
    ps = list(read_prompts(raws(grouped), group_by="qid"))
    assert [(p.id, p.row_number, p.candidates, p.gold) for p in ps] == [
        ("x", 1, ("a", "b"), (2, 1)), ("y", 2, ("c", "d"), (1, 1))]


def test_unlabelled_ratings_are_no_gold_not_a_guess():
    uf = {"instruction": "q", "completions": [{"response": "a", "fine-grained_score": "N/A"},
                                              {"response": "b", "fine-grained_score": 4}]}
    p = list(read_prompts(raws([uf])))[0]
    assert isinstance(p, Prompt) and p.gold is None


@pytest.mark.parametrize("row, reason", [
    ({"prompt": "q", "responses": ["only"]}, "fewer than two candidates (only one): a ranking "
                                             "needs at least two"),
    ({"prompt": "q", "responses": []}, "fewer than two candidates (none)"),
    ({"prompt": "q", "responses": ["a", " "]}, "is empty"),
    ({"prompt": "q", "responses": ["a", " a"]}, "all 2 candidates are the same response"),
    ({"prompt": "q", "responses": ["a", "b", "c", "d", "e"]}, "more than the limit of 4 (5 given"),
    ({"prompt": "q", "responses": ["a", "b"], "best": 2}, "names no candidate"),
    ({"prompt": "q", "responses": ["a", "b"], "ratings": [1]}, "one per candidate"),
    ({"prompt": "q", "responses": ["a", "b"], "order": [0, 0]}, "every candidate index"),
    ({"prompt": "q", "responses": ["a", "b"], "order": [True, False]}, "every candidate index"),
    ({"prompt": "q", "responses": ["a", "b"], "order": [1.0, 0]}, "every candidate index"),
    ({"prompt": "q", "responses": ["a", "b"], "best": 0, "ratings": [1, 2]}, "gold given twice"),
])
def test_bad_prompts_are_problems_with_their_reason(row, reason):
    got = list(read_prompts(raws([row]), max_candidates=4))
    assert isinstance(got[0], PromptProblem) and reason in got[0].reason
    assert got[0].reason.startswith("row 1:")


def test_repeated_candidate_texts_are_one_candidate_not_a_refused_prompt():
    """Before, a prompt with two identical candidates was refused ("the same response"), so
    29 of RMB's published Best-of-N prompts could not be ranked; now each text is compared
    once and its copies follow it. A prompt whose candidates are all one text is refused."""
    got = list(read_prompts(raws([{"prompt": "q", "responses": ["a", "b", "a ", "c", "b"]},
                                  {"prompt": "q", "responses": ["a", "a", "a"]}])))
    assert isinstance(got[0], Prompt)
    assert got[0].same_as == (0, 1, 0, 3, 1) and got[0].distinct == (0, 1, 3)
    assert isinstance(got[1], PromptProblem)
    assert "all 3 candidates are the same response" in got[1].reason


def test_a_duplicate_prompt_id_and_an_unreadable_row_are_problems():
    rows_ = [RawRow(1, {"id": "a", "prompt": "q", "responses": ["x", "y"]}),
             RawRow(2, None, "row 2: not JSON", "{oops"),
             RawRow(3, {"id": "a", "prompt": "q2", "responses": ["x", "z"]})]
    got = list(read_prompts(rows_))
    assert isinstance(got[0], Prompt)
    assert isinstance(got[1], PromptProblem) and got[1].raw == "{oops"
    assert isinstance(got[2], PromptProblem) and "duplicate prompt id 'a'" in got[2].reason


# -- strategies and aggregation ----------------------------------------------------------------

def test_pair_numbers_enumerate_the_pairs_once():
    for k in (2, 5, 128):
        assert [pair_number(i, j, k) for i, j in round_robin(k)] == list(range(k * (k - 1) // 2))


def test_a_swiss_round_pairs_neighbours_it_has_not_met_yet():
    pts = [3, 2, 2, 0, 1, 0]
    got = swiss_pairs(6, {(1, 2)}, pts, list(range(6)))
    assert got == [(0, 1), (2, 4), (3, 5)]  # 1-2 met already: 0 takes 1, 2 the next free one
    assert swiss_rounds(16) == 5 and comparison_count("swiss", 16) == 40
    assert comparison_count("round-robin", 16) == 120


def test_bradley_terry_ranks_wins_and_counts_a_flip_as_a_tie():
    games = [Game(0, 1, ("B", "B")), Game(0, 2, ("A", "B")), Game(1, 2, ("A", "A")),
             Game(0, 3, (None, None))]
    out = rank_games(4, games, [0, 1, 2, 3])
    assert [r.candidate for r in out][0] == 1
    by = {r.candidate: r for r in out}
    assert (by[1].wins, by[1].losses) == (2, 0)
    assert (by[0].ties, by[2].ties) == (1, 1)
    assert by[0].unjudged == 1 and by[3].unjudged == 1
    # never decided: the regularized fit leaves it between the winner and the losers
    assert by[3].wins == 0 and by[1].score > by[3].score > max(by[0].score, by[2].score)
    assert 0.5 < out[0].confidence < 1 and out[-1].confidence == out[-2].confidence
    assert rank_games(4, games, [0, 1, 2, 3]) == out  # deterministic


def test_a_repeated_candidate_shares_the_score_fitted_without_it():
    """Candidates 0 and 2 are one text: the fit is the one of the three distinct candidates
    alone (0, 1, 3), and candidate 2 gets candidate 0's score and counts."""
    games = [Game(0, 1, ("B", "B")), Game(0, 3, ("A", "A")), Game(1, 3, ("A", "B"))]
    alone = {r.candidate: r for r in rank_games(
        3, [Game(0, 1, ("B", "B")), Game(0, 2, ("A", "A")), Game(1, 2, ("A", "B"))], [0, 1, 2])}
    got = {r.candidate: r for r in rank_games(4, games, [0, 1, 2, 3], [0, 1, 0, 3])}
    assert [got[c].score for c in (0, 1, 3)] == [alone[c].score for c in (0, 1, 2)]
    assert got[2].score == got[0].score and (got[2].wins, got[2].losses) == (1, 1)
    assert sorted(r.rank for r in got.values()) == [1, 2, 3, 4]
    # without same_as the never-compared candidate 2 would sit in the middle of the fit
    plain = {r.candidate: r for r in rank_games(4, games, [0, 1, 2, 3])}
    assert plain[2].score != plain[0].score


def test_equal_scores_are_ordered_by_the_seeded_hash_not_the_published_order():
    games = [Game(0, 1, ("A", "B"))]
    assert [r.candidate for r in rank_games(2, games, [5, 1])] == [1, 0]
    assert [r.candidate for r in rank_games(2, games, [1, 5])] == [0, 1]


# -- runs -------------------------------------------------------------------------------------

def test_the_slot_a_candidate_is_drawn_per_comparison(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(4, 5))
    out = str(tmp_path / "r.duckdb")
    rank(src, out, engine=quality_engine(), judge=JS)
    got = rows(out, "SELECT count(*) FILTER (cand_a < cand_b), count(*) FILTER (cand_a > cand_b), "
                    "count(*) FILTER (response_a = response_b) FROM pairs")
    assert got[0][0] > 0 and got[0][1] > 0 and got[0][2] == 0


def test_rank_stores_one_row_per_comparison_and_ranks_as_the_judge_says(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(3, 4))
    out = str(tmp_path / "r.duckdb")
    s = rank(src, out, engine=quality_engine(), judge=JS)
    assert (s.prompts, s.ranked, s.judged, s.comparisons, s.rounds) == (3, 3, 18, 18, 1)
    got = rows(out, "SELECT prompt_id, count(*), count(DISTINCT (cand_a, cand_b)) FROM pairs "
                    "GROUP BY 1 ORDER BY 1")
    assert got == [("p0", 6, 6), ("p1", 6, 6), ("p2", 6, 6)]
    assert rows(out, "SELECT count(*) FROM pairs WHERE correct IS NOT TRUE") == [(0,)]
    for p in s.rankings:
        assert top1_correct(p) == 1.0 and kendall_tau(p) == 1.0
    table = rows(out, "SELECT prompt_id, candidate, rank, gold_rank FROM rankings "
                      "ORDER BY prompt_id, rank")
    assert all(rank_ == gold for _, _, rank_, gold in table)
    again = rank(src, out, engine=quality_engine(), judge=JS)  # resume: nothing left to judge
    assert (again.judged, again.skipped) == (0, 18)


def test_rank_compares_a_repeated_text_once_and_ranks_its_copies_with_it(tmp_path):
    objs = [{"id": "rep", "prompt": "q", "responses": ["x q=1", "y q=5", "x q=1", "z q=3"],
             "ratings": [1, 5, 1, 3]},
            {"id": "once", "prompt": "q", "responses": ["x q=1", "y q=5", "z q=3"],
             "ratings": [1, 5, 3]},
            {"id": "same", "prompt": "q", "responses": ["x q=1", "x q=1"]},
            {"id": "many", "prompt": "q", "ratings": [c % 7 for c in range(10)],
             "responses": [f"r{c % 7} q={c % 7}" for c in range(10)]}]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "r.duckdb")
    s = rank(src, out, engine=quality_engine(), judge=JS)
    assert (s.prompts, s.ranked, s.problems, s.repeated) == (4, 3, 1, 2)
    assert rows(out, "SELECT id FROM pairs WHERE prompt_id = 'rep' ORDER BY id") == [
        ("rep#0-1",), ("rep#0-3",), ("rep#1-3",)]  # no comparison of a text with itself
    # ten candidates, seven texts: round-robin (auto: up to 8), 21 comparisons
    assert s.strategies == {"round-robin": 3}
    assert rows(out, "SELECT count(*) FROM pairs WHERE prompt_id = 'many'") == [(21,)]
    assert "all 2 candidates are the same response" in rows(out, "SELECT reason FROM errors")[0][0]
    by = {p.prompt_id: p for p in s.rankings}
    rep, once = by["rep"].by_candidate(), by["once"].by_candidate()
    assert [rep[c].score for c in (0, 1, 3)] == [once[c].score for c in (0, 1, 2)]
    assert rep[2].score == rep[0].score and by["rep"].texts[2] == "x q=1"
    assert by["rep"].gold == [3, 1, 3, 2] and top1_correct(by["rep"]) == 1.0
    table = rows(out, "SELECT candidate, rank, score, response, gold_rank FROM rankings WHERE "
                      "prompt_id = 'rep' ORDER BY candidate")
    assert [r[0] for r in table] == [0, 1, 2, 3] and table[0][2] == table[2][2]
    assert table[2][3] == "x q=1" and table[2][4] == 3 and {table[0][1], table[2][1]} == {3, 4}
    from rmjudge.rank.summary import render_summary

    assert "2 prompts with repeated candidate texts: each text compared once" in " ".join(
        render_summary(s).split())
    before = rows(out, RANKINGS_Q)
    again = rank(src, out, engine=quality_engine(), judge=JS)  # resumes: nothing new
    assert again.judged == 0 and rows(out, RANKINGS_Q) == before
    # preference data takes each text once: no pair (or KTO row) written twice
    from click.testing import CliRunner

    from rmjudge.cli import main

    for fmt, key in (("dpo", ("chosen", "rejected")), ("kto", ("completion",))):
        f = tmp_path / f"{fmt}.jsonl"
        r = CliRunner().invoke(main, ["filter", out, "-o", str(f), "--rank-pairs", "all",
                                      "--format", fmt])
        assert r.exit_code == 0, r.output
        got = [tuple(o[k] for k in key) for o in map(json.loads, f.read_text().splitlines())
               if o["prompt_id"] == "rep"]
        assert len(got) == len(set(got)) == (3 if fmt == "dpo" else 2)


def test_two_runs_give_byte_identical_rankings(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(4, 5))
    outs = [str(tmp_path / f"r{i}.duckdb") for i in range(2)]
    for out in outs:
        rank(src, out, engine=quality_engine(flip={"answer 1 q=6"}), judge=JS)
    assert rows(outs[0], PAIRS_Q) == rows(outs[1], PAIRS_Q)
    assert rows(outs[0], RANKINGS_Q) == rows(outs[1], RANKINGS_Q)


def test_swiss_rounds_take_fewer_comparisons_and_find_the_best(tmp_path):
    k = 12
    objs = [{"id": f"p{p}", "prompt": f"q{p}",
             "responses": [f"r{c} q={(c * 5 + p) % k}" for c in range(k)],
             "ratings": [(c * 5 + p) % k for c in range(k)]} for p in range(2)]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "s.duckdb")
    s = rank(src, out, engine=quality_engine(), judge=JS, strategy="auto")
    assert s.strategies == {"swiss": 2} and s.rounds == swiss_rounds(k) == 5
    per = rows(out, "SELECT prompt_id, count(*), count(DISTINCT (cand_a, cand_b)), "
                    "count(DISTINCT round) FROM pairs GROUP BY 1 ORDER BY 1")
    assert per == [("p0", 30, 30, 5), ("p1", 30, 30, 5)]  # 6 a round, no re-match
    assert all(top1_correct(p) == 1.0 for p in s.rankings)
    again = rank(src, out, engine=quality_engine(), judge=JS)
    assert (again.judged, again.skipped) == (0, 60)  # the rounds replay from the store


def test_bad_prompts_land_in_errors_with_one_summary_line_each(tmp_path):
    objs = responses_rows(1, 3) + [
        {"id": "one", "prompt": "q", "responses": ["x"]},
        {"id": "dup", "prompt": "q", "responses": ["x", "x"]},
        {"id": "big", "prompt": "q", "responses": [f"r{i}" for i in range(6)]},
        {"id": "gold", "prompt": "q", "responses": ["x", "y"], "best": 5}]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "e.duckdb")
    s = rank(src, out, engine=quality_engine(), judge=JS, max_candidates=5)
    assert (s.prompts, s.ranked, s.problems) == (5, 1, 4)
    assert len(s.problem_kinds) == 4 and sum(s.problem_kinds.values()) == 4
    errs = rows(out, "SELECT row_number, reason FROM errors ORDER BY row_number")
    assert [r for r, _ in errs] == [20000, 30000, 40000, 50000]
    assert "needs at least two" in errs[0][1] and "same response" in errs[1][1]
    assert "more than the limit of 5" in errs[2][1] and "names no candidate" in errs[3][1]
    from rmjudge.rank.summary import render_summary

    text = render_summary(s)
    assert text.count("    ") >= 4 and "(row 2)" in text and "(row 5)" in text


def test_a_run_that_stores_no_comparison_ends_in_one_error_not_a_traceback(tmp_path):
    """Every prompt an error row (or an empty input): no comparison is stored, the summary
    says nothing was ranked, and eval and filter read the store without failing."""
    from click.testing import CliRunner

    from rmjudge.cli import main

    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "one", "prompt": "q", "responses": ["x"]}])
    out = str(tmp_path / "e.duckdb")
    s = rank(src, out, engine=quality_engine(), judge=JS)
    assert (s.prompts, s.ranked, s.problems) == (1, 0, 1)
    r = CliRunner().invoke(main, ["eval", out])
    assert r.exit_code == 0 and "top-1 accuracy: n/a" in r.output, r.output
    r = CliRunner().invoke(main, ["filter", out, "-o", str(tmp_path / "f.jsonl")])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output


def test_shards_split_by_prompt_and_together_give_the_unsharded_comparisons(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(6, 3))
    whole = str(tmp_path / "w.duckdb")
    rank(src, whole, engine=quality_engine(), judge=JS)
    parts = [str(tmp_path / f"s{i}.duckdb") for i in range(2)]
    for i, out in enumerate(parts):
        rank(src, out, engine=quality_engine(), judge=JS, shard=(i, 2))
    shard_prompts = [set(x for (x,) in rows(p, "SELECT DISTINCT prompt_id FROM pairs"))
                     for p in parts]
    assert shard_prompts[0] and shard_prompts[1] and not shard_prompts[0] & shard_prompts[1]
    assert sorted(r for p in parts for r in rows(p, PAIRS_Q)) == rows(whole, PAIRS_Q)
    from rmjudge.runs.merge import merge

    merged = str(tmp_path / "m.duckdb")
    merge(parts, merged)
    with open_judged(merged) as t, open_judged(whole) as w:
        assert [(p.prompt_id, p.ranked) for p in read_rankings(t)] == \
            [(p.prompt_id, p.ranked) for p in read_rankings(w)]


def test_kill_9_and_resume_judge_every_comparison_once(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(3, 4))
    ref = str(tmp_path / "ref.duckdb")
    rank(src, ref, engine=quality_engine(), judge=JS)
    out = str(tmp_path / "k.duckdb")
    args = ["rank", src, "-o", out, "--samples", "2", "--max-tokens", "32", "--seed", "3",
            "--commit-every", "1", "--quiet"]
    assert kill_after_commits(args, 2, preamble=SCRIPTED_CLI) == 2
    assert rows(out, "SELECT count(*) FROM pairs") == [(2,)]
    resumed = subprocess.run([sys.executable, "-c", SCRIPTED_CLI
                              + "\nfrom rmjudge.cli import main\nmain(prog_name='rmjudge')",
                              *args], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert rows(out, PAIRS_Q) == rows(ref, PAIRS_Q)
    assert rows(out, RANKINGS_Q) == rows(ref, RANKINGS_Q)
    assert rows(out, "SELECT count(*), count(DISTINCT id) FROM pairs") == [(18, 18)]


def test_a_resume_with_another_strategy_is_refused(tmp_path):
    from rmjudge.files import StoreError

    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(1, 3))
    out = str(tmp_path / "r.duckdb")
    rank(src, out, engine=quality_engine(), judge=JS)
    with pytest.raises(StoreError, match="other settings|holds results"):
        rank(src, out, engine=quality_engine(), judge=JS, strategy="swiss")


def test_a_non_duckdb_output_and_an_input_without_candidates_are_one_error(tmp_path):
    from rmjudge.core.errors import UserError

    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "b"}])
    with pytest.raises(UserError, match="fits no ranking layout"):
        rank(src, str(tmp_path / "o.duckdb"), engine=quality_engine(), judge=JS)
    with pytest.raises(UserError, match="give a .duckdb file"):
        rank(src, str(tmp_path / "o.parquet"), engine=quality_engine(), judge=JS)


# -- filter and eval on a ranked store -----------------------------------------------------------

def test_filter_writes_best_vs_worst_and_margin_pairs_and_kto(tmp_path):
    from click.testing import CliRunner

    from rmjudge.cli import main

    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(2, 4))
    out = str(tmp_path / "r.duckdb")
    s = rank(src, out, engine=quality_engine(), judge=JS)
    runner = CliRunner()
    dpo = tmp_path / "d.jsonl"
    res = runner.invoke(main, ["filter", out, "-o", str(dpo), "--keep-columns", "subset"])
    assert res.exit_code == 0, res.output
    got = [json.loads(line) for line in dpo.read_text().splitlines()]
    for p, row in zip(s.rankings, got):
        assert row["prompt"] == f"question {p.prompt_id[1:]}" and row["subset"] == p.fields["subset"]
        assert row["chosen"] == p.texts[p.ranked[0].candidate]
        assert row["rejected"] == p.texts[p.ranked[-1].candidate]
        assert (row["chosen_rank"], row["rejected_rank"]) == (1, 4)
    allp = tmp_path / "all.jsonl"
    res = runner.invoke(main, ["filter", out, "-o", str(allp), "--rank-pairs", "all",
                               "--rank-margin", "0.5", "--format", "kto"])
    assert res.exit_code == 0, res.output
    kto = [json.loads(line) for line in allp.read_text().splitlines()]
    # KTO labels candidates, each once: at margin 0.5 the middle ones are better than some and
    # worse than others, so only the top (true) and the bottom (false) of each prompt remain
    assert [(r["prompt_id"], r["rank"], r["label"]) for r in kto] == [
        ("p0", 1, True), ("p0", 4, False), ("p1", 1, True), ("p1", 4, False)]
    strict = tmp_path / "strict.jsonl"
    runner.invoke(main, ["filter", out, "-o", str(strict), "--rank-pairs", "all",
                         "--rank-margin", "0.9"])
    kept = [json.loads(line) for line in strict.read_text().splitlines()]
    assert 0 < len(kept) < 12 and all(r["margin"] >= 0.9 for r in kept)


def test_eval_reports_top1_and_kendall_tau_against_hand_computed_values(tmp_path):
    objs = responses_rows(3, 3)
    objs[1]["ratings"] = [-v for v in objs[1]["ratings"]]  # the judge now disagrees fully
    objs[2]["ratings"] = [1, 1, 1]  # no spread: top-1 counts, tau is undefined
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "r.duckdb")
    rank(src, out, engine=quality_engine(), judge=JS)
    with open_judged(out) as t:
        e = evaluate_ranked(t, resamples=200, seed=1)
    assert e.with_gold == 3 and e.tau_prompts == 2
    assert e.top1[0] == pytest.approx(2 / 3)
    assert e.kendall_tau[0] == pytest.approx(0.0)  # +1 and -1
    assert e.kendall_tau[1] <= 0.0 <= e.kendall_tau[2]
    from click.testing import CliRunner

    from rmjudge.cli import main

    res = CliRunner().invoke(main, ["eval", out, "--json", "--resamples", "50"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["ranked"] and data["top1_accuracy"]["value"] == pytest.approx(2 / 3)


def test_the_schedule_goes_prompt_by_prompt_and_candidate_by_candidate():
    from rmjudge.rank.runner import schedule

    ps = [Prompt(f"p{n}", n, ({"role": "user", "content": "q"},), ("a", "b", "c")) for n in range(2)]
    plan = [(p, list(reversed(round_robin(3)))) for p in ps]
    got = [(p.id, i, j) for p, i, j in schedule(plan)]
    assert got == [("p0", 0, 1), ("p0", 0, 2), ("p0", 1, 2), ("p1", 0, 1), ("p1", 0, 2),
                   ("p1", 1, 2)]


def test_the_library_facade_names_the_call():
    import rmjudge

    assert rmjudge.rank_candidates is rank and "rank_candidates" in rmjudge.__all__


def test_rank_leaves_a_file_it_did_not_write_untouched(tmp_path):
    from click.testing import CliRunner

    from rmjudge.cli import main

    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(1, 3))
    foreign = tmp_path / "notes.duckdb"
    foreign.write_text("my own notes\n")
    r = CliRunner().invoke(main, ["rank", src, "-o", str(foreign), "--model", "/missing.gguf"])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert foreign.read_text() == "my own notes\n"
    r = CliRunner().invoke(main, ["rank", src, "-o", src, "--model", "/missing.gguf"])
    assert r.exit_code != 0 and "give a .duckdb file" in r.output


# -- bad input keeps everything ------------------------------------------------------------------

def test_a_group_error_row_keeps_every_raw_row_of_the_group(tmp_path):
    """One row per response: a prompt that cannot be ranked keeps its rows, whole, in input
    order (JSON Lines), not only their numbers, so nothing of the input is lost."""
    long = "x" * 2000
    objs = [{"qid": "a", "prompt": "q", "response": long + "1", "note": "first"},
            {"qid": "b", "prompt": "r", "response": "lonely"},
            {"qid": "a", "prompt": "q", "response": long + "1", "note": "again"},
            {"qid": "c", "prompt": "s", "response": "c1", "rating": 1},
            {"qid": "c", "prompt": "s", "response": "c2"}]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "g.duckdb")
    rank(src, out, engine=quality_engine(), judge=JS, group_by="qid")
    errs = rows(out, "SELECT row_number, reason, raw FROM errors ORDER BY row_number")
    assert [r[0] for r in errs] == [10000, 20000, 40000]
    by = {r[0]: (r[1], [json.loads(x) for x in r[2].splitlines()]) for r in errs}
    assert by[10000][1] == [objs[0], objs[2]] and "same response" in by[10000][0]
    assert "(rows 1, 3)" in by[10000][0]
    assert by[20000][1] == [objs[1]] and "needs at least two" in by[20000][0]
    assert by[40000][1] == [objs[3], objs[4]] and "'rating' is given for 1 of the 2" in \
        by[40000][0]


def test_kto_from_a_ranked_store_labels_each_candidate_once_and_the_middle_by_margin(tmp_path):
    from click.testing import CliRunner

    from rmjudge.cli import main
    from rmjudge.rank.outputs import kto_labels

    # candidate 0 beats 1 and 2 surely; 1 is hardly better than 2 (middle by the margin)
    assert kto_labels([(0, 1, 0.95), (0, 2, 0.97), (1, 2, 0.55)], [0, 1, 2]) == [
        (0, True, 0.97), (2, False, 0.97)]
    assert kto_labels([(0, 1, 0.95), (0, 2, 0.97)], [0, 1, 2]) == [
        (0, True, 0.97), (1, False, 0.95), (2, False, 0.97)]
    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(3, 5))
    out = str(tmp_path / "r.duckdb")
    s = rank(src, out, engine=quality_engine(), judge=JS)
    sizes = []
    for margin in ("0.5", "0.8", "0.95"):
        f = tmp_path / f"k{margin}.jsonl"
        res = CliRunner().invoke(main, ["filter", out, "-o", str(f), "--rank-pairs", "all",
                                        "--rank-margin", margin, "--format", "kto"])
        assert res.exit_code == 0, res.output
        got = [json.loads(line) for line in f.read_text().splitlines()]
        seen = [(r["prompt_id"], r["completion"]) for r in got]
        assert len(seen) == len(set(seen))  # never both desirable and undesirable
        for p in s.rankings:
            mine = [r for r in got if r["prompt_id"] == p.prompt_id]
            ranks = [r["rank"] for r in mine]
            assert ranks == sorted(ranks)
            # every desirable candidate ranks above every undesirable one
            good = [r["rank"] for r in mine if r["label"]]
            bad = [r["rank"] for r in mine if not r["label"]]
            assert not good or not bad or max(good) < min(bad)
            assert all(r["margin"] >= float(margin) for r in mine)
        assert f"KTO rows ({sum(r['label'] for r in got)} desirable" in res.output
        sizes.append(len(got))
    assert sizes[0] == 2 * 3 < sizes[2]  # a higher margin puts middle candidates on a side


def test_eval_by_a_column_the_ranked_store_lacks_is_one_error_naming_the_columns(tmp_path):
    from click.testing import CliRunner

    from rmjudge.cli import main

    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(2, 3))
    out = str(tmp_path / "r.duckdb")
    rank(src, out, engine=quality_engine(), judge=JS)
    r = CliRunner().invoke(main, ["eval", out, "--by", "nonexistent_column"])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert "'nonexistent_column'" in lines[0] and "subset" in lines[0]
    r = CliRunner().invoke(main, ["eval", out, "--by", "subset", "--resamples", "20"])
    assert r.exit_code == 0 and "subset=s0" in r.output and "subset=s1" in r.output, r.output


def test_an_edited_prompt_is_named_by_its_input_row_and_candidates(tmp_path):
    """The refused resume names the user's line and the comparisons by candidate numbers,
    never a comparison's internal row number (row * 10000 + n)."""
    from rmjudge.files import StoreError

    objs = responses_rows(3, 3)
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "r.duckdb")
    rank(src, out, engine=quality_engine(), judge=JS)
    objs[1]["responses"][2] = objs[1]["responses"][2] + " (edited)"
    write_jsonl(tmp_path / "in.jsonl", objs)
    with pytest.raises(StoreError) as e:
        rank(src, out, engine=quality_engine(), judge=JS)
    msg = str(e.value)
    assert "prompt on row 2 (prompt 'p1': comparisons #0-#2, #1-#2)" in msg, msg
    assert "2000" not in msg and "--rejudge-changed" in msg


def test_a_resume_with_a_smaller_input_counts_this_input_and_names_the_rest(tmp_path):
    from rmjudge.rank.summary import render_summary

    objs = responses_rows(3, 3)
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "r.duckdb")
    rank(src, out, engine=quality_engine(), judge=JS)
    small = write_jsonl(tmp_path / "small.jsonl", objs[:1])
    s = rank(small, out, engine=quality_engine(), judge=JS)
    assert (s.prompts, s.ranked, s.judged, s.skipped, s.others) == (1, 1, 0, 3, 2)
    text = render_summary(s)
    assert "ranked 1 of 1 prompt (3 candidates per prompt ranked)" in text
    assert "top-1 vs gold: 1/1 prompt (1.000)" in text  # this input's prompt, not the store's 3
    assert "the store also holds 2 ranked prompts that this input does not name" in text
    assert "strategy: round-robin for 1 prompt\n" in text


def test_the_summary_says_what_was_ranked_and_groups_bad_counts_as_one_kind(tmp_path):
    from rmjudge.rank.summary import render_summary

    objs = [{"id": "p0", "prompt": "q", "responses": ["a q=1", "b q=2"], "best": 1},
            {"id": "p1", "prompt": "q", "responses": ["a q=1", "b q=2", "c q=3"]},
            {"id": "one", "prompt": "q", "responses": ["x"]},
            {"id": "zero", "prompt": "q", "responses": []},
            {"id": "big", "prompt": "q", "responses": [f"r{i}" for i in range(6)]}]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    s = rank(src, str(tmp_path / "r.duckdb"), engine=quality_engine(), judge=JS,
             max_candidates=5)
    text = render_summary(s)
    assert text.startswith("rmjudge: ranked 2 of 5 prompts (2 to 3 candidates per prompt "
                           "ranked): 4 comparisons judged"), text
    assert "fewer than two candidates: a ranking needs at least two: 2 rows (rows 3, 4)" in text
    assert "too many candidates: more than the limit of N: 1 row (row 5)" in text
    assert "N candidate" not in text


def test_prompt_ids_4_and_the_text_4_are_never_merged(tmp_path):
    """A number and a text that spell the same id are one prompt id in the store: grouped rows
    that mix them are refused with the reason (their rows kept whole), and a second prompt
    with the other spelling is a duplicate that says why; nothing is merged or guessed."""
    grouped = [{"qid": 4, "prompt": "q", "response": "a q=1"},
               {"qid": "4", "prompt": "q", "response": "b q=2"},
               {"qid": 5, "prompt": "r", "response": "c q=1"},
               {"qid": 5, "prompt": "r", "response": "d q=2"}]
    got = list(read_prompts(raws(grouped), group_by="qid"))
    assert isinstance(got[0], PromptProblem) and isinstance(got[1], Prompt)
    assert "values 4 (row 1) and \"4\" (row 2) are one prompt id '4'" in got[0].reason
    assert [json.loads(x) for x in got[0].raw.splitlines()] == grouped[:2]
    assert got[1].candidates == ("c q=1", "d q=2")
    one_row = [{"id": 4, "prompt": "q", "responses": ["a", "b"]},
               {"id": "4", "prompt": "q2", "responses": ["c", "d"]}]
    got = list(read_prompts(raws(one_row)))
    assert isinstance(got[0], Prompt) and isinstance(got[1], PromptProblem)
    assert "duplicate prompt id '4' (first seen on row 1) (written 4 there and \"4\" here" in \
        got[1].reason


def test_ctrl_c_in_a_later_swiss_round_keeps_what_was_judged_and_resumes_exactly(tmp_path):
    """Ctrl-C (KeyboardInterrupt) in the middle of a Swiss round: one Interrupted error with
    the resume hint, every committed comparison kept, and the rerun plays the same rounds to
    the same store as an uninterrupted run."""
    from rmjudge.runs.pipeline import Interrupted

    k = 5  # Swiss: 4 rounds of 2
    objs = [{"id": "p", "prompt": "q", "responses": [f"r{c} q={(c * 3) % k}" for c in range(k)]}]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    ref = str(tmp_path / "ref.duckdb")
    rank(src, ref, engine=quality_engine(), judge=JS, commit_every=1, strategy="swiss")
    base = quality_engine()
    calls = [0]

    def respond(req, i):
        calls[0] += 1
        if calls[0] == 14:  # in the second round (a comparison: 4 rollouts, maybe reflections)
            raise KeyboardInterrupt
        return base.respond(req, i)

    from rmjudge.engine.fake import ScriptedEngine

    out = str(tmp_path / "c.duckdb")
    with pytest.raises(Interrupted, match="rerun the same command"):
        rank(src, out, engine=ScriptedEngine(respond, pairs_in_flight=1), judge=JS,
             commit_every=1, strategy="swiss")
    kept = rows(out, "SELECT count(*), max(round) FROM pairs")[0]
    assert 2 < kept[0] < rows(ref, "SELECT count(*) FROM pairs")[0][0] and kept[1] >= 2, kept
    s = rank(src, out, engine=quality_engine(), judge=JS, commit_every=1, strategy="swiss")
    assert s.skipped == kept[0]
    assert rows(out, PAIRS_Q) == rows(ref, PAIRS_Q)
    assert rows(out, RANKINGS_Q) == rows(ref, RANKINGS_Q)


def test_a_second_run_on_a_store_being_ranked_is_one_error_and_changes_nothing(tmp_path):
    """Two `rmjudge rank` on one store: the second, started while the first holds the lock,
    ends in one Error: line; `view` of the store meanwhile too; the first finishes with every
    comparison once, as an undisturbed run."""
    from click.testing import CliRunner

    from rmjudge.cli import main

    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(1, 3))
    ref = str(tmp_path / "ref.duckdb")
    rank(src, ref, engine=quality_engine(), judge=JS)
    out = str(tmp_path / "busy.duckdb")
    args = ["rank", src, "-o", out, "--samples", "2", "--max-tokens", "32", "--seed", "3",
            "--commit-every", "1", "--quiet"]
    slow = SCRIPTED_CLI + """
import time
from rmjudge.store import Store
_commit = Store.commit
held = []
def slow_commit(self, *a, **k):  # the first commit holds the lock a while
    _commit(self, *a, **k)
    if not held:
        held.append(1)
        print("committed first", flush=True)
        time.sleep(3)
Store.commit = slow_commit
"""
    p = subprocess.Popen([sys.executable, "-c", slow + "\nfrom rmjudge.cli import main\n"
                          "main(prog_name='rmjudge')", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith("committed ")
        runner = CliRunner()
        for cmd in (["rank", src, "-o", out, "--model", "/missing.gguf"],
                    ["view", out, "-o", str(tmp_path / "v")]):
            r = runner.invoke(main, cmd)
            lines = [x for x in r.output.splitlines() if x.strip()]
            assert r.exit_code != 0 and len(lines) == 1 and lines[0].startswith("Error: "), \
                (cmd, r.output)
            assert "another rmjudge process is writing" in lines[0], lines[0]
        assert not (tmp_path / "v").exists()
    finally:
        p.stdout.read()
        err = p.stderr.read()
        p.wait(60)
    assert p.returncode == 0, err
    assert rows(out, PAIRS_Q) == rows(ref, PAIRS_Q)
    assert rows(out, RANKINGS_Q) == rows(ref, RANKINGS_Q)


def test_an_empty_input_is_one_error_saying_so(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import rmjudge.runs.setup
    from rmjudge.cli import main

    def no_model(*a, **k):  # the input is read before a model loads
        raise AssertionError("a model was loaded for an empty input")

    monkeypatch.setattr(rmjudge.runs.setup, "load_judge_engine", no_model)
    for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n\n")):
        src = tmp_path / name
        src.write_text(text)
        r = CliRunner().invoke(main, ["rank", str(src), "-o", str(tmp_path / "o.duckdb"),
                                      "--quiet", "--overwrite"])
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code != 0 and len(lines) == 1, r.output
        assert lines[0] == f"Error: nothing was ranked: {src} holds no rows; give a file with " \
            "a prompt and its candidates per row (docs/rank.md)"
    src = write_jsonl(tmp_path / "one.jsonl", responses_rows(1, 3))  # one prompt, 50 shards
    shard = next(f"{i}/50" for i in range(50) if not in_shard("p0", (i, 50)))
    r = CliRunner().invoke(main, ["rank", src, "-o", str(tmp_path / "s.duckdb"), "--quiet",
                                  "--shard", shard])
    assert r.exit_code != 0 and r.output == (
        f"Error: nothing was ranked: shard {shard} of {src} holds no prompt; use fewer shards "
        "(each takes whole prompts)\n"), r.output


def test_ranking_into_a_store_of_judged_pairs_is_one_error_in_plain_words(tmp_path):
    from click.testing import CliRunner

    from rmjudge.cli import main
    from rmjudge.runs.pipeline import score

    pairs = write_jsonl(tmp_path / "pairs.jsonl",
                        [{"prompt": "q", "chosen": "a q=2", "rejected": "b q=1"}])
    out = str(tmp_path / "plain.duckdb")
    score(pairs, quality_engine(), JS, output=out)
    before = rows(out, "SELECT id, verdict FROM pairs")
    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(1, 3))
    r = CliRunner().invoke(main, ["rank", src, "-o", out, "--model", "/missing.gguf"])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code != 0 and len(lines) == 1, r.output
    assert "holds pairs judged by `rmjudge score`" in lines[0] and "--overwrite" in lines[0]
    assert rows(out, "SELECT id, verdict FROM pairs") == before


def test_eval_resamples_0_on_a_ranked_store_gives_no_interval(tmp_path):
    """--resamples 0 means no intervals (as on judged pairs), not a zero-width one."""
    from click.testing import CliRunner

    from rmjudge.cli import main

    objs = responses_rows(3, 3)
    objs[1]["ratings"] = [-v for v in objs[1]["ratings"]]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "r.duckdb")
    rank(src, out, engine=quality_engine(), judge=JS)
    r = CliRunner().invoke(main, ["eval", out, "--resamples", "0"])
    assert r.exit_code == 0, r.output
    assert "top-1 accuracy: 0.667 [-, -]" in r.output, r.output
    r = CliRunner().invoke(main, ["eval", out, "--resamples", "0", "--json"])
    top1 = json.loads(r.output)["top1_accuracy"]
    assert top1["lo"] is None and top1["hi"] is None and top1["value"] == pytest.approx(2 / 3)


def test_the_advice_after_nothing_was_ranked_or_judged_works_when_followed(tmp_path, monkeypatch):
    """Every row an error row (a --group-by or --map typo): the store keeps the settings that
    made the errors, so a plain rerun with the fixed option is refused; the message says
    --overwrite, and the rerun it describes ranks/judges."""
    from click.testing import CliRunner

    import rmjudge.runs.setup
    from rmjudge.cli import main

    monkeypatch.setattr(rmjudge.runs.setup, "load_judge_engine",
                        lambda *a, **k: quality_engine())
    src = write_jsonl(tmp_path / "in.jsonl", [{"pid": "p1", "response": t, "prompt": "q"}
                                              for t in ("a q=1", "b q=2", "c q=3")])
    out = str(tmp_path / "r.duckdb")
    r = CliRunner().invoke(main, ["rank", src, "-o", out, "--quiet", "--group-by", "pdi"])
    assert r.exit_code != 0 and "rerun with --overwrite" in r.output, r.output
    r = CliRunner().invoke(main, ["rank", src, "-o", out, "--quiet", "--group-by", "pid",
                                  "--overwrite"])
    assert r.exit_code == 0, r.output
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"q": "x", "chosen": "a q=2",
                                                               "rejected": "b q=1"}])
    out = str(tmp_path / "s.duckdb")
    r = CliRunner().invoke(main, ["score", pairs, "-o", out, "--quiet", "--map", "prompt=qq"])
    assert r.exit_code != 0 and "rerun with --overwrite" in r.output, r.output
    r = CliRunner().invoke(main, ["score", pairs, "-o", out, "--quiet", "--map", "prompt=q"])
    assert r.exit_code != 0 and "other settings" in r.output, r.output  # why --overwrite
    r = CliRunner().invoke(main, ["score", pairs, "-o", out, "--quiet", "--map", "prompt=q",
                                  "--overwrite"])
    assert r.exit_code == 0, r.output


def test_rank_options_on_a_store_of_judged_pairs_are_one_error_not_ignored(tmp_path):
    """Before, `filter PAIRS.duckdb --rank-margin 0.9` wrote the pairs as if it were not given."""
    from click.testing import CliRunner

    from rmjudge import score
    from rmjudge.cli import main

    judged = str(tmp_path / "s.duckdb")
    score([{"prompt": "q", "chosen": "a q=2", "rejected": "b q=1"}], output=judged,
          engine=quality_engine(), samples=2)
    out = tmp_path / "f.jsonl"
    for args, first in ((["--rank-margin", "0.9"], "--rank-margin applies"),
                        (["--rank-margin", "0.5"], "--rank-margin applies"),  # its default
                        (["--rank-pairs", "all", "--rank-margin", "0.9"],
                         "--rank-pairs and --rank-margin apply")):
        r = CliRunner().invoke(main, ["filter", judged, "-o", str(out), *args])
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code != 0 and len(lines) == 1, r.output
        assert lines[0].startswith(f"Error: {first} only to a ranked store"), r.output
        assert not out.exists()
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(out)])
    assert r.exit_code == 0 and out.exists(), r.output


def test_pair_options_on_a_ranked_store_are_one_error_not_ignored(tmp_path):
    """Before, `filter RANKED.duckdb --min-confidence 0.9` (or --relabel, --evidence, ...) wrote
    the ranked pairs as if it were not given."""
    from click.testing import CliRunner

    from rmjudge.cli import main

    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(2, 3))
    ranked = str(tmp_path / "r.duckdb")
    rank(src, ranked, engine=quality_engine(), judge=JS)
    out = tmp_path / "f.jsonl"
    for args, first in ((["--min-confidence", "0.9"], "--min-confidence applies"),
                        (["--relabel", "--unlabelled", "drop"], "--relabel, --unlabelled apply"),
                        (["--evidence"], "--evidence applies"),
                        (["--allow-inconsistent", "--prefer", "human"],
                         "--allow-inconsistent, --prefer apply"),
                        (["--min-confidence", "0.5"], "--min-confidence applies")):  # default
        r = CliRunner().invoke(main, ["filter", ranked, "-o", str(out), *args])
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code != 0 and len(lines) == 1, r.output
        assert lines[0].startswith(f"Error: {first} only to a store of judged pairs"), r.output
        assert "--rank-pairs" in lines[0] and not out.exists()
    # the options a ranked store uses still work
    r = CliRunner().invoke(main, ["filter", ranked, "-o", str(out), "--format", "kto", "--chat",
                                  "--rank-pairs", "all"])
    assert r.exit_code == 0 and out.exists(), r.output
    # eval: what only judging or a pairs store would use is refused too
    r = CliRunner().invoke(main, ["eval", ranked, "--limit", "1", "--threads", "1"])
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert r.output.startswith(f"Error: --limit, --threads apply only when TABLE is input not "
                               f"judged yet; {ranked} is a ranked store"), r.output
    assert "`rmjudge rank INPUT --overwrite`" in r.output
    r = CliRunner().invoke(main, ["eval", ranked, "--greedy-baseline"])
    assert r.exit_code == 1 and r.output.startswith(
        f"Error: --greedy-baseline does not apply to a ranked store ({ranked})"), r.output
    r = CliRunner().invoke(main, ["filter", ranked, "-o", str(out), "--keep-columns",
                                  "prompt_id,prompt_id"])  # was a DuckDB traceback
    assert r.exit_code == 1 and r.output == (
        "Error: --keep-columns prompt_id would overwrite the output's own column of that name; "
        "the dpo rows of a ranked store already carry it\n"), r.output


def test_ultrafeedback_rows_with_only_overall_score_say_which_gold_field_reads_it(tmp_path):
    """Before, completions carrying only `overall_score` were ranked without gold and the
    summary did not say that --gold-field overall_score would read it."""
    from rmjudge.rank.summary import render_summary

    uf = {"instruction": "q", "completions": [
        {"response": "a q=1", "overall_score": 6}, {"response": "b q=2", "overall_score": 9}]}
    both = {"instruction": "r", "completions": [
        {"response": "c q=1", "fine-grained_score": 2.0, "overall_score": 3},
        {"response": "d q=2", "fine-grained_score": 4.0, "overall_score": 8}]}
    read = list(read_prompts(raws([uf, both])))
    assert [(p.gold, p.gold_elsewhere) for p in read] == [(None, "overall_score"),
                                                           ((2, 1), None)]
    src = write_jsonl(tmp_path / "in.jsonl", [uf, uf | {"instruction": "q2"}, both])
    s = rank(src, str(tmp_path / "r.duckdb"), engine=quality_engine(), judge=JS)
    assert s.gold_elsewhere == {"overall_score": 2}
    assert ("  note: 2 prompts without gold ranks have overall_score on every completion: "
            "--gold-field overall_score ranks against it") in render_summary(s).splitlines()
    s = rank(src, str(tmp_path / "o.duckdb"), engine=quality_engine(), judge=JS,
             gold_field="overall_score")
    assert s.gold_elsewhere == {}


def test_eval_says_why_prompts_have_no_kendall_tau(tmp_path):
    """Tau needs gold ranks and a spread in both the gold and the judge's scores: a prompt
    without ratings (no gold), one whose ratings are all equal, and one whose comparisons all
    tie (the judge picks slot 1 in both orders, so the orders disagree every time) have none,
    and `eval` says so, prompt counts by reason, instead of a bare n/a."""
    from click.testing import CliRunner

    from rmjudge.cli import main
    from rmjudge.rank.outputs import TAU_UNDEFINED, render_eval

    objs = responses_rows(4, 3)
    del objs[0]["ratings"]
    objs[1]["ratings"] = [2, 2, 2]
    src = write_jsonl(tmp_path / "in.jsonl", objs)
    out = str(tmp_path / "r.duckdb")
    rank(src, out, engine=quality_engine(flip=set(objs[2]["responses"])), judge=JS)
    with open_judged(out) as t:
        e = evaluate_ranked(t, resamples=0)
    assert e.tau_prompts == 1
    assert e.tau_undefined == {"no_gold": 1, "gold_tied": 1, "scores_tied": 1}
    text = render_eval(e)
    assert (f"1 prompt: {TAU_UNDEFINED['no_gold']}, 1 prompt: {TAU_UNDEFINED['gold_tied']}, "
            f"1 prompt: {TAU_UNDEFINED['scores_tied']}") in text
    r = CliRunner().invoke(main, ["eval", out, "--resamples", "0", "--json"])
    assert json.loads(r.output)["tau_undefined"] == e.tau_undefined
    # a store whose every prompt lacks gold: n/a, and why
    bare = [dict(o) for o in responses_rows(2, 3)]
    for o in bare:
        del o["ratings"]
    out2 = str(tmp_path / "bare.duckdb")
    rank(write_jsonl(tmp_path / "bare.jsonl", bare), out2, engine=quality_engine(), judge=JS)
    r = CliRunner().invoke(main, ["eval", out2, "--resamples", "0"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "Kendall tau-b vs gold: n/a (0 prompts with a defined tau)" in flat
    assert "for 2 prompts: no gold ranks" in flat


def test_scoring_into_a_ranked_store_says_it_holds_a_ranking(tmp_path):
    """`score -o RANKED.duckdb` printed a diff of settings; it says what the store holds."""
    from rmjudge.files import StoreError
    from rmjudge.runs.pipeline import score

    out = str(tmp_path / "ranked.duckdb")
    rank(write_jsonl(tmp_path / "in.jsonl", responses_rows(1, 3)), out, engine=quality_engine(),
         judge=JS)
    before = rows(out, PAIRS_Q)
    pairs = write_jsonl(tmp_path / "pairs.jsonl",
                        [{"prompt": "q", "chosen": "a q=2", "rejected": "b q=1"}])
    with pytest.raises(StoreError) as exc:
        score(pairs, quality_engine(), JS, output=out)
    assert str(exc.value) == (f"{out} holds a ranking made by `rmjudge rank` (its comparisons "
                              "and rankings tables), not pairs judged by `rmjudge score`; write "
                              "to another -o, or --overwrite to replace the ranking")
    assert rows(out, PAIRS_Q) == before


def test_merging_one_of_two_rank_shards_advises_rank_not_score(tmp_path):
    from rmjudge.runs.merge import merge

    src = write_jsonl(tmp_path / "in.jsonl", responses_rows(6, 3))
    part = str(tmp_path / "s0.duckdb")
    rank(src, part, engine=quality_engine(), judge=JS, shard=(0, 2))
    report = merge([part], str(tmp_path / "m.duckdb"))
    assert report.problems == ["missing shard(s) 1/2: run rmjudge rank --shard for each and "
                               "merge again"]
    assert not (tmp_path / "m.duckdb").exists()
