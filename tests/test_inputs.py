"""Input forms beyond one plain file: compressed JSONL, shard folders and globs, Hugging Face
datasets (save_to_disk folders; Hub ids from the local cache, offline), and encodings."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import zstandard

from rmjudge.io.readers import (InputError, count_rows, default_output_stem, detect_format,
                                read_rows)

DATA = Path(__file__).parent / "data"
ROWS = [{"id": f"r{i}", "prompt": f"question {i}", "chosen": f"good {i}", "rejected": f"bad {i}"}
        for i in range(6)]


def _jsonl(rows, bad_at: int | None = None) -> bytes:
    lines = [json.dumps(r) for r in rows]
    if bad_at is not None:
        lines.insert(bad_at, '{"prompt": "broken')
    return ("\n".join(lines) + "\n").encode()


def _ok(rows):
    return [(r.row_number, r.obj) for r in rows if r.error is None]


def _errors(rows):
    return [(r.row_number, r.error) for r in rows if r.error is not None]


def _zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


# -- encodings (regressions) ----------------------------------------------------------------

def test_utf8_bom_at_the_start_of_a_jsonl_file_is_dropped(tmp_path):
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + _jsonl(ROWS[:2]))
    rows = list(read_rows(str(p)))
    assert _errors(rows) == []
    assert [r.obj["id"] for r in rows] == ["r0", "r1"]
    # the same on stdin, and without a .jsonl name (detection looks past the BOM)
    assert _errors(list(read_rows("-", stdin=io.BytesIO(p.read_bytes())))) == []
    q = tmp_path / "bom.txt"
    q.write_bytes(p.read_bytes())
    assert detect_format(str(q)) == "jsonl"


def test_a_nul_byte_early_in_a_jsonl_file_is_one_error_row_not_a_refused_file(tmp_path):
    data = _jsonl(ROWS[:4])
    first_end = data.index(b"\n")
    p = tmp_path / "nul.jsonl"
    p.write_bytes(data[:first_end + 20] + b"\x00" + data[first_end + 20:])  # inside line 2
    rows = list(read_rows(str(p)))
    assert [n for n, _ in _errors(rows)] == [2]
    assert "line 2 is not valid JSON" in _errors(rows)[0][1]
    assert [o["id"] for _, o in _ok(rows)] == ["r0", "r2", "r3"]
    assert count_rows(str(p)) == 4


@pytest.mark.parametrize("name, head, message", [
    ("random.jsonl", random.Random(0).randbytes(3000), "looks like a binary file"),
    ("img.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00",
     "looks like a binary file"),
    ("zeros.jsonl", bytes(5000), "looks like a binary file"),
    ("wide.jsonl", '{"prompt": "p"}\n'.encode("utf-16"), "UTF-16"),
    ("wide_nobom.jsonl", '{"prompt": "p"}\n{"prompt": "q"}\n'.encode("utf-16-le"), "UTF-16"),
    ("a.jsonl.zip", b"PK\x03\x04" + bytes(40), "ZIP archive; unzip it"),
])
def test_truly_binary_files_are_refused_with_what_they_are(tmp_path, name, head, message):
    p = tmp_path / name
    p.write_bytes(head)
    with pytest.raises(InputError, match=message):
        list(read_rows(str(p)))
    assert count_rows(str(p)) is None


def test_the_utf16_advice_writes_a_new_file_beside_the_input(tmp_path):
    """`iconv ... pairs.jsonl > pairs.jsonl` (the advice for an input named pairs.jsonl) would
    have emptied the input: the converted copy is named after the input, beside it."""
    for name in ("pairs.jsonl", "data.ndjson", "x.jsonl.gz"):
        p = tmp_path / name
        body = '{"prompt": "p"}\n'.encode("utf-16")
        p.write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
        with pytest.raises(InputError) as exc:
            list(read_rows(str(p)))
        stem, ext = name.removesuffix(".gz").rsplit(".", 1)
        out = tmp_path / f"{stem}.utf8.{ext}"
        want = (f"gzip -dc {p} | iconv -f UTF-16 -t UTF-8 > {out}" if name.endswith(".gz")
                else f"iconv -f UTF-16 -t UTF-8 {p} > {out}")
        assert str(exc.value) == (f"{p} is UTF-16 (or UTF-32) text; rmjudge reads UTF-8: "
                                  f"convert it with {want}")
        if not name.endswith(".gz"):
            r = subprocess.run(want, shell=True, capture_output=True)
            assert r.returncode == 0 and out.read_bytes() == b'{"prompt": "p"}\n'
            assert p.read_bytes() == body


def test_ids_that_differ_only_in_normalisation_are_two_pairs_with_one_warning(tmp_path):
    """"\u00e9" (NFC) and "e\u0301" (NFD) look the same: both pairs are judged and kept under
    the ids as given, and the summary says so once (docs/inputs.md#ids)."""
    from helpers import pref, rows

    from rmjudge.core.settings import JudgeSettings
    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score

    src = tmp_path / "ids.jsonl"
    ids = ["caf\u00e9", "cafe\u0301", "plain", "cafe\u0301"]  # the last: a true duplicate
    src.write_text("".join(json.dumps({"id": i, "prompt": f"q{n}", "chosen": "a",
                                       "rejected": "b"}) + "\n" for n, i in enumerate(ids)))
    out = str(tmp_path / "o.duckdb")
    s = score(str(src), ScriptedEngine(lambda req, i: pref(1, -0.1, "x")),
              JudgeSettings(samples=1), output=out)
    assert (s.judged, s.errors) == (3, 1)
    assert sorted(i for (i,) in rows(out, "SELECT id FROM pairs")) == sorted(ids[:3])
    assert [n for n in s.notes if "normalisation" in n] == [
        "warning: 1 id differs from an earlier row's id only in Unicode normalisation "
        "(NFC/NFD), e.g. row 2's 'cafe\\u0301' and row 1's 'caf\\xe9': they look alike but "
        "are kept as two pairs (docs/inputs.md#ids)"]


def test_a_gzip_file_without_the_gz_name_is_read_by_its_magic_bytes(tmp_path):
    p = tmp_path / "actually_gzip.jsonl"
    p.write_bytes(gzip.compress(_jsonl(ROWS)))
    assert detect_format(str(p)) == "jsonl.gz"
    assert [o for _, o in _ok(read_rows(str(p)))] == ROWS


# -- compressed JSONL -------------------------------------------------------------------------

COMPRESS = {"gz": gzip.compress, "zst": _zst, "bz2": bz2.compress, "xz": lzma.compress}


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_compressed_jsonl_reads_like_plain_with_bad_lines_as_error_rows(tmp_path, codec):
    plain = tmp_path / "x.jsonl"
    plain.write_bytes(_jsonl(ROWS, bad_at=3))
    packed = tmp_path / f"x.jsonl.{codec}"
    packed.write_bytes(COMPRESS[codec](plain.read_bytes()))
    assert detect_format(str(packed)) == f"jsonl.{codec}"
    got, want = list(read_rows(str(packed))), list(read_rows(str(plain)))
    assert [(r.row_number, r.obj, r.error, r.raw) for r in got] == \
        [(r.row_number, r.obj, r.error, r.raw) for r in want]
    assert _errors(got)[0][0] == 4 and "line 4 is not valid JSON" in _errors(got)[0][1]
    assert count_rows(str(packed)) == count_rows(str(plain)) == 7
    assert default_output_stem(str(packed)) == str(tmp_path / "x")


def test_concatenated_gzip_members_and_zstd_frames_are_all_read(tmp_path):
    a, b = _jsonl(ROWS[:3]), _jsonl(ROWS[3:])
    for name, data in (("m.jsonl.gz", gzip.compress(a) + gzip.compress(b)),
                       ("m.jsonl.zst", _zst(a) + _zst(b))):
        p = tmp_path / name
        p.write_bytes(data)
        assert [o for _, o in _ok(read_rows(str(p)))] == ROWS, name


NOT_COMPRESSED = {
    "html": b"<!DOCTYPE html><html><body>Rate limit exceeded</body></html>\n",
    "csv": b"prompt,chosen,rejected\nq,a,b\n",
    "lz4": b"\x04\x22\x4d\x18\x64\x40\xa7" + bytes(range(200)),  # another compressor's frame
}


@pytest.mark.parametrize("suffix, tool", [(".gz", "gzip"), (".zst", "zstd"), (".bz2", "bzip2"),
                                          (".xz", "xz")])
@pytest.mark.parametrize("kind", sorted(NOT_COMPRESSED))
def test_a_file_named_for_a_codec_whose_bytes_are_not_that_codec_says_so(tmp_path, suffix,
                                                                         tool, kind):
    from click.testing import CliRunner

    from rmjudge.cli import main

    p = tmp_path / f"pairs.jsonl{suffix}"
    p.write_bytes(NOT_COMPRESSED[kind])
    with pytest.raises(InputError, match=rf"^{p} is not {tool} data: it starts with "):
        detect_format(str(p))
    assert count_rows(str(p)) is None
    r = CliRunner().invoke(main, ["score", str(p), "-o", str(tmp_path / "o.duckdb")])
    line, = r.stderr.splitlines()
    assert r.exit_code == 1 and line.startswith(f"Error: {p} is not {tool} data"), r.stderr
    assert f"rename it to {tmp_path / 'pairs.jsonl'}" in line and f"{tool} -k " in line
    assert "cannot tell the format" not in line
    # plain JSON Lines under a codec's name is read as it is
    p.write_bytes(_jsonl(ROWS[:2]))
    assert detect_format(str(p)) == "jsonl"
    assert [o for _, o in _ok(read_rows(str(p)))] == ROWS[:2]


@pytest.mark.parametrize("codec", ["gz", "zst"])
def test_a_truncated_compressed_file_keeps_its_rows_and_ends_with_one_error_row(tmp_path, codec):
    rows = [{"id": str(i), "prompt": os.urandom(24).hex(), "chosen": "a", "rejected": "b"}
            for i in range(2000)]  # random text, so that the compressed file is large
    data = COMPRESS[codec](_jsonl(rows))
    p = tmp_path / f"t.jsonl.{codec}"
    p.write_bytes(data[: len(data) * 2 // 3])
    got = list(read_rows(str(p)))
    good = _ok(got)
    assert 900 < len(good) < 2000
    assert [o for _, o in good] == rows[: len(good)]  # every row before the damage, in order
    (n, reason), = [e for e in _errors(got) if "damaged" in e[1]]
    assert n == got[-1].row_number and f"t.jsonl.{codec} is damaged after line" in reason
    assert "truncated" in reason and "download or compress the file again" in reason
    assert count_rows(str(p)) is None


def _altered_gzip(data: bytes, old: bytes, new: bytes) -> bytes:
    """A gzip member of `data` whose deflate data spells `new` where `data` had `old`: it
    decompresses without complaint up to the end of the member, where the CRC check fails."""
    packed = gzip.compress(data, compresslevel=0)  # stored blocks: the text lies in the file
    assert packed.count(old) == 1 and len(old) == len(new)
    return packed.replace(old, new)


def test_a_gzip_member_altered_mid_stream_yields_none_of_its_rows(tmp_path):
    rows = [{"id": f"r{i}", "prompt": f"Question {i}?", "chosen": f"good {i} " + "x" * 2000,
             "rejected": f"bad {i}"} for i in range(9)]  # 6 kB per member: past the format sniff
    first, damaged, last = _jsonl(rows[:3]), _jsonl(rows[3:6]), _jsonl(rows[6:])
    # row 5's text is altered by 4 characters inside the second member
    p = tmp_path / "c.jsonl.gz"
    p.write_bytes(gzip.compress(first) + _altered_gzip(damaged, b"Question 4?", b"Qu3$#!on 4?")
                  + gzip.compress(last))
    got = list(read_rows(str(p)))
    assert [o for _, o in _ok(got)] == rows[:3]  # only the intact member's rows
    assert "Qu3$#!on" not in json.dumps([r.obj for r in got])  # no altered row, ever
    (n, reason), = _errors(got)
    assert n == 4 and "c.jsonl.gz is damaged after line 3" in reason
    assert "checksum fails" in reason and "download or compress the file again" in reason
    # a single-member file altered the same way: not one row is read
    one = tmp_path / "one.jsonl.gz"
    one.write_bytes(_altered_gzip(_jsonl(rows), b"Question 4?", b"Qu3$#!on 4?"))
    got = list(read_rows(str(one)))
    assert _ok(got) == [] and [n for n, _ in _errors(got)] == [1]
    # the same on stdin
    got = list(read_rows("-", stdin=io.BufferedReader(io.BytesIO(one.read_bytes()))))
    assert _ok(got) == [] and "stdin is damaged after line 0" in _errors(got)[0][1]


def test_a_damaged_gzip_stores_no_altered_row_in_a_run(tmp_path):
    from test_score import length_judge, settings

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score

    rows = [{"id": f"r{i}", "prompt": f"Question {i}?", "chosen": f"a good answer {i} " + "x" * 4000,
             "rejected": f"bad {i}"} for i in range(9)]
    p = tmp_path / "in.jsonl.gz"
    p.write_bytes(_altered_gzip(_jsonl(rows), b"Question 2?", b"Qu3$#!on 2?"))
    out = str(tmp_path / "o.duckdb")
    s = score(str(p), ScriptedEngine(length_judge), settings(), output=out)
    assert s.judged == 0 and s.errors == 1
    con = duckdb.connect(out, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM pairs").fetchone() == (0,)
        (reason,), = con.execute("SELECT reason FROM errors").fetchall()
    finally:
        con.close()
    assert "in.jsonl.gz is damaged after line 0" in reason


def test_gzip_on_stdin_is_decompressed():
    stdin = io.BufferedReader(io.BytesIO(gzip.compress(_jsonl(ROWS, bad_at=1))))
    got = list(read_rows("-", stdin=stdin))
    assert [o["id"] for _, o in _ok(got)] == [r["id"] for r in ROWS]
    assert [n for n, _ in _errors(got)] == [2]


def test_compressed_csv_and_refused_compressed_parquet(tmp_path):
    p = tmp_path / "x.csv.gz"
    p.write_bytes(gzip.compress(b"prompt,chosen,rejected\np,a,b\np2,a2\n"))
    got = list(read_rows(str(p)))
    assert got[0].obj == {"prompt": "p", "chosen": "a", "rejected": "b"}
    assert got[1].error == "line 3 has 2 fields, the header has 3; check the quoting of that row"
    q = tmp_path / "x.parquet.gz"
    q.write_bytes(gzip.compress(b"PAR1...."))
    with pytest.raises(InputError, match=r"compressed Parquet file.*gzip -d"):
        detect_format(str(q))


# -- shards -----------------------------------------------------------------------------------

def _parquet(path: Path, rows) -> None:
    src = path.with_suffix(".src.jsonl")
    src.write_bytes(_jsonl(rows))
    duckdb.execute(f"COPY (SELECT * FROM read_json_auto('{src}')) TO '{path}' (FORMAT parquet)")
    src.unlink()


def _parquet_shards(folder: Path, rows, n: int = 3) -> None:
    folder.mkdir()
    size = -(-len(rows) // n)
    for k in range(n):
        _parquet(folder / f"train-{k:05d}-of-{n:05d}.parquet", rows[k * size:(k + 1) * size])


def test_a_folder_or_glob_of_parquet_shards_reads_in_order_with_continuing_row_numbers(tmp_path):
    _parquet_shards(tmp_path / "data", ROWS)
    (tmp_path / "data" / "README.md").write_text("not data")
    (tmp_path / "data" / "_SUCCESS").write_text("")
    for src in (tmp_path / "data", f"{tmp_path}/data/", f"{tmp_path}/data/*.parquet",
                f"{tmp_path}/**/train-*.parquet"):
        assert detect_format(str(src)) == "shards"
        got = list(read_rows(str(src)))
        assert [(r.row_number, r.obj) for r in got] == list(enumerate(ROWS, start=1)), src
        assert count_rows(str(src)) == 6
    assert default_output_stem(str(tmp_path / "data")) == str(tmp_path / "data")
    assert default_output_stem(f"{tmp_path}/data/") == str(tmp_path / "data")
    assert default_output_stem(f"{tmp_path}/data/*.parquet") == str(tmp_path / "data")
    assert default_output_stem(f"{tmp_path}/data/train-*.parquet") == str(tmp_path / "data/train")
    assert default_output_stem("*.jsonl") == "shards"


def test_jsonl_shards_number_rows_across_files_and_name_the_file_in_reasons(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    (d / "part-0.jsonl").write_bytes(_jsonl(ROWS[:2]) + b"\n")  # a blank last line: 3 lines
    (d / "part-1.jsonl.gz").write_bytes(gzip.compress(_jsonl(ROWS[2:4], bad_at=1)))
    _parquet(d / "part-2.parquet", ROWS[4:])
    got = list(read_rows(str(d)))
    assert [r.row_number for r in got] == [1, 2, 4, 5, 6, 7, 8]
    assert [o["id"] for _, o in _ok(got)] == [r["id"] for r in ROWS]
    (n, reason), = _errors(got)
    assert n == 5 and reason.startswith(f"{d}/part-1.jsonl.gz line 2 is not valid JSON")
    assert count_rows(str(d)) == 3 + 3 + 2


def test_shard_sources_that_name_nothing_readable_are_clear(tmp_path):
    with pytest.raises(InputError, match=r"no files match .*nope/\*\.parquet; check the pattern"):
        detect_format(f"{tmp_path}/nope/*.parquet")
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.jsonl").write_bytes(_jsonl(ROWS[:1]))
    (tmp_path / "mixed" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match=r"matches .*notes\.txt, which is not a \.parquet, "
                                         r"\.jsonl or \.csv file; narrow the pattern"):
        list(read_rows(f"{tmp_path}/mixed/*"))
    nested = tmp_path / "repo"
    (nested / "data").mkdir(parents=True)
    (nested / "data" / "a.jsonl").write_bytes(_jsonl(ROWS[:1]))
    with pytest.raises(InputError, match=r"no \.parquet, \.jsonl or \.csv files in the folder "
                                         r".*repo; its subfolders data have some"):
        detect_format(str(nested))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "a.jsonl").write_bytes(_jsonl(ROWS[:1]))
    (tmp_path / "bad" / "b.jsonl").write_bytes(os.urandom(2000))
    with pytest.raises(InputError, match=r"b\.jsonl looks like a binary file"):
        detect_format(str(tmp_path / "bad"))  # before any row is read


# -- Hugging Face datasets: save_to_disk folders ----------------------------------------------

def test_save_to_disk_folders_dataset_and_dataset_dict(tmp_path):
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_list(ROWS)
    one.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict(train=one, test=one.select(range(2))).save_to_disk(str(tmp_path / "dd"))

    assert detect_format(str(tmp_path / "one")) == "hf-disk"
    assert [(r.row_number, r.obj) for r in read_rows(str(tmp_path / "one"))] == \
        list(enumerate(ROWS, start=1))
    assert count_rows(str(tmp_path / "one")) == 6
    test_rows = [r.obj for r in read_rows(f"{tmp_path}/dd@test")]
    assert test_rows == ROWS[:2]
    assert [r.obj for r in read_rows(str(tmp_path / "dd" / "test"))] == ROWS[:2]
    assert count_rows(f"{tmp_path}/dd@test") == 2
    with pytest.raises(InputError, match=r"dd has several splits \(train, test\); "
                                         r"choose one: .*dd@train"):
        detect_format(str(tmp_path / "dd"))
    with pytest.raises(InputError, match=r"dd@valid: no split 'valid'; splits: train, test"):
        list(read_rows(f"{tmp_path}/dd@valid"))
    assert default_output_stem(str(tmp_path / "one")) == str(tmp_path / "one")
    assert default_output_stem(f"{tmp_path}/dd@test") == f"{tmp_path}/dd.test"
    assert default_output_stem(f"{tmp_path}/dd/test") == f"{tmp_path}/dd.test"


def test_a_missing_hub_extra_is_one_clear_error(tmp_path, monkeypatch):
    one = tmp_path / "one"
    one.mkdir()
    (one / "state.json").write_text("{}")
    (one / "dataset_info.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    for src in ("hf://datasets/org/prefs@train", str(one)):
        with pytest.raises(InputError, match=r"needs the Hugging Face datasets library: "
                                             r"pip install '\.\[hub\]' in the rmjudge clone"):
            list(read_rows(src))


def test_hub_ids_parse_or_say_the_form():
    from rmjudge.io.huggingface import HubSource, parse_hub_source

    assert parse_hub_source("hf://datasets/org/prefs") == HubSource("org/prefs", None, None)
    assert parse_hub_source("hf://datasets/org/pr.efs-2:en_US@test") == \
        HubSource("org/pr.efs-2", "en_US", "test", legacy=True)  # the old form
    assert parse_hub_source("hf://datasets/squad@validation") == \
        HubSource("squad", None, None, at="validation")  # a revision or an old-form split
    assert parse_hub_source("hf://datasets/squad?split=validation") == \
        HubSource("squad", None, "validation")
    for bad in ("hf://org/prefs", "hf://datasets/", "hf://datasets/a/b/c", "hf://datasets/a@"):
        with pytest.raises(InputError, match=r"write hf://datasets/ORG/NAME\[@REVISION\]"
                                             r"\[\?config=CONFIG&split=SPLIT\]"):
            detect_format(bad)
    assert default_output_stem("hf://datasets/org/prefs@train") == "org_prefs.train"
    assert default_output_stem("hf://datasets/org/prefs:en@test") == "org_prefs.en.test"
    assert default_output_stem("hf://datasets/org/prefs") == "org_prefs"


# -- Hugging Face datasets: Hub ids, offline from the local caches ----------------------------

README = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/train-*.parquet
  - split: test
    path: en/test-*.parquet
- config_name: fr
  data_files:
  - split: train
    path: fr/train.parquet
---
# prefs
"""

PROBE = r"""
import json, sys
from rmjudge.io.readers import InputError, count_rows, read_rows
out = {}
for src in sys.argv[1:]:
    try:
        rows = list(read_rows(src))
        out[src] = {"rows": [[r.row_number, r.obj] for r in rows], "count": count_rows(src)}
    except InputError as exc:
        out[src] = {"error": str(exc)}
print("RESULT " + json.dumps(out))
"""


def _probe(home: Path, *sources: str, **env) -> dict:
    """read_rows in a fresh interpreter (the Hub's offline switch is read at import time)."""
    full = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1", **env}
    for var in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "HUGGINGFACE_HUB_CACHE"):
        full.pop(var, None)
    res = subprocess.run([sys.executable, "-c", PROBE, *sources], capture_output=True,
                         text=True, env=full, timeout=300)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, res.stderr[-3000:]
    return json.loads(line[0][len("RESULT "):])


def _hub_snapshot(home: Path, repo: str) -> Path:
    """A dataset repository in the Hub cache, laid out as `hf download` leaves it."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = home / "hub" / ("datasets--" + repo.replace("/", "--"))
    snap = root / "snapshots" / commit
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    (snap / "en").mkdir(parents=True)
    (snap / "fr").mkdir()
    (snap / "README.md").write_text(README)
    _parquet(snap / "en" / "train-00000-of-00002.parquet", ROWS[:3])
    _parquet(snap / "en" / "train-00001-of-00002.parquet", ROWS[3:])
    _parquet(snap / "en" / "test-00000-of-00001.parquet", ROWS[:2])
    _parquet(snap / "fr" / "train.parquet", ROWS[4:])
    return snap


@pytest.mark.slow  # a fresh interpreter importing datasets
def test_hub_id_offline_from_the_hub_cache_snapshot(tmp_path):
    pytest.importorskip("datasets")
    _hub_snapshot(tmp_path / "home", "org/prefs")
    got = _probe(tmp_path / "home", "hf://datasets/org/prefs:en@train",
                 "hf://datasets/org/prefs:en@test", "hf://datasets/org/prefs:fr",
                 "hf://datasets/org/prefs:en", "hf://datasets/org/prefs@train",
                 "hf://datasets/org/prefs:de@train", "hf://datasets/org/prefs:en@valid",
                 "hf://datasets/org/absent@train")
    assert got["hf://datasets/org/prefs:en@train"]["rows"] == [[i + 1, r] for i, r in
                                                               enumerate(ROWS)]
    assert [o for _, o in got["hf://datasets/org/prefs:en@test"]["rows"]] == ROWS[:2]
    assert [o for _, o in got["hf://datasets/org/prefs:fr"]["rows"]] == ROWS[4:]  # one split
    assert got["hf://datasets/org/prefs:en"]["error"] == (
        "hf://datasets/org/prefs:en has several splits (train, test); choose one: "
        "--split train or 'hf://datasets/org/prefs?config=en&split=train'")
    assert got["hf://datasets/org/prefs@train"]["error"] == (
        "hf://datasets/org/prefs@train: the dataset has several configs; name one (its "
        "configs: en, fr): --config en or 'hf://datasets/org/prefs?config=en&split=train'")
    assert "no config 'de'" in got["hf://datasets/org/prefs:de@train"]["error"]
    assert got["hf://datasets/org/prefs:en@valid"]["error"] == (
        "hf://datasets/org/prefs:en@valid: no split 'valid'; splits: train, test")
    absent = got["hf://datasets/org/absent@train"]["error"]
    assert "org/absent is not in the local Hugging Face cache" in absent
    assert "hf download --repo-type dataset org/absent" in absent


@pytest.mark.slow  # a fresh interpreter importing datasets
def test_hub_id_offline_from_the_datasets_arrow_cache(tmp_path):
    """What an earlier non-streaming `load_dataset("org/prefs")` leaves in $HF_HOME/datasets."""
    pytest.importorskip("datasets")
    home = tmp_path / "home"
    files = tmp_path / "files"
    files.mkdir()
    _parquet(files / "train.parquet", ROWS)
    _parquet(files / "test.parquet", ROWS[:2])
    from datasets.packaged_modules.parquet.parquet import Parquet

    cache = home / "datasets"
    Parquet(cache_dir=str(cache), dataset_name="prefs", config_name="default",
            config_id="default", hash="0" * 16,
            data_files={"train": str(files / "train.parquet"),
                        "test": str(files / "test.parquet")}).download_and_prepare()
    (cache / "prefs").rename(cache / "org___prefs")  # the name a Hub id's cache has
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # either switch works
        got = _probe(home, "hf://datasets/org/prefs@train", "hf://datasets/org/prefs@test",
                     **({"HF_HUB_OFFLINE": "", var: "1"} if var != "HF_HUB_OFFLINE" else {}))
        assert got["hf://datasets/org/prefs@train"] == {
            "rows": [[i + 1, r] for i, r in enumerate(ROWS)], "count": 6}, var
        assert [o for _, o in got["hf://datasets/org/prefs@test"]["rows"]] == ROWS[:2]


# -- the same pairs and ids through `score`, whatever the form --------------------------------

def test_score_judges_the_same_pairs_with_the_same_ids_in_every_form(tmp_path):
    datasets = pytest.importorskip("datasets")
    from test_score import length_judge, settings

    from rmjudge.engine.fake import ScriptedEngine
    from rmjudge.runs.pipeline import score

    rows = [json.loads(line) for line in (DATA / "pandalm_5.jsonl").read_text().splitlines()]
    for r in rows[::2]:
        r["id"] = None  # these pairs get content-hash ids
    plain = tmp_path / "pairs.jsonl"
    plain.write_bytes(_jsonl(rows))
    (tmp_path / "pairs.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    (tmp_path / "pairs.jsonl.zst").write_bytes(_zst(plain.read_bytes()))
    (tmp_path / "shards").mkdir()
    _parquet(tmp_path / "shards" / "part-0.parquet", rows[:3])
    _parquet(tmp_path / "shards" / "part-1.parquet", rows[3:])
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))

    def judged(source: str, name: str):
        out = str(tmp_path / f"{name}.duckdb")
        score(source, ScriptedEngine(length_judge), settings(), output=out)
        con = duckdb.connect(out, read_only=True)
        try:
            return (sorted(con.execute("SELECT id, row_number, label, response_a, verdict "
                                       "FROM pairs").fetchall()),
                    sorted(con.execute("SELECT row_number, id, reason FROM errors").fetchall()))
        finally:
            con.close()

    want = judged(str(plain), "plain")
    pairs, errors = want
    assert len(pairs) == 4 and {"pandalm/1", "pandalm/3"} < {r[0] for r in pairs}
    assert len(errors) == 1 and "duplicate id" in errors[0][2]  # rows 1 and 3 are the same pair
    for name, source in (("gz", str(tmp_path / "pairs.jsonl.gz")),
                         ("zst", str(tmp_path / "pairs.jsonl.zst")),
                         ("glob", f"{tmp_path}/shards/*.parquet"),
                         ("saved", str(tmp_path / "saved"))):
        assert judged(source, name) == want, name
