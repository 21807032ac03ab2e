"""`rmjudge compare` on judged tables built without a model.

Three scripted judges over tests/data/analysis_pairs.jsonl (labels A A B A | B B A A):
- X (`analysis_fixture.respond`): order (A, B) always right; order (B, A) always slot 1 (= B).
  Combined: tie on the five A-labelled pairs (the orders disagree), B on the three others.
- Y: order (A, B) always slot 1 (= A); order (B, A) always right. Combined: A on the A-labelled
  pairs, tie on the B-labelled ones.
- Z: right in both orders. Combined: the gold label.

Hand-computed, per order (16 items per judge, gold: 10 A, 6 B):
- accuracy, both orders pooled: X (5 x 0.5 + 3 x 1) / 8 = 0.6875; Y (5 x 1 + 3 x 0.5) / 8 =
  0.8125; Z 1.0.
- X says A 5 times, B 11 times; Y says A 13 times, B 3 times.
  X vs Y agree on 8 of 16 (p_o = 1/2), p_e = (5 * 13 + 11 * 3) / 256 = 98/256,
  kappa = (128 - 98) / (256 - 98) = 30/158.
  X vs gold agree on 11: p_e = (5 * 10 + 11 * 6) / 256 = 116/256, kappa = (176 - 116) / 140 = 3/7.
  Y vs gold agree on 13: p_e = (13 * 10 + 3 * 6) / 256 = 148/256, kappa = (208 - 148) / 108 = 5/9.
  Z vs gold: 1. X vs Z = X vs gold, Y vs Z = Y vs gold (Z is the gold label).
- Jury of X, Y, Z: A-labelled pairs tie/A/A -> A; B-labelled pairs B/tie/B -> B: the label.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
from analysis_fixture import FIXTURE, ROWS, build
from click.testing import CliRunner
from helpers import pref, rows

from rmjudge.analysis.compare import bootstrap_mean, cohen_kappa, order_items, paired_gain
from rmjudge.cli import main
from rmjudge.engine.fake import ScriptedEngine
from rmjudge.runs.pipeline import score
from rmjudge.core.settings import JudgeSettings


def _row(req) -> dict:
    body = req.messages[-1]["content"]
    return max((r for r in ROWS if r["prompt"] in body), key=lambda r: len(r["prompt"]))


def _slot(req, winner: str) -> int:
    """The slot (1|2) that shows response `winner` (A|B) in the request's order."""
    return 1 if (winner == "A") == (req.share_key[1] == "ab") else 2


def judge_y(req, i):
    row = _row(req)
    return pref(1 if req.share_key[1] == "ab" else _slot(req, row["label"]), -0.5, "y")


def judge_z(req, i):
    return pref(_slot(req, _row(req)["label"]), -0.5, "z")


def scripted(tmp_path, name: str, respond, source: str = str(FIXTURE), **kw) -> str:
    out = str(tmp_path / name)
    score(source, ScriptedEngine(respond), JudgeSettings(samples=2, seed=0), output=out, **kw)
    return out


@pytest.fixture(scope="module")
def judges(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judges")
    return build(tmp, "x.duckdb"), scripted(tmp, "y.duckdb", judge_y), \
        scripted(tmp, "z.duckdb", judge_z)


def run(*args):
    """`rmjudge compare` at 1,000 columns: these tests read whole lines (at 80 columns, lines
    wrap: tests/test_output_width.py)."""
    return CliRunner().invoke(main, ["compare", *args], env={"COLUMNS": "1000"})


def compare_json(*args) -> dict:
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# -- the old functions of examples/train_table.py, as they were before the move ---------------

def old_per_pair_correct(path) -> dict[str, float]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute("SELECT id, (coalesce(verdict_ab = label, false)::INT + "
                           "coalesce(verdict_ba = label, false)::INT) / 2.0 FROM pairs "
                           "WHERE label IN ('A', 'B')").fetchall()
    finally:
        con.close()
    return dict(rows)


def old_paired_gain(base, other, resamples=10000, seed=0):
    ids = sorted(set(base) & set(other))
    d = np.array([other[i] - base[i] for i in ids])
    rng = np.random.default_rng(seed)
    draws = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))


