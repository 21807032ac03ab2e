"""Readers for every format, shape recognition, --map, ids and gold labels."""

from __future__ import annotations

import io
import json

import duckdb
import pytest

from rmjudge.io.labels import LabelValuesError
from rmjudge.io.mapping import Mapper, RowError, parse_label, parse_map
from rmjudge.io.readers import InputError, read_jsonl, read_rows

ROWS = [
    {"id": "1", "prompt": "p1", "chosen": "c1", "rejected": "r1", "source": "s"},
    {"id": "2", "prompt": "p2", "chosen": "c2", "rejected": "r2", "source": "t"},
]


def _write_all(tmp_path):
    jl = tmp_path / "x.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * FROM read_json_auto('{jl}')) TO '{tmp_path / 'x.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY (SELECT * FROM read_json_auto('{jl}')) TO '{tmp_path / 'x.csv'}' (HEADER)")
    db = duckdb.connect(str(tmp_path / "x.duckdb"))
    db.execute(f"CREATE TABLE \"my table\" AS SELECT * FROM read_json_auto('{jl}')")
    db.close()
    return {"jsonl": str(jl), "parquet": str(tmp_path / "x.parquet"), "csv": str(tmp_path / "x.csv"),
            "duckdb": str(tmp_path / "x.duckdb") + ":my table"}


def test_every_format_reads_the_same_rows(tmp_path):
    for fmt, src in _write_all(tmp_path).items():
        rows = list(read_rows(src))
        assert [r.obj["prompt"] for r in rows] == ["p1", "p2"], fmt
        assert [str(r.obj["id"]) for r in rows] == ["1", "2"], fmt
        assert all(r.error is None for r in rows)


def test_stdin_jsonl():
    data = io.BytesIO(b'{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    rows = list(read_rows("-", stdin=data))
    assert rows[0].obj["prompt"] == "p"


def test_whole_file_errors_are_clear(tmp_path):
    with pytest.raises(InputError, match="input file not found: nope.jsonl"):
        list(read_rows("nope.jsonl"))
    png = tmp_path / "img.jsonl"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    with pytest.raises(InputError, match="binary file"):
        list(read_rows(str(png)))
    arr = tmp_path / "a.json"
    arr.write_text('[{"prompt": "p"}]')
    with pytest.raises(InputError, match="JSON array, not JSON Lines"):
        list(read_rows(str(arr)))
    srcs = _write_all(tmp_path)
    with pytest.raises(InputError, match="no table 'nope' in .*; tables: my table"):
        list(read_rows(srcs["duckdb"].split(":")[0] + ":nope"))
    fake = tmp_path / "f.parquet"
    fake.write_text("not parquet")
    with pytest.raises(InputError, match="not a Parquet file"):
        list(read_rows(str(fake)))


def test_table_names_are_quoted_not_pasted(tmp_path):
    db = duckdb.connect(str(tmp_path / "q.duckdb"))
    db.execute('CREATE TABLE t (prompt VARCHAR)')
    db.close()
    with pytest.raises(InputError, match="no table"):
        list(read_rows(str(tmp_path / "q.duckdb") + ':t"; DROP TABLE t; --'))
    assert duckdb.connect(str(tmp_path / "q.duckdb")).execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_jsonl_bad_lines_have_reasons():
    data = b'{"a": 1}\n{bad\n[1]\n"s"\n\xff\xfe\n\n{"b": 2}\n'
    rows = list(read_jsonl(io.BytesIO(data)))
    assert [r.row_number for r in rows] == [1, 2, 3, 4, 5, 7]
    assert rows[0].obj == {"a": 1} and rows[5].obj == {"b": 2}
    assert "line 2 is not valid JSON" in rows[1].error
    assert rows[2].error.startswith("line 3 is an array, expected a JSON object")
    assert rows[3].error.startswith("line 4 is a string")
    assert "not valid UTF-8" in rows[4].error and "re-encode" in rows[4].error


def test_csv_ragged_row(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text('prompt,chosen,rejected\n"p","a","b"\n"p2","a2"\n')
    rows = list(read_rows(str(p)))
    assert rows[0].obj == {"prompt": "p", "chosen": "a", "rejected": "b"}
    assert rows[1].error == "line 3 has 2 fields, the header has 3; check the quoting of that row"


def test_chosen_rejected_slot_is_seeded_and_balanced():
    m = Mapper(seed=0)
    labels = []
    for i in range(200):
        p = m.to_pair(i, {"prompt": f"q{i}", "chosen": "good", "rejected": "bad"})
        assert (p.response_a, p.response_b) == (("good", "bad") if p.label == "A" else ("bad", "good"))
        labels.append(p.label)
        assert Mapper(seed=0).to_pair(i, {"prompt": f"q{i}", "chosen": "good", "rejected": "bad"}).label == p.label
    assert 70 < labels.count("A") < 130


def test_response_ab_with_labels_and_passthrough():
    m = Mapper()
    for raw, want in [("A", "A"), ("b", "B"), ("B>A", "B"), ("A>B", "A"), ("tie", None)]:
        p = m.to_pair(1, {"question": "q", "response_a": "x", "response_b": "y", "winner": raw,
                          "subset": "s1"})
        assert p.label == want
        assert p.extra == {"subset": "s1"}
        assert p.messages == ({"role": "user", "content": "q"},)
    # numbers are not letters: 1/2 and 0/1 mean different things in different datasets
    for raw in ("2", 1):
        with pytest.raises(LabelValuesError, match="--label-values"):
            m.to_pair(1, {"question": "q", "response_a": "x", "response_b": "y", "winner": raw})
    m = Mapper(label_values="1=A,2=B")
    assert [m.to_pair(1, {"question": "q", "response_a": "x", "response_b": "y", "winner": raw}).label
            for raw in ("2", 1)] == ["B", "A"]


def test_chat_prompts_and_trl_implicit_prompt():
    m = Mapper()
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "how?"}]
    p = m.to_pair(1, {"prompt": conv, "chosen": "good", "rejected": "bad"})
    assert len(p.messages) == 3 and p.messages[-1]["content"] == "how?"
    full_c = conv + [{"role": "assistant", "content": "good"}]
    full_r = conv + [{"role": "assistant", "content": "bad"}]
    p = m.to_pair(2, {"chosen": full_c, "rejected": full_r})
    assert len(p.messages) == 3 and {p.response_a, p.response_b} == {"good", "bad"}


