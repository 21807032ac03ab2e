"""`rmjudge review export/import`, judge-vs-human agreement in `eval` and `compare`, and
`filter --prefer human`, on a judged table built without a model.

The table is `analysis_fixture.build` (labels A A B A | B B A A for p1..p8): order (A, B)
always names the gold label, order (B, A) always B. So p1, p2, p4, p7, p8 flip (A then B,
combined verdict tie, vote share for A 0.5); p3, p5, p6 are B in both orders (share 0).

The reviewer of the CSV round trip labels p1 A, p2 A, p3 B, p4 B, p5 B, p6 tie, p8 A and
leaves p7 empty. Hand-computed (items: human, verdict, (A,B), (B,A), gold):
- accuracy vs human, both orders pooled, on the six A/B pairs: p1 .5, p2 .5, p3 1, p4 .5,
  p5 1, p8 .5 -> 4/6;
- combined verdict agreement, seven pairs: only p3 and p5 (B = B) -> 2/7;
- kappa per order: 12 items, 8 agree; judge A 4 / B 8, human A 6 / B 6: p_e = 1/2,
  kappa = (8/12 - 1/2) / (1/2) = 1/3;
- kappa of the combined verdict: judge tie 4 / B 3, human A 3 / B 3 / tie 1, 2 of 7 agree:
  p_e = (4 * 1 + 3 * 3) / 49 = 13/49, kappa = (14 - 13) / 36 = 1/36;
- the human agrees with gold on five of the six A/B pairs (p4: human B, gold A).
"""

from __future__ import annotations

import csv
import json
import os

import pytest
from analysis_fixture import ROWS, build
from click.testing import CliRunner
from helpers import rows

from rmjudge.cli import main

FLIPPED = ["p1", "p2", "p4", "p7", "p8"]
REVIEW = {"p1": "A", "p2": "A", "p3": "B", "p4": "B", "p5": "B", "p6": "tie", "p8": "A"}
BY_ID = {r["id"]: r for r in ROWS}


def cli(*args):
    """A command at 1,000 columns: these tests read whole lines (at 80 columns they wrap:
    tests/test_output_width.py)."""
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "1000"})


@pytest.fixture
def table(tmp_path):
    return build(tmp_path)


def export(table, out, *args):
    r = cli("review", "export", table, "-o", str(out), *args)
    assert r.exit_code == 0, r.output
    return r


def human_rows(db):
    return sorted(rows(db, "SELECT pair_id, reviewer, label FROM human_labels"))


def eval_human(table):
    r = cli("eval", table, "--json", "--resamples", "200")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["human"]


def check_hand_computed(h):
    assert h["pairs"] == 7 and h["human"] == {"A": 3, "B": 3, "tie": 1}
    assert h["accuracy"]["value"] == pytest.approx(4 / 6) and h["accuracy"]["n"] == 6
    assert h["accuracy"]["lo"] <= 4 / 6 <= h["accuracy"]["hi"]
    assert h["agreement"]["value"] == pytest.approx(2 / 7) and h["agreement"]["n"] == 7
    assert h["kappa_orders"]["value"] == pytest.approx(1 / 3) and h["kappa_orders"]["n"] == 12
    assert h["kappa_verdict"]["value"] == pytest.approx(1 / 36)
    assert h["human_vs_gold"]["value"] == pytest.approx(5 / 6)
    assert h["gold_accuracy"]["value"] == pytest.approx(4 / 6)


