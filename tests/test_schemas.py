"""Gold labels of the preference-dataset schemas people use, read right and never guessed.

Every fixture row in tests/data/schemas/ carries `expected_better`: the text of the response the
dataset says is better (null for a tie). The response in the labelled slot must be that text,
whatever slot the chosen response was drawn into.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import orjson
from click.testing import CliRunner
from helpers import first_slot_response, pref, refl, rows

from rmjudge.engine.fake import ScriptedEngine
from rmjudge.io.labels import LabelValuesError, LabelValuesSyntaxError, parse_label_values
from rmjudge.io.mapping import LabelOptions, Mapper, RowError, check_labels, content_id
from rmjudge.io.readers import read_rows
from rmjudge.runs.pipeline import score
from rmjudge.core.settings import JudgeSettings

DATA = Path(__file__).parent / "data" / "schemas"


def better(p) -> str | None:
    return {"A": p.response_a, "B": p.response_b, None: None}[p.label]


def map_file(name: str, mapper: Mapper | None = None, **opts) -> tuple[Mapper, list]:
    m = mapper or LabelOptions.parse(**opts).mapper({}, seed=3)
    source = str(DATA / name)
    pairs = [m.to_pair(r.row_number, r.obj) for r in check_labels(m, read_rows(source), source)]
    return m, pairs


@pytest.mark.parametrize("name, schema, n", [
    ("helpsteer3.jsonl", "helpsteer3", 5),
    ("pku_saferlhf.jsonl", "pku-saferlhf", 4),
    ("shp.jsonl", "shp", 3),
    ("arena.jsonl", "arena", 5),
    ("mt_bench.jsonl", "arena", 3),
    ("hh_rlhf.jsonl", "hh-rlhf", 3),
    ("trl.jsonl", "trl", 4),
    ("ultrafeedback.jsonl", "trl", 3),
    ("skywork.jsonl", "trl", 3),
    ("rmjudge.jsonl", "rmjudge", 5),
])
def test_every_row_gets_its_dataset_gold_label(name, schema, n):
    m, pairs = map_file(name)
    assert m.schema == schema and len(pairs) == n
    for p in pairs:
        assert better(p) == p.extra["expected_better"], (name, p.row_number)
        assert p.messages[-1]["role"] == "user"
        assert {p.response_a, p.response_b} != {None}
    assert len({p.id for p in pairs}) == n


def test_chosen_is_not_always_in_slot_a():
    """The gold check above passes through both slots: chosen data is drawn into A and B."""
    slots = set()
    for seed in range(6):
        _, pairs = map_file("trl.jsonl", Mapper(seed=seed))
        slots |= {p.label for p in pairs}
    assert slots == {"A", "B"}


def test_pku_safer_label_and_its_description():
    m, pairs = map_file("pku_saferlhf.jsonl", choice="safer")
    assert [better(p) for p in pairs] == [p.extra["expected_safer"] for p in pairs]
    assert "safer_response_id" in m.describe() and "better_response_id" in pairs[0].extra
    m, pairs = map_file("pku_saferlhf.jsonl")
    # row 1: better_response_id = 1 is response_1 (slot B), not "1 = A"
    assert pairs[0].label == "B" and pairs[3].label == "A"
    assert m.describe().startswith("pku-saferlhf (PKU-SafeRLHF): prompt = prompt, A = response_0")
    with pytest.raises(LabelValuesSyntaxError, match="--label kinder: PKU-SafeRLHF input"):
        map_file("pku_saferlhf.jsonl", choice="kinder")


def test_helpsteer3_reads_the_context_conversation_and_ties():
    m, pairs = map_file("helpsteer3.jsonl")
    assert [p.label for p in pairs] == ["A", "B", "A", "B", None]
    assert [x["role"] for x in pairs[1].messages] == ["user", "assistant", "user"]
    assert pairs[3].messages[0] == {"role": "system", "content": "Answer briefly."}
    assert pairs[0].extra["domain"] == "code" and "overall_preference" not in pairs[0].extra
    assert "overall_preference: < 0: A (response1 better)" in m.describe()


def test_describe_and_schema_before_and_after_the_first_row():
    m = Mapper()
    assert m.schema is None and m.describe() == "no row mapped yet"
    m.to_pair(1, {"prompt": "p", "chosen": "a", "rejected": "b"})
    assert m.schema == "trl" and m.describe().startswith("trl (")


def test_arena_shared_turns_multi_turn_answers_and_mismatches():
    _, pairs = map_file("arena.jsonl")
    assert [p.label for p in pairs] == ["A", "B", None, None, "B"]
    multi = pairs[4]
    assert multi.messages == ({"role": "user", "content": "Name a fruit."},)
    m = Mapper()
    base = {"winner": "model_a", "conversation_a": [{"role": "user", "content": "Hi"},
                                                     {"role": "assistant", "content": "Hello"}]}
    with pytest.raises(RowError, match="do not share their prompt turns"):
        m.to_pair(1, {**base, "conversation_b": [{"role": "user", "content": "Bye"},
                                                 {"role": "assistant", "content": "Hello"}]})
    with pytest.raises(RowError, match="must end with the assistant's answer"):
        m.to_pair(2, {**base, "conversation_b": [{"role": "user", "content": "Hi"}]})
    with pytest.raises(RowError, match="'winner' holds draw"):
        m.to_pair(3, {**base, "winner": "draw", "conversation_b": base["conversation_a"]})


def test_mt_bench_turn_and_judges():
    _, pairs = map_file("mt_bench.jsonl")
    first, second, turn2 = pairs
    assert first.messages == second.messages and len(first.messages) == 1
    assert first.id != second.id  # two judges of the same pair are two rows, not duplicates
    assert [x["content"] for x in turn2.messages] == ["Compose a haiku about autumn."]
    assert turn2.extra["turn"] == 2 and turn2.extra["judge"] == "expert_0"


def test_hh_rlhf_transcripts_are_split_into_turns():
    _, pairs = map_file("hh_rlhf.jsonl")
    assert [x["role"] for x in pairs[1].messages] == ["user", "assistant", "user"]
    assert pairs[1].messages[-1]["content"] == "For how long?"
    m = Mapper()
    m.to_pair(1, {"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: a\n\nAssistant: c"})
    with pytest.raises(RowError, match="do not share their prompt turns"):
        m.to_pair(2, {"chosen": "\n\nHuman: a\n\nAssistant: b",
                      "rejected": "\n\nHuman: other\n\nAssistant: c"})


def test_content_parts_system_messages_and_single_message_responses():
    _, pairs = map_file("skywork.jsonl")
    assert pairs[1].messages == ({"role": "system", "content": "You are a terse assistant."},
                                 {"role": "user", "content": "Largest planet?"})
    assert {pairs[1].response_a, pairs[1].response_b} == {"Jupiter.", "Saturn."}
    _, pairs = map_file("rmjudge.jsonl")
    assert (pairs[4].response_a, pairs[4].response_b) == ("The bat.", "The penguin.")
    with pytest.raises(RowError, match="content part 0 is 'image_url', not text"):
        Mapper().to_pair(1, {"prompt": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "x.png"}}]}], "chosen": "a", "rejected": "b"})


def test_existing_shapes_keep_their_ids():
    """Stores written before schemas existed must resume: same content hashes."""
    m = Mapper()
    p = m.to_pair(1, {"prompt": "q", "chosen": "good", "rejected": "bad"})
    assert p.id == content_id(({"role": "user", "content": "q"},), "good", "bad")
    assert p.id == "11c3a070e4fefaf51ebd226e"
    conv = [{"role": "user", "content": "q"}]
    p = Mapper().to_pair(1, {"chosen": conv + [{"role": "assistant", "content": "good"}],
                             "rejected": conv + [{"role": "assistant", "content": "bad"}]})
    assert p.id == "11c3a070e4fefaf51ebd226e"
    p = Mapper().to_pair(1, {"prompt": "q", "response_a": "x", "response_b": "y", "id": 7})
    assert p.id == "7"


def test_chosen_rejected_without_a_prompt_names_the_fix():
    m = Mapper()
    with pytest.raises(RowError, match="^no prompt column found .* name it with --map prompt=COLUMN$"):
        m.to_pair(1, {"chosen": "good", "rejected": "bad"})


def test_map_id_naming_a_missing_column_is_a_row_error():
    m = Mapper({"id": "uid"})
    with pytest.raises(RowError, match=r"column 'uid' \(from --map id=uid\) is missing"):
        m.to_pair(1, {"prompt": "q", "chosen": "a", "rejected": "b"})
    with pytest.raises(RowError, match="is empty in this row"):
        m.to_pair(2, {"prompt": "q", "chosen": "a", "rejected": "b", "uid": None})
    assert m.to_pair(3, {"prompt": "q", "chosen": "a", "rejected": "b", "uid": 5}).id == "5"


def _refusal(name: str, mapping: dict | None = None, **opts) -> str:
    m = LabelOptions.parse(**opts).mapper(mapping, seed=0)
    with pytest.raises(LabelValuesError) as exc:
        list(check_labels(m, read_rows(str(DATA / name)), name))
    return str(exc.value)


def test_ambiguous_label_columns_are_refused_with_their_values():
    msg = _refusal("numeric_label.jsonl")
    assert msg.startswith("numeric_label.jsonl: label column 'preference' does not say")
    assert "values found in the first 3 rows: 1 (2 rows), 0 (1 row)" in msg
    assert "--label-values" in msg and "column 'response_a' is better" in msg
    # HelpSteer3 named through --map loses its published meaning: explicit values needed
    msg = _refusal("helpsteer3.jsonl", {"prompt": "context", "a": "response1", "b": "response2",
                                        "label": "overall_preference"})
    assert "-3 (1 row), 2 (1 row), -1 (1 row), 1 (1 row), 0 (1 row)" in msg
    # PKU's indices through --map: 0/1 are not letters
    msg = _refusal("pku_saferlhf.jsonl", {"prompt": "prompt", "a": "response_0", "b": "response_1",
                                          "label": "better_response_id"})
    assert "label column 'better_response_id'" in msg and "1 (2 rows), 0 (2 rows)" in msg
    # values a --label-values does not cover are named
    msg = _refusal("numeric_label.jsonl", values="1=B")
    assert "--label-values 1=B does not cover" in msg and "0 (1 row)" in msg and "1 (" not in msg


def test_the_check_reads_a_bounded_number_of_rows():
    m = Mapper()
    stream = ({"prompt": "q", "response_a": "x", "response_b": f"y{i}", "label": "A" if i else 2}
              for i in range(50_000))
    from rmjudge.io.readers import RawRow

    raws = (RawRow(i + 1, o) for i, o in enumerate(stream))
    with pytest.raises(LabelValuesError, match="first 10000 rows: A \\(9999 rows\\), 2 \\(1 row\\)"):
        check_labels(m, raws)
    assert next(raws).row_number == 10_001  # the rest was never read


def test_label_values_make_ambiguous_columns_explicit():
    _, pairs = map_file("numeric_label.jsonl", values="0=A,1=B")
    assert [better(p) for p in pairs] == [p.extra["expected_better"] for p in pairs]
    m = LabelOptions.parse("<0=A,>0=B,0=tie").mapper(
        {"prompt": "context", "a": "response1", "b": "response2", "label": "overall_preference"}, 0)
    _, pairs = map_file("helpsteer3.jsonl", m)
    assert m.schema == "mapped"
    assert [better(p) for p in pairs] == [p.extra["expected_better"] for p in pairs]
    # overriding a published meaning: only strong HelpSteer3 preferences count
    _, pairs = map_file("helpsteer3.jsonl", values="<=-2=A,>=2=B,-1..1=tie")
    assert [p.label for p in pairs] == ["A", "B", None, None, None]


@pytest.mark.parametrize("spec, outcomes", [
    ("0=A,1=B", {0: "A", "1": "B", 1.0: "B", None: None}),
    ("<0=A,>0=B,0=tie", {-3: "A", "-0.5": "A", 2: "B", 0: None}),
    ("-3..-1=A, 1..3=B, *=tie", {-2: "A", 3: "B", 0: None, "x": None}),
    ("yes=A,NO=b", {"Yes": "A", " no ": "B"}),
    ("<=1=A,>1=B", {1: "A", 1.5: "B"}),
])
def test_label_values_syntax(spec, outcomes):
    lv = parse_label_values(spec)
    for value, want in outcomes.items():
        assert lv.outcome(value) == want, (spec, value)


def test_label_values_uncovered_values():
    assert parse_label_values("0=A,1=B").outcome(2) == "uncovered"
    assert parse_label_values("yes=A,no=B").outcome(1) == "uncovered"


@pytest.mark.parametrize("spec, msg", [
    ("", "is empty"),
    ("0=C", "the outcome 'C' must be A, B or tie"),
    ("0", "must look like VALUE=A"),
    ("<x=A", "'x' is not a number"),
    ("3..1=A", "the range 3..1 is empty"),
    ("<=0=A,0=tie", "'<=0=A' and '0=tie' overlap"),
    ("0..2=A,1..3=B", "overlap"),
    ("a=A,A=B", "overlap"),
    ("*=A,*=B", "overlap"),
    ("0=tie,1=tie", "maps nothing to A or B"),
])
def test_label_values_errors(spec, msg):
    with pytest.raises(LabelValuesSyntaxError, match=msg):
        parse_label_values(spec)


def test_options_that_do_not_apply_are_refused():
    with pytest.raises(LabelValuesSyntaxError, match="--label-values does not apply.*trl"):
        map_file("trl.jsonl", values="0=A,1=B")
    with pytest.raises(LabelValuesSyntaxError, match="--label safer does not apply.*helpsteer3"):
        map_file("helpsteer3.jsonl", choice="safer")


def test_score_cli_rejects_a_malformed_label_values_before_loading_a_model(tmp_path):
    from rmjudge.cli import main

    r = CliRunner().invoke(main, ["score", str(DATA / "trl.jsonl"), "--label-values", "0=C",
                                  "-o", str(tmp_path / "o.duckdb")])
    assert r.exit_code == 1
    assert r.output == ("Error: --label-values '0=C': the outcome 'C' must be A, B or tie\n")


# --- end to end through the run pipeline, with a scripted judge ---------------------------------

def longer_judge(req, i):
    """Prefers the longer response in every rollout; reflections pick 1."""
    if req.share_key[2] == "reflection":
        return refl(1)
    body = req.messages[-1]["content"]
    r1 = first_slot_response(req)
    r2 = body.split("### Response 2\n", 1)[1].split("\n\n## Your task", 1)[0]
    return pref(1 if len(r1) >= len(r2) else 2, -0.2, f"analysis {i}")


@pytest.mark.parametrize("name, opts, column", [
    ("helpsteer3.jsonl", {}, "expected_better"),
    ("pku_saferlhf.jsonl", {}, "expected_better"),
    ("pku_saferlhf.jsonl", {"choice": "safer"}, "expected_safer"),
    ("arena.jsonl", {}, "expected_better"),
])
def test_score_stores_the_gold_label(tmp_path, name, opts, column):
    out = str(tmp_path / "o.duckdb")
    s = score(str(DATA / name), ScriptedEngine(longer_judge), JudgeSettings(samples=2, seed=1),
              output=out, mapper=(LabelOptions(**opts) if opts else LabelOptions()).mapper(None, 1))
    assert s.errors == 0
    got = rows(out, f"SELECT label, response_a, response_b, {column} FROM pairs ORDER BY row_number")
    for label, a, b, want in got:
        assert {"A": a, "B": b, None: None}[label] == want


def test_score_refuses_ambiguous_labels_before_writing_anything(tmp_path):
    out = tmp_path / "o.duckdb"
    with pytest.raises(LabelValuesError, match="'preference'.*1 \\(2 rows\\), 0 \\(1 row\\)"):
        score(str(DATA / "numeric_label.jsonl"), ScriptedEngine(longer_judge),
              JudgeSettings(samples=2), output=str(out))
    assert not out.exists()
    s = score(str(DATA / "numeric_label.jsonl"), ScriptedEngine(longer_judge),
              JudgeSettings(samples=2), output=str(out),
                  mapper=LabelOptions.parse("0=A,1=B").mapper(None, 0))
    assert s.judged == 3
    assert rows(str(out), "SELECT label FROM pairs ORDER BY row_number") == [("B",), ("A",), ("B",)]


def test_letter_ties_and_id_only_mapping():
    m = Mapper()
    row = {"prompt": "q", "response_a": "x", "response_b": "y"}
    assert [m.to_pair(1, {**row, "label": v}).label for v in ("draw", "Tie (bothbad)", "", None,
                                                                "response_b", "a<b")] == \
        [None, None, None, None, "B", "B"]
    # merge's input check needs only ids: a label without a meaning does not stop it
    ids = Mapper(read_labels=False)
    p = ids.to_pair(1, {**row, "label": 7})
    assert p.label is None and p.id == m.to_pair(2, {**row, "label": "A"}).id


# --- label values the docs promise, label columns missing from the first row, id spelling ------

ROOT = Path(__file__).resolve().parent.parent
AB = {"prompt": "q", "response_a": "x", "response_b": "y"}


def _raws(objs):
    from rmjudge.io.readers import RawRow

    return [RawRow(i + 1, o) for i, o in enumerate(objs)]


def _pairs(m: Mapper, objs) -> list:
    return [m.to_pair(r.row_number, r.obj) for r in check_labels(m, _raws(objs), "in.jsonl")]


@pytest.mark.parametrize("value", [1, 2, "1", 0, True, "A>>B", "Response A"])
def test_non_letter_labels_stop_the_run_as_the_scoring_doc_says(value):
    with pytest.raises(LabelValuesError, match="give the meaning of its values with --label-values"):
        _pairs(Mapper(), [{**AB, "label": value}])
    doc = (ROOT / "docs" / "scoring.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `{prompt") and "response_a" in line)
    assert "`1`/`2`" not in row and "--label-values" in row  # the doc once said 1/2 were read
    assert "(datasets.md)" in doc


def test_a_label_column_missing_from_the_first_row_is_still_read():
    objs = [dict(AB), {**AB, "response_b": "z", "label": "B"}, {**AB, "response_b": "w", "label": None}]
    m = Mapper()
    pairs = _pairs(m, objs)
    assert [p.label for p in pairs] == [None, "B", None]
    assert all("label" not in p.extra for p in pairs)
    assert "label from label" in m.describe()
    # without the read-ahead check too (a Ray worker maps its batches directly)
    m = Mapper()
    assert [m.to_pair(i, o).label for i, o in enumerate(objs, 1)] == [None, "B", None]
    # values without a meaning in a later row are refused before judging, like a first row's
    with pytest.raises(LabelValuesError, match="label column 'winner'.*1 \\(1 row\\)"):
        _pairs(Mapper(), [dict(AB), {**AB, "winner": 1}])


def test_a_row_whose_label_sits_in_another_label_column_is_a_row_error():
    m = Mapper()
    pairs = _pairs(m, [{**AB, "winner": "A"}, {**AB, "response_b": "z", "winner": None,
                                               "label": "gpt-4"}])
    assert [p.label for p in pairs] == ["A", None]  # winner present (null): label is passthrough
    with pytest.raises(RowError, match="column 'label' holds a label but the input's label column "
                                       "is 'winner'.*give every row the column"):
        m.to_pair(3, {**AB, "response_b": "v", "label": "B"})
    # a label column named with --label reads that column only: the others pass through
    m = LabelOptions.parse(choice="winner").mapper(None, 0)
    p = _pairs(m, [{**AB, "winner": "A"}, {**AB, "response_b": "z", "label": "B"}])[1]
    assert p.label is None and p.extra["label"] == "B"


def test_score_keeps_a_gold_label_missing_from_the_first_row(tmp_path):
    src = tmp_path / "in.jsonl"
    lines = [{"prompt": "q", "response_a": "short", "response_b": "a longer answer"},
             {"prompt": "r", "response_a": "a longer answer", "response_b": "short", "label": "A"}]
    src.write_text("".join(orjson.dumps(o).decode() + "\n" for o in lines))
    out = str(tmp_path / "o.duckdb")
    s = score(str(src), ScriptedEngine(longer_judge), JudgeSettings(samples=2), output=out)
    assert s.errors == 0
    assert rows(out, "SELECT label FROM pairs ORDER BY row_number") == [(None,), ("A",)]
    cols = {c for (c,) in rows(out, "SELECT column_name FROM information_schema.columns "
                                    "WHERE table_name = 'pairs'")}
    assert not {"input_label", "label_2"} & cols


@pytest.mark.parametrize("value, want", [
    (True, "true"), (False, "false"), ({"a": 1}, '{"a":1}'), ([1, "x"], '[1,"x"]'),
    ({"b": {"c": None}}, '{"b":{"c":null}}'),
    # strings, integers and floats are spelled as before, so existing stores still resume
    ("abc", "abc"), (5, "5"), (1.5, "1.5"), (-3, "-3"), (2.0, "2.0"), (1e16, "1e+16"),
    (18446744073709551615, "18446744073709551615"), (12345678901234567890123, "12345678901234567890123"),
    (Decimal("12345678901234567890123"), "12345678901234567890123"),  # a DECIMAL(38) column
])
def test_ids_are_json_text_not_python_spelling(value, want):
    assert Mapper().to_pair(1, {**AB, "id": value}).id == want
    assert Mapper({"id": "uid"}).to_pair(1, {**AB, "uid": value}).id == want


def test_integer_ids_beyond_64_bits_never_collide(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"prompt": "q", "response_a": "x", "response_b": "y", "id": 12345678901234567890123}\n'
                   '{"prompt": "q", "response_a": "x", "response_b": "z", "id": 12345678901234567890124}\n')
    m = Mapper()
    ids = []
    for r in read_rows(str(src)):
        try:
            ids.append(m.to_pair(r.row_number, r.obj).id)
        except RowError as exc:  # a reader that rounds them to floats: the rows are refused
            assert "beyond 64 bits" in str(exc) and "quote it" in str(exc)
    assert len(set(ids)) == len(ids)
    assert set(ids) <= {"12345678901234567890123", "12345678901234567890124"}


def test_label_values_with_a_label_column_that_only_later_rows_have():
    m = LabelOptions.parse("0=A,1=B").mapper(None, 0)
    assert [p.label for p in _pairs(m, [dict(AB), {**AB, "response_b": "z", "label": 1}])] == [None, "B"]
    with pytest.raises(LabelValuesSyntaxError, match="--label-values does not apply: none of the "
                                                     "first 2 rows has a label column"):
        _pairs(LabelOptions.parse("0=A,1=B").mapper(None, 0), [dict(AB), {**AB, "response_b": "z"}])


def test_a_label_column_named_with_label_may_be_missing_from_the_first_row():
    m = LabelOptions.parse(choice="pref").mapper(None, 0)
    assert [p.label for p in _pairs(m, [dict(AB), {**AB, "response_b": "z", "pref": "B"}])] == [None, "B"]
    with pytest.raises(LabelValuesSyntaxError, match="^--label pref: none of the first 2 rows has "
                                                     "such a column; columns: prompt, response_a"):
        _pairs(LabelOptions.parse(choice="pref").mapper(None, 0), [dict(AB), dict(AB)])
    with pytest.raises(LabelValuesSyntaxError, match="^--map label=pref: none of the first 1 row "):
        _pairs(Mapper({"label": "pref"}), [dict(AB)])