# -- kappa ------------------------------------------------------------------------------------

def test_kappa_matches_a_hand_computation():
    # 10 items: both say A on 4, both B on 2, a=A b=B on 3, a=B b=A on 1.
    a = ["A"] * 4 + ["B"] * 2 + ["A"] * 3 + ["B"]
    b = ["A"] * 4 + ["B"] * 2 + ["B"] * 3 + ["A"]
    # p_o = 6/10; a: 7 A 3 B; b: 5 A 5 B; p_e = (7*5 + 3*5)/100 = 0.5; kappa = 0.1/0.5 = 0.2
    assert cohen_kappa(a, b) == pytest.approx(0.2)
    assert cohen_kappa(a, a) == pytest.approx(1.0)
    assert cohen_kappa(["A"] * 3, ["A"] * 3) is None  # p_e = 1: undefined
    assert cohen_kappa([], []) is None
    # orders without a verdict are left out, orders judged by neither are no item
    xa, xb, left = order_items([("A", "B"), ("error", "A"), ("B", None)],
                               [("A", "A"), ("B", "A"), ("B", None)])
    assert (xa, xb, left) == (["A", "B", "A", "B"], ["A", "A", "A", "B"], 1)


def test_compare_figures_match_the_hand_computation(judges):
    x, y, z = judges
    d = compare_json(x, y, z)
    assert d["common_pairs"] == 8 and d["common_labelled"] == 8
    acc = [j["accuracy"]["value"] for j in d["judges"]]
    assert acc == pytest.approx([0.6875, 0.8125, 1.0])
    assert d["judges"][0]["gain"] is None
    assert [j["gain"]["value"] for j in d["judges"][1:]] == pytest.approx([0.125, 0.3125])
    for j in d["judges"]:
        a = j["accuracy"]
        assert a["lo"] <= a["value"] <= a["hi"] and a["n"] == 8
    between = {(k["a"], k["b"]): k for k in d["kappa"]["between_judges"]}
    assert between[(1, 2)]["value"] == pytest.approx(30 / 158)
    assert between[(1, 2)]["n"] == 16 and between[(1, 2)]["left_out"] == 0
    assert between[(1, 3)]["value"] == pytest.approx(3 / 7)
    assert between[(2, 3)]["value"] == pytest.approx(5 / 9)
    gold = [k["value"] for k in d["kappa"]["against_gold"]]
    assert gold == pytest.approx([3 / 7, 5 / 9, 1.0])
    # every pair flips: X ties the A pairs, Y ties the B pairs, Z gives the label
    assert [f["id"] for f in d["flips"]] == [r["id"] for r in ROWS]
    p1 = d["flips"][0]
    assert p1["verdicts"] == ["tie", "A", "A"] and p1["label"] == "A"
    assert p1["p_a"][1:] == pytest.approx([1.0, 1.0]) and p1["p_a"][0] == pytest.approx(0.5)