def test_selections(table, tmp_path):
    export(table, tmp_path / "f", "--select", "flipped", "--format", "jsonl")
    got = [json.loads(x) for x in (tmp_path / "f" / "review.jsonl").read_text().splitlines()]
    assert [g["id"] for g in got] == FLIPPED
    g = got[0]
    assert (g["judge_verdict"], g["judge_verdict_ab"], g["judge_verdict_ba"], g["gold_label"],
            g["human_label"]) == ("tie", "A", "B", "A", None)
    assert g["judge_vote_share_a"] == pytest.approx(0.5)
    assert g["anchor_ab"] == "A" and g["anchor_ba"] == "B"  # the anchor analysis, in A/B terms
    assert g["rollout_votes_ba"] == "A 0 / B 4 of 4"
    assert g["response_a"] == BY_ID["p1"]["response_a"] and "What is 2+2?" in g["conversation"]

    export(table, tmp_path / "g", "--select", "disagree-with-gold", "--select",
           "low-confidence", "--threshold", "0.05", "--format", "jsonl")
    got = [json.loads(x) for x in (tmp_path / "g" / "review.jsonl").read_text().splitlines()]
    assert [g["id"] for g in got] == FLIPPED
    assert {g["selected_by"] for g in got} == {"disagree-with-gold,low-confidence"}

    export(table, tmp_path / "r", "--select", "random:3", "--seed", "7", "--format", "jsonl")
    export(table, tmp_path / "r2", "--select", "random:3", "--seed", "7", "--format", "jsonl")
    a, b = ((tmp_path / d / "review.jsonl").read_text() for d in ("r", "r2"))
    assert a == b and len(a.splitlines()) == 3

    r = cli("review", "export", table, "-o", str(tmp_path / "j"), "--select", "jury-split")
    assert r.exit_code == 1 and "is not a jury table" in r.stderr and "--jury" in r.stderr
    r = cli("review", "export", table, "-o", str(tmp_path / "k"), "--select", "sometimes")
    assert r.exit_code == 1 and r.stderr.startswith("Error: --select sometimes")
    r = cli("review", "export", table, "-o", str(tmp_path / "k"), "--select", "low-confidence",
            "--threshold", "0.7")
    assert r.exit_code == 1 and r.stderr.startswith("Error: --threshold 0.7")
    assert not (tmp_path / "k").exists()
    # a selection's own option without its selection would be ignored: one error instead
    for args, named in ((["--select", "flipped", "--threshold", "0.2"], "--threshold applies "
                         "only to --select low-confidence"),
                        (["--select", "low-confidence", "--seed", "3"], "--seed applies only "
                         "to --select random:N")):
        r = cli("review", "export", table, "-o", str(tmp_path / "k"), *args)
        assert r.exit_code == 1 and r.stderr.startswith(f"Error: {named}"), r.stderr
        assert r.stderr.count("\n") == 1 and not (tmp_path / "k").exists()


def test_csv_saved_by_a_spreadsheet_with_a_byte_order_mark(table, tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffid,human_label\r\np1,B\r\np2,Tie\r\n".encode())
    r = cli("review", "import", table, str(path))
    assert r.exit_code == 0, r.output
    assert human_rows(table) == [("p1", "", "B"), ("p2", "", "tie")]


def test_push_argilla_without_the_client_is_one_error_line(table, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "argilla", None)  # not installed
    r = cli("review", "export", table, "-o", str(tmp_path / "rev"), "--select", "flipped",
            "--push-argilla", "doubtful")
    assert r.exit_code == 1 and r.stderr.startswith("Error: --push-argilla needs the argilla")
    assert "pip install argilla" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "rev").exists()  # checked before any work
    monkeypatch.delitem(sys.modules, "argilla")
    monkeypatch.setitem(sys.modules, "argilla", type(sys)("argilla"))  # installed, no server
    monkeypatch.delenv("ARGILLA_API_URL", raising=False)
    r = cli("review", "export", table, "-o", str(tmp_path / "rev"), "--select", "flipped",
            "--push-argilla", "doubtful")
    assert r.exit_code == 1 and "ARGILLA_API_URL" in r.stderr


def test_export_never_replaces_a_review_file(table, tmp_path):
    out = tmp_path / "rev"
    export(table, out, "--select", "flipped")
    (out / "review.csv").write_text("id,human_label\np1,A\n")
    r = cli("review", "export", table, "-o", str(out), "--select", "flipped")
    assert r.exit_code == 1 and "review.csv exists" in r.stderr
    assert (out / "review.csv").read_text() == "id,human_label\np1,A\n"


def test_csv_round_trip_and_eval(table, tmp_path):
    out = tmp_path / "rev"
    export(table, out, "--select", "flipped", "--select", "random:100", "--format", "csv")
    path = out / "review.csv"
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, got = reader.fieldnames, list(reader)
    assert fields[:2] == ["id", "human_label"] and len(got) == 8
    for row in got:  # the reviewer fills the column, as in a spreadsheet
        row["human_label"] = REVIEW.get(row["id"], "")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(got)

    r = cli("review", "import", table, str(path), "--reviewer", "ann")
    assert r.exit_code == 0, r.output
    assert "imported 7 labels (A 3, B 3, tie 1)" in r.stderr
    assert "1 row/task has no label yet" in r.stderr
    assert human_rows(table) == sorted((k, "ann", v) for k, v in REVIEW.items())
    check_hand_computed(eval_human(table))
    text = cli("eval", table, "--resamples", "200").stdout
    assert "Judge vs human labels: 7 pairs reviewed (A 3, B 3, tie 1) by 1 reviewer(s)" in text
    assert "accuracy vs human, both orders pooled: 66.7 [" in text
    assert "per order 0.333 (12 orders)" in text

    # importing again is idempotent: the same pair and reviewer are replaced, not added
    r = cli("review", "import", table, str(path), "--reviewer", "ann")
    assert r.exit_code == 0 and "7 replaced a label stored earlier" in r.stderr
    assert human_rows(table) == sorted((k, "ann", v) for k, v in REVIEW.items())


