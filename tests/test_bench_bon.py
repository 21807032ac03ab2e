"""`rmjudge bench -b rewardbench2` and `-b rmb-bon`: best-of-N benchmarks judged through
`rmjudge rank` and scored as their authors score per-candidate scores. The rules are checked on
hand-built scores (expected values worked out in the comments), then the benchmarks end to end
on fixtures in the published layouts (tests/data/bench) with the scripted judge of
helpers.quality_engine (the candidate with the larger q=N wins)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import quality_engine, rows

from rmjudge.bench import BENCHMARKS, get
from rmjudge.bench.base import candidate_scores
from rmjudge.bench.rewardbench2 import best_of_n_result, prompt_stats, ties_score
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
    assert ties_score([("ref:1", [3.0, 1.0], 1)]) is None  # no prompt with both: undefined


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
    prompts, unreadable = read_ranked(bench, out)
    assert unreadable == 1 and len(prompts) == 5
    ties = [(str(r["id"]), candidate_scores(p, int(r["n_responses"])), int(r["num_correct"]))
            for r, p in prompts if r["subset"] == "Ties"]
    assert all(prompt_stats(s, n)[0] for _, s, n in ties)  # both Ties prompts accurate
    assert cells["Ties"] == pytest.approx(ties_score(ties))
    assert res.headline[0].value == pytest.approx((0.5 + 1.0 + cells["Ties"]) / 3)
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