def test_paired_gain_equals_the_old_train_table_function(judges):
    x, y, z = judges
    base = old_per_pair_correct(x)
    for args, (resamples, seed) in (((), (10000, 0)), (("--resamples", "1000", "--seed", "3"),
                                                       (1000, 3))):
        d = compare_json(x, y, z, *args)
        for j, path in zip(d["judges"][1:], (y, z)):
            want = old_paired_gain(base, old_per_pair_correct(path), resamples, seed)
            got = (j["gain"]["value"], j["gain"]["lo"], j["gain"]["hi"])
            assert got == want
    # the bootstrap draws its resamples in chunks with the same numbers as all at once
    rng = np.random.default_rng(7)
    b = {f"p{i}": float(v) for i, v in enumerate(rng.integers(0, 3, 301) / 2)}
    o = {f"p{i}": float(v) for i, v in enumerate(rng.integers(0, 3, 301) / 2)}
    assert paired_gain(b, o, 2000, 5) == old_paired_gain(b, o, 2000, 5)
    d = [o[k] - b[k] for k in sorted(b)]
    assert bootstrap_mean(d, 2000, 5, max_draws=1000) == old_paired_gain(b, o, 2000, 5)
    # examples/train_table.py has no copy of its own
    src = (Path(__file__).resolve().parent.parent / "examples" / "train_table.py").read_text()
    assert "def paired_gain" not in src and "compare.paired_gain" in src


def test_compare_text_output(judges):
    x, y, z = judges
    r = run(x, y, z, "--flips", "3", "--resamples", "200")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "8 pairs judged by each of the 3 judges, 8 of them labelled" in out
    assert "accuracy, both orders pooled" in out and "gain over judge 1" in out
    assert "68.8 [" in out and "+12.5 [" in out and "+31.2 [" in out
    assert "judge 1 vs 2: 0.190 (16 orders)" in out
    assert "flips: 8 of 8 pairs" in out
    assert "  id  label  judge 1      judge 2      judge 3" in out
    assert "  p1  A      tie (0.50)   A (1.00)     A (1.00)\n" in out
    assert "... 5 more" in out


def test_compare_reports_pairs_judged_in_only_some_tables(tmp_path, judges):
    x = judges[0]
    part = scripted(tmp_path, "z5.duckdb", judge_z, limit=5)
    d = compare_json(x, part)
    assert d["common_pairs"] == 5
    assert [j["not_in_all"] for j in d["judges"]] == [3, 0]
    assert d["judges"][0]["not_in_all_ids"] == ["p6", "p7", "p8"]
    # X on p1..p5 (labels A A B A B): 0.5 x 3 + 1.0 x 2 -> 3.5/5; Z 1.0
    assert d["judges"][0]["accuracy"]["value"] == pytest.approx(0.7)
    assert d["judges"][1]["gain"]["value"] == pytest.approx(0.3)
    r = run(x, part, "--resamples", "100")
    assert f"{x}: 3 pairs not judged by every judge (left out), e.g. 'p6', 'p7', 'p8'" \
        in r.stdout


def test_compare_refuses_another_input(tmp_path, judges):
    x = judges[0]
    rows = [dict(r, prompt=r["prompt"] + " (other)") for r in ROWS]
    src = tmp_path / "other.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    other = scripted(tmp_path, "other.duckdb", judge_z, source=str(src))
    r = run(x, other)
    assert r.exit_code == 1
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"Error: {other} holds judgments "
                                                              "of another input")
    assert "compare tables judged from the same input" in r.stderr
    # an export whose working store is gone has no input record: the pairs themselves decide
    exp = scripted(tmp_path, "other.parquet", judge_z, source=str(src))
    work = tmp_path / ".other.parquet.rmjudge.duckdb"
    work.unlink()
    r = run(x, exp)
    assert r.exit_code == 1
    assert r.stderr == (f"Error: {exp}: pair 'p1' has another prompt than in {x}, so it is not "
                        "of the same input: compare tables judged from the same input (and the "
                        "same label mapping)\n")
    r = run(x)
    assert r.exit_code == 1 and r.stderr.startswith("Error: give at least two judged tables")
    y = judges[1]
    for args in ((x, x), (x, y, y)):
        r = run(*args)
        assert r.exit_code == 1 and r.stderr == f"Error: {args[-1]} is given twice; give each " \
            "judged table once\n"