def labelstudio_export(tasks: list[dict]) -> list[dict]:
    """Label Studio's JSON export of the imported tasks, as it lays it out."""
    out = []
    for n, t in enumerate(tasks, 1):
        pid = t["data"]["pair_id"]
        anns = []
        if pid in REVIEW:
            choice = {"A": "Response 1", "B": "Response 2", "tie": "Tie"}[REVIEW[pid]]
            anns.append({
                "id": 100 + n, "completed_by": 3, "was_cancelled": False, "ground_truth": False,
                "created_at": "2026-11-30T10:00:00.000000Z", "updated_at": "2026-11-30T10:00:05Z",
                "lead_time": 4.2, "task": n, "project": 1, "prediction": {},
                "result": [{"id": f"r{n}", "type": "choices", "origin": "manual",
                            "from_name": "preference", "to_name": "conversation",
                            "value": {"choices": [choice]}}]})
            if pid == "p1":  # a second annotator cancelled: not a label
                anns.append({"id": 900, "completed_by": 4, "was_cancelled": True, "result": [],
                             "task": n})
        out.append({"id": n, "annotations": anns, "drafts": [], "predictions": [],
                    "data": t["data"], "meta": {}, "created_at": "2026-11-30T09:00:00Z",
                    "updated_at": "2026-11-30T10:00:05Z", "inner_id": n, "total_annotations":
                    len(anns), "cancelled_annotations": 0, "total_predictions": 0,
                    "comment_count": 0, "project": 1, "updated_by": None,
                    "file_upload": "tasks.json", "comment_authors": []})
    return out


def test_labelstudio_round_trip(table, tmp_path):
    out = tmp_path / "rev"
    export(table, out, "--select", "random:8", "--format", "labelstudio")
    config = (out / "labelstudio" / "config.xml").read_text()
    assert '<Choices name="preference" toName="conversation"' in config
    assert 'value="$response_1"' in config and 'value="$response_2"' in config
    tasks = json.loads((out / "labelstudio" / "tasks.json").read_text())
    t1 = next(t for t in tasks if t["data"]["pair_id"] == "p4")
    assert t1["data"]["response_1"] == BY_ID["p4"]["response_a"]  # Response 1 is slot A
    exported = tmp_path / "project-1-at-2026-11-30.json"
    exported.write_text(json.dumps(labelstudio_export(tasks)))
    r = cli("review", "import", table, str(exported))
    assert r.exit_code == 0, r.output
    assert human_rows(table) == sorted((k, "3", v) for k, v in REVIEW.items())
    check_hand_computed(eval_human(table))


def test_labelstudio_pairwise_and_min_exports(table, tmp_path):
    """A Pairwise control's left/right, and the JSON-MIN export, read back too."""
    export(table, tmp_path / "rev", "--select", "flipped", "--format", "labelstudio")
    tasks = json.loads((tmp_path / "rev" / "labelstudio" / "tasks.json").read_text())
    full = [{"id": 1, "data": tasks[0]["data"], "annotations": [{"id": 1, "completed_by": 2,
             "result": [{"type": "pairwise", "from_name": "pw", "to_name": ["r1", "r2"],
                         "value": {"selected": "right"}}]}]}]
    (tmp_path / "pw.json").write_text(json.dumps(full))
    assert cli("review", "import", table, str(tmp_path / "pw.json")).exit_code == 0
    mini = [{"id": 2, "pair_id": "p2", "slot_key": tasks[1]["data"]["slot_key"],
             "preference": "Tie", "annotator": 5, "annotation_id": 7, "lead_time": 3.1}]
    (tmp_path / "min.json").write_text(json.dumps(mini))
    assert cli("review", "import", table, str(tmp_path / "min.json")).exit_code == 0
    assert human_rows(table) == [("p1", "2", "B"), ("p2", "5", "tie")]