def test_map_option_and_errors():
    assert parse_map("prompt=question, a=x,b=y,label=pref") == {
        "prompt": "question", "a": "x", "b": "y", "label": "pref"}
    with pytest.raises(ValueError, match="--map key 'foo' is not one of"):
        parse_map("foo=bar")
    with pytest.raises(ValueError, match="must look like key=column"):
        parse_map("prompt")
    m = Mapper(parse_map("prompt=q,a=x,b=y,label=pref,id=uid"))
    p = m.to_pair(3, {"q": "Q", "x": "X", "y": "Y", "pref": "B", "uid": 17, "other": [1]})
    assert (p.id, p.label, p.response_a, p.extra) == ("17", "B", "X", {"other": [1]})
    with pytest.raises(RowError, match=r"column 'x' \(from --map a=x\) is missing"):
        m.to_pair(4, {"q": "Q", "y": "Y"})


def test_row_errors_name_the_field():
    m = Mapper()
    cases = [
        ({"prompt": "p", "chosen": "a"}, "no two responses"),
        ({"prompt": "p", "chosen": "", "rejected": "b"}, "field 'chosen' is empty"),
        ({"prompt": "p", "chosen": 3, "rejected": "b"}, "field 'chosen' must be a string, got a number"),
        ({"prompt": None, "chosen": "a", "rejected": "b"}, "field 'prompt' must be a string or a list"),
        ({"prompt": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
          "chosen": "a", "rejected": "b"}, "must end with a user turn"),
    ]
    for obj, msg in cases:
        with pytest.raises(RowError, match=msg):
            m.to_pair(1, obj)


def test_ids_are_content_hashes_without_an_id_column():
    m = Mapper()
    a = m.to_pair(1, {"prompt": "p", "response_a": "x", "response_b": "y"})
    b = m.to_pair(9, {"prompt": "p", "response_a": "x", "response_b": "y"})
    c = m.to_pair(1, {"prompt": "p", "response_a": "x", "response_b": "z"})
    assert a.id == b.id != c.id


def test_parse_label_rejects_unknown():
    assert parse_label("maybe") is None and parse_label(True) is None


def test_count_rows_for_the_progress_total(tmp_path):
    from rmjudge.io.readers import count_rows

    srcs = _write_all(tmp_path)
    assert count_rows(srcs["jsonl"]) == 2
    assert count_rows(srcs["parquet"]) == 2
    assert count_rows(srcs["csv"]) == 2
    assert count_rows("-") is None and count_rows("missing.jsonl") is None