def test_jury_is_a_table_filter_reads(tmp_path, judges):
    x, y, z = judges
    jury = str(tmp_path / "jury.parquet")
    r = run(x, y, z, "--jury", "-o", jury, "--resamples", "100")
    assert r.exit_code == 0, r.output
    assert f"wrote the jury's verdicts on 8 pairs -> {jury}" in r.stderr
    con = duckdb.connect()
    got = con.execute(f"SELECT id, verdict, verdict_ab, verdict_ba, consistent, label, correct, "
                      f"jury_votes_a, jury_votes_b, verdict_j1, verdict_j2, verdict_j3, p_a, "
                      f"p_a_j1 FROM read_parquet('{jury}') ORDER BY row_number").fetchall()
    assert [g[0] for g in got] == [r["id"] for r in ROWS]
    for g, row in zip(got, ROWS):
        lab = row["label"]
        assert g[1:7] == (lab, lab, lab, True, lab, True)
        assert g[7:9] == ((2, 0) if lab == "A" else (0, 2))
        assert g[9:12] == (("tie", "A", "A") if lab == "A" else ("B", "tie", "B"))
    # p_a: the mean of the judges' shares of votes for A (p1: X 0.5, Y 1.0, Z 1.0)
    assert got[0][12] == pytest.approx(2.5 / 3) and got[0][13] == pytest.approx(0.5)
    out = str(tmp_path / "clean.jsonl")
    r = CliRunner().invoke(main, ["filter", jury, "-o", out, "--evidence"])
    assert r.exit_code == 0, r.output
    kept = [json.loads(line) for line in Path(out).read_text().splitlines()]
    assert len(kept) == 8
    good = {r["response_a"] if r["label"] == "A" else r["response_b"] for r in ROWS}
    assert {k["chosen"] for k in kept} == good
    assert {k["judge_verdict_ab"] for k in kept} == {"chosen"}
    # a rerun replaces its own jury table
    r = run(x, y, z, "--jury", "-o", jury, "--resamples", "100")
    assert r.exit_code == 0, r.output


def test_jury_as_a_run_store(tmp_path, judges):
    x, y, z = judges
    jury = str(tmp_path / "jury.duckdb")
    for _ in range(2):  # the second run replaces its own jury store
        r = run(x, y, z, "--jury", "-o", jury, "--resamples", "100")
        assert r.exit_code == 0, r.output
    con = duckdb.connect(jury, read_only=True)
    got = con.execute("SELECT id, verdict, consistent, verdict_j1 FROM pairs "
                      "ORDER BY row_number").fetchall()
    con.close()
    assert [(g[0], g[1], g[2]) for g in got] == [(r["id"], r["label"], True) for r in ROWS]
    assert got[0][3] == "tie"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left over
    out = str(tmp_path / "clean.parquet")
    r = CliRunner().invoke(main, ["filter", jury, "-o", out])
    assert r.exit_code == 0 and "wrote 8 of 8 pairs" in r.stderr
    # the jury store keeps the input's record: it compares with the judges it came from
    d = compare_json(jury, x)
    assert d["judges"][0]["accuracy"]["value"] == 1.0
    # a jury has verdicts but no rollouts: eval shows no rollout baselines (once 0.0% each)
    r = CliRunner().invoke(main, ["eval", jury, "--json", "--resamples", "100"])
    assert r.exit_code == 0, r.output
    keys = [sy["key"] for sy in json.loads(r.stdout)["systems"]]
    assert "final" in keys or "reflectrm" in keys
    assert "first" not in keys and "majority" not in keys, keys