def test_argilla_round_trip(table, tmp_path):
    out = tmp_path / "rev"
    export(table, out, "--select", "random:8", "--format", "argilla")
    folder = out / "argilla"
    settings = json.loads((folder / ".argilla" / "settings.json").read_text())
    q = settings["questions"][0]
    assert q["name"] == "preference" and q["settings"]["type"] == "label_selection"
    assert [o["value"] for o in q["settings"]["options"]] == ["response_1", "response_2", "tie"]
    assert {f["name"] for f in settings["fields"]} == {"conversation", "response_1", "response_2"}
    records = json.loads((folder / "records.json").read_text())
    user = "8d3c2e1a-0000-4000-8000-000000000001"
    value = {"A": "response_1", "B": "response_2", "tie": "tie"}
    for rec in records:  # the reviewer's answers, as Dataset.to_disk writes them
        pid = rec["id"]
        assert rec["fields"]["response_1"] == BY_ID[pid]["response_a"]
        rec["_server_id"] = f"0000-{pid}"
        rec["responses"] = ({"preference": [{"value": value[REVIEW[pid]], "user_id": user}]}
                            if pid in REVIEW else {})
    os.chmod(folder / "records.json", 0o644)
    (folder / "records.json").write_text(json.dumps(records))
    r = cli("review", "import", table, str(folder))
    assert r.exit_code == 0, r.output
    assert human_rows(table) == sorted((k, user, v) for k, v in REVIEW.items())
    check_hand_computed(eval_human(table))

    # flattened records (records.to_list(flatten=True) / to_datasets), one per line; a draft
    # answer is not a label
    flat = tmp_path / "flat.jsonl"
    flat.write_text("".join(json.dumps({
        "id": rec["id"], "conversation": "...", "pair_id": rec["id"],
        "slot_key": rec["metadata"]["slot_key"],
        "preference.responses": ["response_2", "response_1"],
        "preference.responses.users": ["u1", "u2"],
        "preference.responses.status": ["submitted", "draft"]}) + "\n" for rec in records[:2]))
    r = cli("review", "import", table, str(flat))
    assert r.exit_code == 0, r.output
    got = [x for x in human_rows(table) if x[1] in ("u1", "u2")]
    assert got == [(records[0]["id"], "u1", "B"), (records[1]["id"], "u1", "B")]


