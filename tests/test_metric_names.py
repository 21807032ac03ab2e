"""One set of metric names everywhere (core/counts.py): the score summary, `report` (text and
HTML), `eval`, the dataset card and `filter --evidence` show the same names and the same values
on one small store judged by the scripted engine, checked against figures worked out by hand.

The store (both orders, one rollout per order, forced verdicts chosen with --forced; in the
prompt's numbering slot 1 is A in order (A, B) and B in order (B, A)):

| pair | label | (A, B)                           | (B, A)                         | verdict |
|------|-------|----------------------------------|--------------------------------|---------|
| p1   | A     | 1 -> A                           | 2 -> A                         | A       |
| p2   | A     | 1 -> A                           | 1 -> B                         | tie     |
| p3   | B     | 1 -> A                           | 2 -> A                         | A       |
| p4   | A     | no verdict, cut; forced 1 -> A   | 2 -> A                         | A       |
| p5   | B     | verdict 2 but cut: no part       | no verdict, cut; forced 1 -> B | B       |
| p6   | A     | verdict 1 but cut                | verdict 2 but cut              | error   |

- accuracy (both orders pooled): p1 1, p2 0.5, p3 0, p4 1, p5 0.5, p6 0 -> 3 / 6 = 50.0%
- positional consistency: p1, p4 of 6 judged in both orders -> 33.3%
- order agreement (the same winner in both orders, right or wrong; no gold label needed): p1,
  p3, p4 of the 4 pairs with a verdict in both orders (p5 and p6 have none in (A, B)) -> 75.0%
- combined-verdict agreement: agree p1 p4 p5 = 50.0%, tie p2 = 16.7%, disagree p3 = 16.7%,
  no verdict p6 = 16.7%; accuracy (ties = 0.5): (3 + 0.5) / 6 = 58.3%
- rollouts 12: cut at the token limit 5 (p4, p5 x2, p6 x2), unparsed 2 (p4 (A,B), p5 (B,A)),
  forced verdicts 2, deciding 2 pair-orders
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from helpers import pref, unparsed

from rmjudge.cli import main
from rmjudge.runs.summaries import render_summary
from rmjudge.engine.fake import ScriptedEngine
from rmjudge.runs.pipeline import score
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import Generation

LABELS = {"p1": "A", "p2": "A", "p3": "B", "p4": "A", "p5": "B", "p6": "A"}


def cut(pred: int) -> Generation:
    g = pref(pred)
    return Generation(g.text, g.token_logprobs, "length")


SCRIPT = {("p1", "ab"): pref(1), ("p1", "ba"): pref(2),
          ("p2", "ab"): pref(1), ("p2", "ba"): pref(1),
          ("p3", "ab"): pref(1), ("p3", "ba"): pref(2),
          ("p4", "ab"): unparsed(), ("p4", "ba"): pref(2),
          ("p5", "ab"): cut(2), ("p5", "ba"): unparsed(),
          ("p6", "ab"): cut(1), ("p6", "ba"): cut(2)}

WANT = ["accuracy 50.0% on 6 labelled pairs (both orders pooled); positional consistency 33.3% "
        "(correct in both orders)",
        "combined-verdict agreement: agree 50.0%, tie 16.7%, disagree 16.7%, no verdict 16.7%; "
        "accuracy (ties = 0.5) 58.3%",
        "rollouts 12: cut at the token limit 5, unparsed 2, forced verdicts 2 (deciding 2 "
        "pair-orders where no rollout parsed)"]
ORDER_AGREEMENT = ("order agreement 75.0% (3 of 4 pairs with a verdict in both orders name the "
                   "same winner, right or wrong)")
WIDE = {"COLUMNS": "1000"}  # lines as they are, unwrapped (tests/test_output_width.py: 80)


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    src = d / "pairs.jsonl"
    src.write_text("".join(json.dumps({"id": p, "prompt": f"question {p}", "response_a": "a",
                                       "response_b": "b", "label": lab}) + "\n"
                           for p, lab in LABELS.items()))
    eng = ScriptedEngine(lambda req, i: SCRIPT[req.share_key[:2]],
                         force=lambda req, i, text: (0.7, 0.3))
    out = str(d / "judged.duckdb")
    summary = score(str(src), eng, JudgeSettings(samples=1, forced=True), output=out)
    return out, summary, d


def test_the_store_is_as_worked_out_by_hand(judged):
    from helpers import rows
    from recompute import recompute_all

    out, _, _ = judged
    assert dict(rows(out, "SELECT id, verdict FROM pairs")) == {
        "p1": "A", "p2": "tie", "p3": "A", "p4": "A", "p5": "B", "p6": "error"}
    assert recompute_all(out) == 6


def test_score_summary(judged):
    _, summary, _ = judged
    text = render_summary(summary, width=1000)
    for line in WANT + [ORDER_AGREEMENT]:
        assert f"  {line}\n" in text + "\n"
    assert "forced verdicts: on (--forced)" in text


def test_score_summary_fits_80_columns_without_splitting_a_word(judged):
    """At 80 columns every line fits and only whole words move to the next line: the words
    are those of the unwrapped summary, in order, with the output path whole."""
    _, summary, _ = judged
    narrow, wide = render_summary(summary, width=80), render_summary(summary, width=1000)
    assert all(len(line) <= 80 for line in narrow.splitlines()), narrow
    assert narrow.split() == wide.split()
    assert len(narrow.splitlines()) > len(wide.splitlines())
    lines = narrow.splitlines()
    assert lines[0].startswith("rmjudge: read 6 rows: judged 6")
    assert any(summary.files[0] in line for line in lines[1:3]), narrow


def test_report_text_and_html(judged):
    out, _, d = judged
    html_path = d / "r.html"
    r = CliRunner().invoke(main, ["report", out, "-o", str(html_path)], env=WIDE)
    assert r.exit_code == 0, r.output
    for line in WANT:
        assert line in r.output
    assert "order agreement 75.0% (the two orders name the same winner)" in r.output
    page = html_path.read_text()
    for name, value in (("accuracy", "50.0%"), ("positional consistency", "33.3%"),
                        ("accuracy (ties = 0.5)", "58.3%"), ("order agreement", "75.0%")):
        assert f"<div><b>{value}</b><span>{name}</span></div>" in page
    assert ("combined-verdict agreement: agree 50.0%, tie 16.7%, disagree 16.7%, no verdict "
            "16.7%") in page
    assert WANT[2][0].upper() + WANT[2][1:] in page


def test_eval_output(judged):
    out, _, _ = judged
    r = CliRunner().invoke(main, ["eval", out, "--resamples", "0"], env=WIDE)
    assert r.exit_code == 0, r.output
    assert "Accuracy, % (both orders pooled" in r.output
    table = r.output.split("Accuracy, % (both orders pooled", 1)[1].split("\n\n", 1)[0]
    # one rollout per order: the first-rollout and majority baselines follow the protocol's
    # rule (cut rollouts take no part, forced verdicts only where none parsed) and coincide
    for system in ("first rollout (T=1)", "majority vote of rollouts", "ReflectRM two-stage"):
        line = next(x for x in table.splitlines() if x.startswith(system))
        assert line.split()[-1] == "50.0", line
    assert "Positional consistency, % (correct in both orders)" in r.output
    assert "agree 50.0 [-, -], tie 16.7 [-, -], disagree 16.7 [-, -]" in r.output
    assert "accuracy (ties = 0.5) 58.3 [-, -]" in r.output
    assert WANT[2] in r.output
    data = json.loads(CliRunner().invoke(main, ["eval", out, "--resamples", "0", "--json"]).output)
    final = next(s for s in data["systems"] if s["key"] == "final")["metrics"]["overall"]
    assert final["agree"]["value"] == pytest.approx(0.5)
    assert final["ties_half"]["value"] == pytest.approx(3.5 / 6)
    assert data["rollout_counts"]["truncated"] == 5


def test_filter_evidence_and_card(judged):
    out, _, d = judged
    folder = d / "upload"
    r = CliRunner().invoke(main, ["filter", out, "-o", str(d / "dpo.jsonl"), "--evidence",
                                  "--push-to-hub", "me/names", "--dry-run", str(folder)],
                           env=WIDE)
    assert r.exit_code == 0, r.output
    for line in WANT:
        assert f"    {line}" in r.output
    # the evidence fields of the written rows (p1 and p4: both orders agree with the label)
    rows_ = [json.loads(x) for x in (d / "dpo.jsonl").read_text().splitlines()]
    assert [(x["judge_vote_share"], x["judge_consistent"], x["judge_verdict_ab"],
             x["judge_verdict_ba"]) for x in rows_] == [(1.0, True, "chosen", "chosen")] * 2
    card = (folder / "README.md").read_text()  # figures with 95% bootstrap intervals
    assert "| accuracy (both orders pooled, the paper's) | 50.0 [" in card
    assert "| positional consistency (right in both orders, the paper's) | 33.3 [" in card
    assert "| combined-verdict agreement: agree | 50.0 [" in card
    assert "| combined-verdict agreement: tie | 16.7 [" in card
    assert "| combined-verdict agreement: disagree | 16.7 [" in card
    assert "| accuracy (ties = 0.5), comparable with reward-bench | 58.3 [" in card
    assert f"Judge rollouts: {WANT[2]}." in card
    assert "order agreement, not the positional consistency metric" in card


def test_accuracy_alone_names_only_the_pooled_figure(judged):
    """Every "accuracy" not qualified by an order or "(ties = 0.5)" is followed by the pooled
    figure (50.0) on each text surface."""
    out, summary, d = judged
    texts = [render_summary(summary),
             CliRunner().invoke(main, ["report", out]).output,
             CliRunner().invoke(main, ["filter", out, "-o", str(d / "f2.jsonl"),
                                       "--evidence"]).output]
    for text in texts:
        found = list(re.finditer(r"\baccuracy (?!\(ties)(?!in order)(\S+)", text))
        assert found, text
        for m in found:
            assert m.group(1) == "50.0%", (m.group(0), text)


def test_the_rollout_line_counts_the_unanimous_pair_orders(tmp_path):
    """Order (A, B): three rollouts all for 1, so self-reflection is skipped (the unanimity
    shortcut); order (B, A): they disagree, so the two others are reflected against the anchor.
    The rollout line names the one unanimous pair-order, as the store shows it."""
    from helpers import refl, rows

    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps({"id": "q", "prompt": "?", "chosen": "a", "rejected": "b"}) + "\n")

    def script(req, i):
        if req.share_key[2] != "rollout":
            return refl(1)
        return pref(1) if req.share_key[1] == "ab" else pref(1 + i % 2)

    out = str(tmp_path / "o.duckdb")
    summary = score(str(src), ScriptedEngine(script), JudgeSettings(samples=3), output=out)
    assert rows(out, """SELECT "order", count(*) FILTER (stage = 'reflection') FROM samples
                        GROUP BY ALL ORDER BY ALL""") == [("ab", 0), ("ba", 2)]
    line = next(x for x in render_summary(summary).splitlines() if "rollouts" in x)
    text = " ".join(render_summary(summary).split())
    assert "rollouts 6: cut at the token limit 0, unparsed 0, forced verdicts 0; reflections 2: " \
           "unparsed 0, cut 0; 1 pair-order unanimous (no reflection needed)" in text, line


def test_one_name_per_measure_on_every_surface(judged):
    """"positional consistency" always comes with what it is (correct in both orders) and is
    never the name of the orders agreeing; the orders agreeing is "order agreement" (and its
    complement, a pair whose orders disagree, a "flip"), in the summary, report, explorer and
    the docs alike."""
    from pathlib import Path

    out, summary, d = judged
    texts = {"score": render_summary(summary, width=1000),
             "report": CliRunner().invoke(main, ["report", out], env=WIDE).output,
             "eval": CliRunner().invoke(main, ["eval", out, "--resamples", "0"], env=WIDE).output,
             "filter": CliRunner().invoke(main, ["filter", out, "-o", str(d / "f3.jsonl"),
                                                 "--evidence"], env=WIDE).output}
    for surface, text in texts.items():
        assert "orders agree on" not in text and "orders flip" not in text, surface
        for m in re.finditer(r"positional consistency", text, flags=re.I):
            after = text[m.end():m.end() + 40]
            assert "(correct in both orders)" in after, (surface, after)
    for surface in ("score", "report"):
        assert "order agreement 75.0%" in texts[surface], surface
    root = Path(__file__).resolve().parent.parent
    view = (root / "rmjudge" / "view" / "assets" / "view.js").read_text()
    assert '"flips (orders disagree)"' in view and "positional" not in view
    docs = {p.name: p.read_text() for p in (root / "docs").glob("*.md")}
    for name, text in docs.items():
        assert "positional inconsistency" not in text, name
        assert not re.search(r"positional consistency \((?:the )?orders agree", text), name
    assert "**order agreement**" in docs["evaluation.md"]