def test_jury_of_two_that_disagree_is_a_tie_and_jsonl_and_export_inputs_work(tmp_path, judges):
    x = judges[0]
    yx = scripted(tmp_path, "y.parquet", judge_y)
    jury = str(tmp_path / "jury.jsonl")
    r = run(x, yx, "--jury", "-o", jury, "--resamples", "100")
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in Path(jury).read_text().splitlines()]
    assert len(rows) == 8
    # two judges: a winner needs both; X ties or says B, Y says A or ties: no majority
    assert {r["verdict"] for r in rows} == {"tie"}
    # per order: (A, B) X right, Y A -> A pairs A, B pairs tie; (B, A) X B, Y right
    for row, src in zip(rows, ROWS):
        assert row["verdict_ab"] == ("A" if src["label"] == "A" else "tie")
        assert row["verdict_ba"] == ("B" if src["label"] == "B" else "tie")
        assert row["consistent"] is None
    r = CliRunner().invoke(main, ["filter", jury, "-o", str(tmp_path / "none.parquet")])
    assert r.exit_code == 0 and "wrote 0 of 8 pairs" in r.stderr


def test_jury_output_rules(tmp_path, judges):
    x, y, z = judges
    r = run(x, y, "--jury", "-o", x)
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {x} is the judged table")
    mine = tmp_path / "notes.parquet"
    duckdb.connect().execute(f"COPY (SELECT 1 AS a) TO '{mine}' (FORMAT parquet)")
    before = mine.read_bytes()
    r = run(x, y, "--jury", "-o", str(mine))
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {mine} exists and was not written by `rmjudge compare`")
    assert mine.read_bytes() == before
    r = run(x, y, "--jury")
    assert r.exit_code == 1 and r.stderr == "Error: --jury needs -o JURY.duckdb (or .parquet, " \
        ".jsonl): the table to write\n"
    # a run store that is not a jury (here: a judge's own store) is never replaced
    before = Path(z).read_bytes()
    r = run(x, y, "--jury", "-o", z)
    assert r.exit_code == 1
    assert r.stderr == (f"Error: {z} exists and was not written by `rmjudge compare --jury` (a "
                        "jury store has a jury_judges entry in its settings); it is left "
                        "untouched: choose another -o\n")
    assert Path(z).read_bytes() == before


def test_compare_a_one_order_jsonl_export(tmp_path, judges):
    x = judges[0]
    out = str(tmp_path / "z_ab.jsonl")
    score(str(FIXTURE), ScriptedEngine(judge_z), JudgeSettings(samples=2, seed=0, orders="ab"),
          output=out)
    d = compare_json(x, out)
    # one order judged: the pair's accuracy is that order's
    assert [j["accuracy"]["value"] for j in d["judges"]] == pytest.approx([0.6875, 1.0])
    k = d["kappa"]["between_judges"][0]
    assert (k["value"], k["n"], k["left_out"]) == (pytest.approx(1.0), 8, 8)
    assert d["kappa"]["against_gold"][1]["n"] == 8
    jury = str(tmp_path / "jury.parquet")
    r = run(x, out, "--jury", "-o", jury, "--resamples", "100")
    assert r.exit_code == 0, r.output
    got = duckdb.connect().execute(f"SELECT verdict_ab, verdict_ba, p_a_ab, p_a_ba FROM "
                                   f"read_parquet('{jury}') ORDER BY row_number").fetchall()
    labels = [r["label"] for r in ROWS]
    assert [g[0] for g in got] == labels  # both judges right in (A, B)
    assert {g[1] for g in got} == {"tie"}  # X alone says B in (B, A): not more than half
    assert [g[2] for g in got] == pytest.approx([1.0 if lab == "A" else 0.0 for lab in labels])
    assert [g[3] for g in got] == pytest.approx([0.0] * 8)  # X's only