def test_malformed_rows_and_unknown_ids_are_reported(table, tmp_path):
    export(table, tmp_path / "rev", "--select", "flipped")
    path = tmp_path / "edited.csv"
    path.write_text("id,human_label,reviewer\n"
                    "p1,A,\n"
                    "p2,maybe,\n"
                    ",B,\n"
                    "p4,B,x,extra\n"
                    "nope,A,\n"
                    "p8, b ,\n")
    r = cli("review", "import", table, str(path))
    assert r.exit_code == 0, r.output
    assert "imported 2 labels (A 1, B 1, tie 0)" in r.stderr
    assert "warning: 1 label names a pair id that is not in" in r.stderr and "'nope'" in r.stderr
    assert "warning: 3 rows could not be read" in r.stderr
    assert "line 3: pair 'p2': human_label 'maybe' is not A, B or tie" in r.stderr
    assert "line 4: no pair id" in r.stderr and "line 5: 1 more cells" in r.stderr
    assert human_rows(table) == [("p1", "", "A"), ("p8", "", "B")]

    for name, body, why in (
            ("bad.json", "{not json", "is not valid JSON"),
            ("empty.csv", "id,human_label\np1,\n", "1 row has no label yet"),
            ("other.csv", "a,b\n1,2\n", "no `id` and `human_label` columns"),
            ("only_unknown.jsonl", '{"id": "zz", "human_label": "A"}\n', "not in"),
            ("labels.txt", "p1 A\n", "cannot tell the format")):
        (tmp_path / name).write_text(body)
        r = cli("review", "import", table, str(tmp_path / name))
        assert r.exit_code == 1, (name, r.output)
        assert r.stderr.startswith("Error: ") and why in r.stderr, (name, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    r = cli("review", "import", str(tmp_path / "none.duckdb"), str(path))
    assert r.exit_code == 1 and "no run store at" in r.stderr


def test_a_csv_row_with_fewer_cells_than_the_header_is_an_error_row(table, tmp_path):
    """A row cut short lost its slot_key cell, and its label was imported without the check
    that its responses are the exported ones, in the same slots: it is reported, not imported."""
    path = tmp_path / "short.csv"
    path.write_text("id,human_label,slot_key\n"
                    "p1,A\n"  # the slot_key cell is missing
                    "p8,B,\n")  # present, left empty: no check asked for
    r = cli("review", "import", table, str(path))
    assert r.exit_code == 0, r.output
    assert "imported 1 label (A 0, B 1, tie 0)" in r.stderr
    assert "warning: 1 row could not be read" in r.stderr
    assert "line 2: 1 fewer cells than the header has columns" in r.stderr
    assert human_rows(table) == [("p8", "", "B")]


def test_labels_follow_the_responses_when_slots_are_exchanged(tmp_path):
    """chosen/rejected input judged with two seeds holds some pairs with A and B exchanged:
    labels exported from one store land on the same responses in the other."""
    from helpers import pref

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score
    from rmjudge.core.settings import JudgeSettings

    src = tmp_path / "cr.jsonl"
    src.write_text("".join(json.dumps({
        "id": r["id"], "prompt": r["prompt"], "chosen": r["response_a"],
        "rejected": r["response_b"]}) + "\n" for r in ROWS))
    outs = []
    for seed in (0, 4):
        outs.append(str(tmp_path / f"s{seed}.duckdb"))
        score(str(src), ScriptedEngine(lambda req, i: pref(1)), JudgeSettings(samples=2, seed=seed),
              output=outs[-1])
    a0 = dict(rows(outs[0], "SELECT id, response_a FROM pairs"))
    a4 = dict(rows(outs[1], "SELECT id, response_a FROM pairs"))
    swapped = {i for i in a0 if a0[i] != a4[i]}
    assert 0 < len(swapped) < 8
    export(outs[0], tmp_path / "rev", "--select", "random:8", "--format", "jsonl")
    lines = [json.loads(x) for x in (tmp_path / "rev" / "review.jsonl").read_text().splitlines()]
    for x in lines:  # the reviewer always prefers the original response_a (the chosen one)
        x["human_label"] = "A" if x["response_a"] == BY_ID[x["id"]]["response_a"] else "B"
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = cli("review", "import", outs[1], str(tmp_path / "l.jsonl"))
    assert r.exit_code == 0, r.output
    assert f"{len(swapped)} were exported from a table with A and B exchanged" in r.stderr
    for pid, lab in rows(outs[1], "SELECT pair_id, label FROM human_labels"):
        assert lab == ("A" if a4[pid] == BY_ID[pid]["response_a"] else "B")

    # responses that are not the exported ones are a row error, not a guess
    lines[0]["slot_key"] = "000000000000:000000000000"
    (tmp_path / "m.jsonl").write_text(json.dumps(lines[0]) + "\n")
    r = cli("review", "import", outs[1], str(tmp_path / "m.jsonl"))
    assert r.exit_code == 1 and "slot_key differs" in r.stderr


def test_filter_prefer_human(table, tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps({"id": k, "human_label": v}) + "\n"
                            for k, v in REVIEW.items()))
    out = str(tmp_path / "h.dpo.jsonl")
    r = cli("filter", table, "-o", out, "--prefer", "human")
    assert r.exit_code == 1 and "no human labels" in r.stderr
    assert cli("review", "import", table, str(path)).exit_code == 0
    r = cli("filter", table, "-o", out, "--prefer", "human")
    assert r.exit_code == 0, r.output
    assert "decided by a human label (--prefer human): 6" in r.stderr
    assert "1 x human tie" in r.stderr and "1 x orders disagree" in r.stderr  # p6; p7
    with open(out) as f:
        got = {x["prompt"]: x for x in map(json.loads, f)}
    assert len(got) == 6
    for pid, lab in REVIEW.items():
        if lab == "tie":
            continue
        row = BY_ID[pid]
        want = row["response_a"] if lab == "A" else row["response_b"]
        assert got[row["prompt"]]["chosen"] == want, pid
    # without --prefer human the judge decides as before (ties of p1.. are dropped)
    r = cli("filter", table, "-o", str(tmp_path / "j.dpo.jsonl"))
    assert r.exit_code == 0 and "decided by a human" not in r.stderr


def test_compare_reports_human_agreement(table, tmp_path):
    from test_compare import judge_z, scripted

    z = scripted(tmp_path, "z.duckdb", judge_z)
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps({"id": k, "human_label": v}) + "\n"
                            for k, v in REVIEW.items()))
    assert cli("review", "import", table, str(path)).exit_code == 0
    r = cli("compare", table, z, "--json", "--resamples", "200")
    assert r.exit_code == 0, r.output
    h = json.loads(r.stdout)["human"]
    check_hand_computed(h[0])
    # judge Z is the gold label in both orders: vs human on p1 p2 p3 p5 p8 (1) and p4 (0)
    assert h[1]["accuracy"]["value"] == pytest.approx(5 / 6)
    assert h[1]["agreement"]["value"] == pytest.approx(5 / 7)
    text = cli("compare", table, z, "--resamples", "200").stdout
    assert "vs human labels (first table's human_labels; 7 common pairs reviewed)" in text


def test_jury_split_selection(tmp_path, table):
    from test_compare import judge_y, scripted

    y = scripted(tmp_path, "y.duckdb", judge_y)
    jury = str(tmp_path / "jury.duckdb")
    r = cli("compare", table, y, "--jury", "-o", jury, "--resamples", "10")
    assert r.exit_code == 0, r.output
    export(jury, tmp_path / "rev", "--select", "jury-split", "--format", "jsonl")
    got = [json.loads(x) for x in (tmp_path / "rev" / "review.jsonl").read_text().splitlines()]
    # X says tie on the A-labelled pairs and B on the others; Y says A on the A-labelled pairs
    # and tie on the others: they differ on every pair
    assert [g["id"] for g in got] == [r["id"] for r in ROWS]
    # two judges: no winner has more than half of them, so the jury says tie; it keeps no samples
    assert got[0]["judge_verdict"] == "tie" and got[0]["anchor_ab"] is None


def test_parquet_export_takes_labels_in_its_working_store(tmp_path):
    pq = build(tmp_path, "judged.parquet")
    export(pq, tmp_path / "rev", "--select", "flipped", "--format", "jsonl")
    lines = [json.loads(x) for x in (tmp_path / "rev" / "review.jsonl").read_text().splitlines()]
    for x in lines:
        x["human_label"] = REVIEW.get(x["id"], "")
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = cli("review", "import", pq, str(tmp_path / "l.jsonl"))
    assert r.exit_code == 0, r.output
    assert ".judged.parquet.rmjudge.duckdb" in r.stderr
    h = eval_human(pq)
    assert h["pairs"] == 4 and h["human"] == {"A": 3, "B": 1, "tie": 0}


def test_eval_with_human_labels_and_no_gold(tmp_path):
    src = tmp_path / "nolabel.jsonl"
    src.write_text("".join(json.dumps({k: r[k] for k in ("id", "prompt", "response_a",
                                                             "response_b")}) + "\n" for r in ROWS))
    from helpers import pref

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score
    from rmjudge.core.settings import JudgeSettings

    out = str(tmp_path / "n.duckdb")
    score(str(src), ScriptedEngine(lambda req, i: pref(1)), JudgeSettings(samples=2, seed=0),
          output=out)
    r = cli("eval", out)
    assert r.exit_code == 1 and "no gold labels" in r.stderr
    (tmp_path / "l.jsonl").write_text('{"id": "p1", "human_label": "A"}\n'
                                      '{"id": "p2", "human_label": "B"}\n')
    assert cli("review", "import", out, str(tmp_path / "l.jsonl")).exit_code == 0
    r = cli("eval", out, "--resamples", "50")
    assert r.exit_code == 0, r.output
    assert "no gold labels; judge against the imported human labels only" in r.stdout
    assert "Judge vs human labels: 2 pairs reviewed (A 1, B 1, tie 0)" in r.stdout
    # slot 1 in both orders: A then B, a tie; each order right once per pair
    assert "accuracy vs human, both orders pooled: 50.0" in r.stdout