def test_tables_with_swapped_slots_are_aligned(tmp_path):
    """chosen/rejected input: the slot of the chosen response is drawn from the run's seed, so
    two runs with other seeds hold some pairs with A and B exchanged; they are the same input
    and are compared in the first table's slots."""
    from helpers import first_slot_response

    chosen = {r["prompt"]: r["response_a"] if r["label"] == "A" else r["response_b"]
              for r in ROWS}
    src = tmp_path / "cr.jsonl"
    src.write_text("".join(json.dumps({
        "id": r["id"], "prompt": r["prompt"], "chosen": chosen[r["prompt"]],
        "rejected": r["response_b"] if r["label"] == "A" else r["response_a"]}) + "\n"
        for r in ROWS))

    def right(req, i):
        row = _row(req)
        return pref(1 if first_slot_response(req) == chosen[row["prompt"]] else 2, -0.5, "r")

    def slot1_then_right(req, i):  # order (A, B): slot 1; order (B, A): right
        return pref(1, -0.5, "s") if req.share_key[1] == "ab" else right(req, i)

    outs = []
    for name, fn, seed in (("s0.duckdb", right, 0), ("s1.duckdb", right, 4),
                           ("y1.duckdb", slot1_then_right, 4)):
        outs.append(str(tmp_path / name))
        score(str(src), ScriptedEngine(fn), JudgeSettings(samples=2, seed=seed), output=outs[-1])
    labels = dict(rows(outs[0], "SELECT id, label FROM pairs"))
    swapped = {i for i, lab in rows(outs[1], "SELECT id, label FROM pairs") if lab != labels[i]}
    assert 0 < len(swapped) < 8  # the two seeds put some chosen responses in other slots
    d = compare_json(*outs)
    assert [j["swapped"] for j in d["judges"]] == [0, len(swapped), len(swapped)]
    assert [j["accuracy"]["value"] for j in d["judges"][:2]] == [1.0, 1.0]
    k = {(x["a"], x["b"]): x for x in d["kappa"]["between_judges"]}
    assert k[(1, 2)]["value"] == pytest.approx(1.0) and k[(1, 2)]["n"] == 16
    # y1 in s0's slots: where its slots are s0's, order (A, B) says A and (B, A) is right;
    # where they are swapped, its (A, B) order is s0's (B, A) order and the other way round:
    # s0's (A, B) is right and s0's (B, A) says B (y1's slot 1 is s0's B there)
    jury = str(tmp_path / "jury.parquet")
    r = run(*outs, "--jury", "-o", jury, "--resamples", "100")
    assert r.exit_code == 0, r.output
    got = duckdb.connect().execute(f"SELECT id, verdict, verdict_ab, verdict_ba, verdict_j2, "
                                f"verdict_j3, p_a_j2 FROM read_parquet('{jury}')").fetchall()
    for pid, verdict, vab, vba, v2, v3, pa2 in got:
        lab = labels[pid]
        assert (verdict, vab, vba, v2) == (lab, lab, lab, lab)
        assert pa2 == (1.0 if lab == "A" else 0.0)
        if pid in swapped:
            assert v3 == ("B" if lab == "B" else "tie")  # (A, B) right, (B, A) says B
        else:
            assert v3 == ("A" if lab == "A" else "tie")  # (A, B) says A, (B, A) right
    flips = {f["id"]: f for f in d["flips"]}
    assert set(flips) == {pid for pid, *_, v3, _ in got if v3 == "tie"}


def test_jury_output_being_written_is_refused_busy(tmp_path, judges):
    from rmjudge.analysis.jury import is_jury_store
    from rmjudge.files import store_path
    from rmjudge.store import Store

    x, y, _ = judges
    for out in (str(tmp_path / "busy.duckdb"), str(tmp_path / "busy.parquet")):
        with Store(store_path(out)):  # a run writing it holds its lock
            r = run(x, y, "--jury", "-o", out)
        assert r.exit_code == 3, r.output
        assert r.stderr.startswith("Error: another rmjudge process is writing")
        assert not Path(out).exists() if out.endswith(".parquet") else not is_jury_store(out)


def _import_labels(table: str, path: Path, labels: dict[str, str]) -> None:
    path.write_text("".join(json.dumps({"id": i, "human_label": lab, "reviewer": "ann"}) + "\n"
                            for i, lab in labels.items()))
    r = CliRunner().invoke(main, ["review", "import", table, str(path)])
    assert r.exit_code == 0, r.output