def test_import_into_a_store_being_written_is_refused(table, tmp_path):
    import fcntl

    (tmp_path / "l.jsonl").write_text('{"id": "p1", "human_label": "A"}\n')
    with open(table + ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = cli("review", "import", table, str(tmp_path / "l.jsonl"))
        fcntl.flock(f, fcntl.LOCK_UN)
    assert r.exit_code == 3 and r.stderr.startswith("Error: ")
    assert "human_labels" not in {t for (t,) in rows(table, "SELECT table_name FROM duckdb_tables()")}


@pytest.mark.parametrize("body", [
    [{"data": {"pair_id": "p1"}, "annotations": 5}],
    [{"data": {"pair_id": "p1"}, "annotations": [{"result": 7}]}],
    [{"data": {"pair_id": "p1"}, "annotations": [{"result": [{"type": "choices", "value": 3}]}]}],
    [{"data": {"pair_id": "p1"}, "annotations": ["x", None, {"result": [None, "r"]}]}],
    [{"data": "p1", "annotations": []}],
    [{"id": "p1", "responses": {"preference": 3}}],
    [{"id": "p1", "responses": {"preference": [{"value": {"x": 1}}]}}],
    [{"id": "p1", "preference.responses": "response_1", "preference.responses.users": 4,
      "preference.responses.status": 9}],
    [1, "two", None, []],
    {"data": {"pair_id": "p1"}, "annotations": [{"result": [
        {"type": "choices", "from_name": "preference", "value": {"choices": [["Response 1"]]}}]}]},
])
def test_malformed_label_studio_and_argilla_files_never_crash(table, tmp_path, body):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(body))
    r = cli("review", "import", table, str(path))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert r.exit_code in (0, 1), r.output
    if r.exit_code == 1:
        assert r.stderr.startswith("Error: no label imported from")
        assert len(r.stderr.strip().splitlines()) == 1


# -- hostile texts in the CSV ---------------------------------------------------------------------

CONTROL = [chr(c) for c in range(0x20)] + ["\x7f", "\u2028", "\u2029", "\r\n"]


def judged_with(tmp_path, pairs: dict[str, tuple[str, str, str]]) -> str:
    """A run store of `pairs` (id -> prompt, chosen, rejected), judged without a model."""
    from helpers import pref

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score
    from rmjudge.core.settings import JudgeSettings

    src = tmp_path / "hostile.jsonl"
    src.write_text("".join(json.dumps({"id": k, "prompt": p, "chosen": c, "rejected": r}) + "\n"
                           for k, (p, c, r) in pairs.items()))
    out = str(tmp_path / "hostile.duckdb")
    summary = score(str(src), ScriptedEngine(lambda req, i: pref(1)),
                    JudgeSettings(samples=2, seed=0), output=out)
    assert summary.judged == len(pairs)
    return out


def csv_records(path, restore=True) -> list[dict]:
    """review.csv read by the csv module (as any CSV reader reads it), cells restored by the
    documented rule (one leading `'` off) unless `restore` is False."""
    from rmjudge.review.formats import restore_cell

    with open(path, newline="", encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    return [{k: restore_cell(v) if restore else v for k, v in r.items()} for r in got]


def labelled_as_saved(path, labels: dict[str, str]) -> None:
    """The reviewer fills human_label and the spreadsheet saves every cell again (the file is
    re-written by a CSV writer, cells as they were read)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields, got = reader.fieldnames, list(reader)
    from rmjudge.review.formats import restore_cell

    for r in got:
        r["human_label"] = labels[restore_cell(r["id"])]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(got)


def check_csv_matches_jsonl(out) -> list[dict]:
    """Every text cell of review.csv, read back, is the text of review.jsonl (the same rows)."""
    lines = [json.loads(x) for x in (out / "review.jsonl").read_bytes().split(b"\n") if x]
    got = csv_records(out / "review.csv")
    assert [r["id"] for r in got] == [x["id"] for x in lines]
    for r, x in zip(got, lines):
        for k, v in x.items():
            if isinstance(v, str):
                assert r[k] == v, (x["id"], k)
    return lines


def test_csv_round_trips_every_control_character_with_its_slot_check(tmp_path):
    """A lone CR was written unquoted: a reader split the record there, and the label of its
    first half reached the store without the slot_key that the second half held."""
    from rmjudge.review.formats import read_labels
    from rmjudge.review.select import slot_key

    pairs = {f"c{k}": (f"question{t}with {t} inside", f"{t}first{t}good\t{t}", f"bad{t}end{t}")
             for k, t in enumerate(CONTROL)}
    table = judged_with(tmp_path, pairs)
    out = tmp_path / "rev"
    export(table, out, "--select", "random:100", "--format", "csv", "--format", "jsonl")
    lines = check_csv_matches_jsonl(out)
    assert len(lines) == len(CONTROL)
    stored = {i: (a, b) for i, a, b in rows(table, "SELECT id, response_a, response_b FROM pairs")}
    assert {x["id"]: (x["response_a"], x["response_b"]) for x in lines} == stored
    # the export as written: every row read, none labelled yet, none broken
    parsed = read_labels(str(out / "review.csv"))
    assert (parsed.errors, parsed.unlabelled, parsed.labels) == ([], len(CONTROL), [])

    labels = {i: ("A", "B", "tie")[n % 3] for n, i in enumerate(sorted(pairs))}
    labelled_as_saved(out / "review.csv", labels)
    parsed = read_labels(str(out / "review.csv"))
    assert parsed.errors == [] and len(parsed.labels) == len(CONTROL)
    for lab in parsed.labels:  # every label goes through the slot check
        assert lab.slot_key == slot_key(*stored[lab.pair_id]), lab.pair_id
    r = cli("review", "import", table, str(out / "review.csv"), "--reviewer", "ann")
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr and f"imported {len(CONTROL)} labels" in r.stderr
    assert human_rows(table) == sorted((k, "ann", v) for k, v in labels.items())


FORMULAS = ["=1+1", "+1", "-1", "@SUM(A1:A9)", "\t=1+1", "\r=1+1", "\n=2", "\x00=3",
            '=HYPERLINK("http://example.com/x", "click")', "=cmd|' /C calc'!A0",
            "\uff1d1+1", "\uff0b1", "\uff0d1", "\uff20SUM(A1)", "'quoted", "''twice", "'=1+1",
            "-", "plain text", ""]


def test_csv_neutralises_formula_cells_and_restores_them_exactly(tmp_path):
    """OWASP's CSV-injection advice: a cell a spreadsheet would run as a formula starts with `'`;
    import takes one `'` off every cell, so texts starting with `'` survive too."""
    from rmjudge.review.formats import FORMULA_START, read_labels

    pairs = {}
    for n, t in enumerate(FORMULAS):
        pid = t if t.strip() and t.isprintable() else f"f{n}"  # ids that are formulas too
        pairs[pid] = (t or "q", f"{t} chosen" if t else "chosen", t or "rejected")
    table = judged_with(tmp_path, pairs)
    out = tmp_path / "rev"
    export(table, out, "--select", "random:100", "--format", "csv", "--format", "jsonl")
    check_csv_matches_jsonl(out)
    raw = csv_records(out / "review.csv", restore=False)
    assert len(raw) == len(pairs)
    cells = [v for r in raw for v in r.values()]
    for v in cells:  # no text cell starts as a formula; numbers stay numbers
        if v.startswith(FORMULA_START):
            float(v)
    by_id = {r["id"]: r for r in raw}
    for pid, cell in (("=1+1", "'=1+1"), ("'quoted", "''quoted"), ("'=1+1", "''=1+1"),
                      ("@SUM(A1:A9)", "'@SUM(A1:A9)"), ("plain text", "plain text"),
                      ("-", "'-")):
        assert {by_id[cell]["response_a"], by_id[cell]["response_b"]} == {
            cell, cell + " chosen"}, pid
    assert sum(v.startswith("'") for v in cells) > len(FORMULAS)

    labels = {i: ("A", "B", "tie")[n % 3] for n, i in enumerate(pairs)}
    labelled_as_saved(out / "review.csv", labels)
    parsed = read_labels(str(out / "review.csv"))
    assert parsed.errors == [] and {lab.pair_id for lab in parsed.labels} == set(pairs)
    r = cli("review", "import", table, str(out / "review.csv"))
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr
    assert human_rows(table) == sorted((k, "", v) for k, v in labels.items())


def test_csv_cells_beyond_the_csv_modules_default_limit_are_read(table, tmp_path):
    """A response longer than 128 KiB (the csv module's default cell limit) made `review
    import` fail with a traceback."""
    from rmjudge.review.formats import read_labels

    path = tmp_path / "long.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "human_label", "response_a"])
        w.writerow(["p1", "A", "x" * 300_000])
        w.writerow(["p2", "B", "y\r\n" * 100_000])
    before = csv.field_size_limit()
    parsed = read_labels(str(path))
    assert parsed.errors == [] and [(x.pair_id, x.label) for x in parsed.labels] == [
        ("p1", "A"), ("p2", "B")]
    assert csv.field_size_limit() == before  # the process-wide limit is left as it was
    r = cli("review", "import", table, str(path))
    assert r.exit_code == 0 and "imported 2 labels" in r.stderr, r.output