def test_rewriting_a_jury_store_keeps_its_human_labels(tmp_path, judges):
    """`review import` labels a jury store; running the same `compare --jury -o` again replaces
    the jury and keeps every label on its pair, with its reviewer and import time."""
    x, y, z = judges
    jury = str(tmp_path / "jury.duckdb")
    assert run(x, y, z, "--jury", "-o", jury, "--resamples", "10").exit_code == 0
    _import_labels(jury, tmp_path / "labels.jsonl", {"p1": "A", "p3": "tie", "p8": "B"})
    query = "SELECT pair_id, reviewer, label, source, imported FROM human_labels ORDER BY pair_id"
    before = rows(jury, query)
    assert len(before) == 3
    for tables in ((x, y, z), (z, y, x)):  # again, and with the judges in another order
        r = run(*tables, "--jury", "-o", jury, "--resamples", "10")
        assert r.exit_code == 0, r.output
        assert rows(jury, query) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_label_follows_its_response_when_the_new_jury_has_the_slots_exchanged(tmp_path):
    """chosen/rejected input judged with two seeds holds some pairs with A and B exchanged; a
    jury written first in one table's slots, then in the other's, keeps each label on the
    response it named."""
    from helpers import first_slot_response

    chosen = {r["prompt"]: r["response_a"] if r["label"] == "A" else r["response_b"]
              for r in ROWS}
    src = tmp_path / "cr.jsonl"
    src.write_text("".join(json.dumps({
        "id": r["id"], "prompt": r["prompt"], "chosen": chosen[r["prompt"]],
        "rejected": r["response_b"] if r["label"] == "A" else r["response_a"]}) + "\n"
        for r in ROWS))

    def right(req, i):
        return pref(1 if first_slot_response(req) == chosen[_row(req)["prompt"]] else 2, -0.5, "r")

    s0, s1 = str(tmp_path / "s0.duckdb"), str(tmp_path / "s1.duckdb")
    for out, seed in ((s0, 0), (s1, 4)):
        score(str(src), ScriptedEngine(right), JudgeSettings(samples=2, seed=seed), output=out)
    a0 = dict(rows(s0, "SELECT id, response_a FROM pairs"))
    kept = dict(rows(s1, "SELECT id, response_a FROM pairs"))
    swapped = sorted(i for i in a0 if a0[i] != kept[i])
    same = sorted(i for i in a0 if a0[i] == kept[i])
    assert swapped and same
    jury = str(tmp_path / "jury.duckdb")
    assert run(s0, s1, "--jury", "-o", jury, "--resamples", "10").exit_code == 0
    _import_labels(jury, tmp_path / "labels.jsonl",
                   {swapped[0]: "A", same[0]: "A", swapped[-1]: "tie"})
    r = run(s1, s0, "--jury", "-o", jury, "--resamples", "10")  # now in s1's slots
    assert r.exit_code == 0, r.output
    got = dict(rows(jury, "SELECT pair_id, label FROM human_labels"))
    assert got == {swapped[0]: "B", same[0]: "A", swapped[-1]: "tie"}
    # B in s1's slots is the response that was A in s0's: the label names the same response
    assert rows(jury, f"SELECT response_b FROM pairs WHERE id = '{swapped[0]}'")[0][0] == \
        a0[swapped[0]]


def test_a_jury_without_the_labelled_pairs_is_refused_and_the_labels_kept(tmp_path, judges):
    """Labels on pairs the new jury lacks would be lost: the rewrite is refused, the store is
    left byte for byte as it was."""
    x, _, z = judges
    jury = str(tmp_path / "jury.duckdb")
    assert run(x, z, "--jury", "-o", jury, "--resamples", "10").exit_code == 0
    _import_labels(jury, tmp_path / "labels.jsonl", {"p2": "B", "p7": "A"})
    few = scripted(tmp_path, "few.duckdb", judge_z, limit=4)  # p1..p4 only
    before = Path(jury).read_bytes()
    r = run(x, few, "--jury", "-o", jury, "--resamples", "10")
    assert r.exit_code == 1
    assert r.stderr == (f"Error: {jury} holds human labels (rmjudge review import) on 1 pair "
                        "that this jury does not have with the same responses (e.g. 'p7'), and "
                        f"writing it there would drop them; {jury} is left as it was: write "
                        f"this jury to another -o, or move {jury} away first\n")
    assert Path(jury).read_bytes() == before
    assert rows(jury, "SELECT pair_id, label FROM human_labels ORDER BY 1") == \
        [("p2", "B"), ("p7", "A")]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# -- pairs matched by id and checked by content, in any order ---------------------------------

def test_tables_of_the_same_pairs_in_another_order_are_compared(tmp_path, judges):
    """The input's first row no longer decides: the same pairs written in reverse order (so
    another first row) are the same input, pair by pair."""
    x, _, z = judges
    src = tmp_path / "reversed.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in reversed(ROWS)))
    rev = scripted(tmp_path, "rev.duckdb", judge_z, source=str(src))
    d = compare_json(x, rev, "--resamples", "100")
    assert d["common_pairs"] == 8 and d["judges"][1]["changed"] == 0
    assert d["judges"][1]["accuracy"]["value"] == pytest.approx(1.0)
    assert d["judges"][1]["accuracy"] == \
        compare_json(x, z, "--resamples", "100")["judges"][1]["accuracy"]


def test_an_edited_pair_is_reported_and_left_out_not_compared(tmp_path, judges):
    x = judges[0]
    edited = [dict(r) for r in ROWS]
    edited[2]["response_b"] = "tca (edited)"  # p3
    edited[5]["messages"] = [{"role": "system", "content": "Be terse."},
                             {"role": "user", "content": edited[5].pop("prompt")}]  # p6
    src = tmp_path / "edited.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in edited))
    other = scripted(tmp_path, "edited.duckdb", judge_z, source=str(src))
    d = compare_json(x, other, "--resamples", "100")
    assert d["common_pairs"] == 6
    assert (d["judges"][1]["changed"], d["judges"][1]["changed_ids"]) == (2, ["p3", "p6"])
    assert d["judges"][0]["not_in_all"] == 0 and d["judges"][1]["not_in_all"] == 0
    r = run(x, other, "--resamples", "100")
    assert (f"{other}: 2 pairs hold other content than in {x} (edited since; left out), "
            "e.g. 'p3', 'p6'") in r.stdout
    jury = str(tmp_path / "jury.parquet")
    r = run(x, other, "--jury", "-o", jury)
    assert r.exit_code == 0, r.output
    with duckdb.connect() as con:
        ids = con.execute("SELECT id FROM read_parquet(?) ORDER BY id", [jury]).fetchall()
    assert [i for (i,) in ids] == ["p1", "p2", "p4", "p5", "p7", "p8"]


def test_compare_reports_each_tables_hub_commit(tmp_path, judges):
    from rmjudge.store import Store

    x = judges[0]
    outs = []
    for name, commit in (("c1.duckdb", "a" * 40), ("c2.duckdb", "b" * 40)):
        out = scripted(tmp_path, name, judge_z)
        with Store(out) as s:
            s.set_meta("input", dict(s.meta("input"), source="hf://datasets/org/pairs",
                                     revision="main", commit=commit))
        outs.append(out)
    d = compare_json(*outs)
    assert [j["input"] for j in d["judges"]] == [
        {"source": "hf://datasets/org/pairs", "revision": "main", "commit": c}
        for c in ("a" * 40, "b" * 40)]
    assert "judged from different commits of the input" in d["note"]
    assert d["common_pairs"] == 8
    assert compare_json(x, outs[0])["judges"][1]["input"]["commit"] == "a" * 40
