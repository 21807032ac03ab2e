"""`rmjudge view`: the explorer's data against the store, its output rules, and the page itself
driven in a real browser (Debian's chromium + chromium-driver through selenium; those tests
skip with the reason when either is missing, and `.ci/run` installs them).

Stores: `analysis_fixture` (eight pairs judged by a scripted judge with known anchors, winning
reflections, a forced verdict and flips) and a hostile store (script tags, onerror images,
javascript: links, remote images and `</script>` in ids, texts, analyses and column names, and
a row that cannot be read). The browser tests share one Chromium (module fixture) and run on
one worker.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import duckdb
import orjson
import pytest
from analysis_fixture import build
from click.testing import CliRunner
from helpers import pref, refl

from rmjudge.cli import main
from rmjudge.engine.fake import ScriptedEngine, stage_of
from rmjudge.runs.pipeline import score
from rmjudge.review.select import slot_key
from rmjudge.core.settings import JudgeSettings
from rmjudge.view.data import FLAG_NAMES
from rmjudge.analysis.view_paths import is_view_dir
from rmjudge.view.site import DETAIL_CHUNK, build_view

PWN = "window.__pwned = (window.__pwned || 0) + 1"
HOSTILE = [
    f"<script>{PWN}</script>",
    f'<img src="x" onerror="{PWN}">',
    f"[click me](javascript:{PWN}) and <a href=\"javascript:{PWN}\">here</a>",
    '![tracker](https://example.com/pixel.png) <img src="https://example.com/p.png">',
    f"</script><script>{PWN}</script>",
    "<style>@import url(https://example.com/x.css);</style><iframe src=\"https://example.com\">",
    "<svg onload=\"" + PWN + "\"></svg> <object data=\"https://example.com/o.swf\"></object>",
]
HOSTILE_ID = f"</script><script>{PWN}</script>"
HOSTILE_COLUMN = f"</script><script>{PWN}</script>"


pytestmark = pytest.mark.xdist_group("view")  # one worker: the browser is started once


def _data(view: Path, kind: str) -> list:
    """The JSON arguments of every data file of `kind`, in order (`rmjudgeView.kind(k, X);`)."""
    out = []
    for f in sorted((view / "data").glob(f"{kind}-*.js")):
        text = f.read_text()
        head = f"rmjudgeView.{kind}("
        assert text.startswith(head) and text.endswith(");\n")
        k, _, body = text[len(head):-3].partition(",")
        assert int(k) == len(out)
        out.append(json.loads(body))
    return out


def _meta(view: Path) -> dict:
    text = (view / "data" / "meta.js").read_text()
    return json.loads(text[len("rmjudgeView.meta("):-3])


def _index(view: Path) -> dict:
    parts = _data(view, "list")
    meta = _meta(view)
    cols: dict = {}
    for p in parts:
        for k, v in p.items():
            if k == "groups":
                cols.setdefault(k, [[] for _ in v])
                for g, codes in zip(cols[k], v):
                    g.extend(codes)
            else:
                cols.setdefault(k, []).extend(v)
    for name, values in meta["vocab"].items():
        cols[name] = [None if c < 0 else values[c] for c in cols[name]]
    return cols


def _details(view: Path) -> list[dict]:
    return [d for part in _data(view, "detail") for d in part]


def rows(db: str, sql: str) -> list:
    con = duckdb.connect(db, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    return build(tmp_path_factory.mktemp("view"))


def _hostile_judge(req, i):
    if stage_of(req) == "reflection":
        return refl(1 if i % 2 == 0 else 2)
    text = HOSTILE[i % len(HOSTILE)] + "\n\n```html\n<script>" + PWN + "</script>\n```"
    return pref(1 if i % 3 else 2, -0.1 * (i + 1), text)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    src = d / "hostile.jsonl"
    lines = []
    for k, text in enumerate(HOSTILE):
        lines.append(orjson.dumps({
            "id": HOSTILE_ID if k == 0 else f"h{k}<img src=x onerror=\"{PWN}\">",
            "prompt": [{"role": "system", "content": HOSTILE[(k + 1) % len(HOSTILE)]},
                       {"role": "user", "content": text}],
            "chosen": HOSTILE[(k + 2) % len(HOSTILE)] + " good", "rejected": text,
            HOSTILE_COLUMN: text, "__proto__": {"polluted": True}, "subset": text[:20],
        }).decode())
    lines.insert(3, '{"id": "<script>' + PWN + '</script>", "prompt": oops')
    src.write_text("\n".join(lines) + "\n")
    out = str(d / "hostile.duckdb")
    s = score(str(src), ScriptedEngine(_hostile_judge), JudgeSettings(samples=3, seed=1),
              output=out)
    assert s.judged == len(HOSTILE) and s.errors == 1
    return out


# -- the data against the store ---------------------------------------------------------------
def test_list_and_details_hold_what_the_store_holds(judged, tmp_path):
    s = build_view(judged, str(tmp_path / "v"))
    view = tmp_path / "v"
    assert (s.pairs, s.errors) == (8, 0) and is_view_dir(str(view))
    idx = _index(view)
    store = rows(judged, """SELECT id, label, verdict, verdict_ab, verdict_ba, consistent, p_a,
                            length(response_a) FROM pairs ORDER BY row_number""")
    assert idx["id"] == [r[0] for r in store]
    assert idx["label"] == [r[1] for r in store] and idx["verdict"] == [r[2] for r in store]
    assert [(a, b) for a, b in zip(idx["verdict_ab"], idx["verdict_ba"])] == [(r[3], r[4]) for r in store]
    assert idx["p_a"] == [pytest.approx(r[6]) for r in store]
    assert idx["len_a"] == [r[7] for r in store]
    flipped = {r[0] for r in store if r[5] is False}
    assert {i for i, f in zip(idx["id"], idx["flags"]) if f & FLAG_NAMES["inconsistent"]} == flipped
    forced = {r[0] for r in rows(judged, "SELECT DISTINCT pair_id FROM samples "
                                         "WHERE verdict_source = 'forced'")}
    assert forced == {"p2"}
    assert {i for i, f in zip(idx["id"], idx["flags"]) if f & FLAG_NAMES["forced"]} == forced
    meta = _meta(view)
    assert [g["name"] for g in meta["groups"]] == ["source", "subset"]
    assert meta["settings"]["samples"] == 4 and meta["count"] == 8

    details = {d["id"]: d for d in _details(view)}
    for pid, a, b in rows(judged, "SELECT id, response_a, response_b FROM pairs"):
        assert details[pid]["slot_key"] == slot_key(a, b)  # what review import checks
    got = [tuple(s) for s in details["p5"]["samples"]]
    want = rows(judged, """SELECT "order", stage, idx, text, prediction, confidence, is_anchor,
                           reflection_of, reflection_slot, won_reflection, verdict_source, tokens,
                           finish_reason, p_first FROM samples WHERE pair_id = 'p5'
                           ORDER BY "order", stage DESC, idx""")
    assert got == [tuple(r) for r in want]
    anchor = [s for s in got if s[1] == "rollout" and s[0] == "ab" and s[6]]
    assert [s[2] for s in anchor] == [0]  # the wrong, most confident first rollout
    assert sorted(s[2] for s in got if s[0] == "ab" and s[9]) == [1, 2, 3]
    assert ["source", "handwritten"] in details["p5"]["columns"]
    texts = [t for part in _data(view, "text") for t in part]
    assert "william shakespeare" in texts[7] and texts[7] == texts[7].lower()


def test_the_run_settings_name_the_lora_a_run_applied(judged, tmp_path):
    """A run with a LoRA (the demo format adapter, `--lora`) records its file and sha256; the
    explorer's run settings name both, and a run without one says none."""
    import shutil

    import duckdb

    store = str(tmp_path / "lora.duckdb")
    shutil.copy(judged, store)
    build_view(store, str(tmp_path / "plain"))
    assert all(r["lora"] is None for r in _meta(tmp_path / "plain")["runs"])
    with duckdb.connect(store) as c:
        c.execute("UPDATE runs SET lora_path = '/x/adapters/demo.lora.gguf', "
                  "lora_sha256 = 'ab' || repeat('0', 62)")
    build_view(store, str(tmp_path / "with"))
    runs = _meta(tmp_path / "with")["runs"]
    assert runs and all(r["lora"] == "demo.lora.gguf" and r["lora_sha256"].startswith("ab0")
                        for r in runs)


def test_a_served_judge_is_named_by_its_model_not_by_the_urls_last_part(judged, tmp_path):
    """A `--server http://host:8080/v1` run records the URL as its model path: the explorer
    showed `model v1`; it shows the served model's name at that URL."""
    store = str(tmp_path / "served.duckdb")
    shutil.copy(judged, store)
    with duckdb.connect(store) as c:
        settings = json.loads(c.execute("SELECT settings FROM runs LIMIT 1").fetchone()[0])
        settings.update(model_sha256="", model_name="qwen3-judge")
        c.execute("UPDATE runs SET model_path = 'http://127.0.0.1:8080/v1', model_sha256 = '', "
                  "settings = ?", [json.dumps(settings)])
    build_view(store, str(tmp_path / "v"))
    runs = _meta(tmp_path / "v")["runs"]
    assert runs and all(r["model"] == "qwen3-judge at http://127.0.0.1:8080/v1" for r in runs)
    build_view(judged, str(tmp_path / "local"))
    assert all(r["model"] and "/" not in r["model"] and r["model"] != "v1"
               for r in _meta(tmp_path / "local")["runs"])


def test_a_read_only_folder_says_nothing_was_placed_not_rerun_to_resume(judged, tmp_path):
    """An explorer is written whole, so there is nothing to resume."""
    import subprocess

    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)],
                       check=False)
        if not os.path.ismount(ro):
            pytest.skip("cannot mount a read-only file system here")
    else:
        ro.chmod(0o555)
    try:
        out = ro / "x.view"
        r = CliRunner().invoke(main, ["view", judged, "-o", str(out)])
        assert r.exit_code == 4 and r.output.count("\n") == 1, r.output
        assert r.output.startswith(f"Error: cannot write {out}: "), r.output
        assert "nothing was placed" in r.output and "resume" not in r.output, r.output
    finally:
        if os.path.ismount(ro):
            subprocess.run(["umount", str(ro)], check=False)


def test_exports_and_error_rows(tmp_path):
    out = build(tmp_path, "e.parquet")
    s = build_view(out)
    assert s.output == str(tmp_path / "e.view") and s.pairs == 8
    assert len(_details(tmp_path / "e.view")[4]["samples"]) == 11  # (A,B) 4 + 3 reflections, (B,A) 4
    out = build(tmp_path, "j.jsonl")
    build_view(out)
    assert [len(d["samples"]) for d in _details(tmp_path / "j.view")] == \
        [len(d["samples"]) for d in _details(tmp_path / "e.view")]
    (tmp_path / "e.samples.parquet").unlink()  # an export without its samples: pairs only
    build_view(str(tmp_path / "e.parquet"))
    assert [d["samples"] for d in _details(tmp_path / "e.view")] == [[]] * 8
    assert _meta(tmp_path / "e.view")["samples"] is False

    src = str(Path(__file__).parent / "data" / "mixed_bad.jsonl")
    judged = str(tmp_path / "bad.duckdb")
    score(src, ScriptedEngine(lambda req, i: refl(1) if stage_of(req) == "reflection"
                                   else pref(1 + i % 2)), JudgeSettings(samples=2), output=judged)
    n_pairs, n_errors = rows(judged, "SELECT (SELECT count(*) FROM pairs), "
                                     "(SELECT count(*) FROM errors)")[0]
    s = build_view(judged, str(tmp_path / "bad-view"))
    assert (s.pairs, s.errors) == (n_pairs, n_errors) and n_errors > 0
    idx = _index(tmp_path / "bad-view")
    assert idx["row"] == sorted(idx["row"])  # pairs and error rows in row order
    err = [d for d in _details(tmp_path / "bad-view") if d["kind"] == "error"]
    reasons = {r[0]: r[1] for r in rows(judged, "SELECT row_number, reason FROM errors")}
    assert {d["row"]: d["error"]["reason"] for d in err} == reasons
    assert sum(1 for f in idx["flags"] if f & FLAG_NAMES["error_row"]) == n_errors


def test_details_are_chunked_for_large_tables(tmp_path, monkeypatch):
    from rmjudge.view import site

    monkeypatch.setattr(site, "DETAIL_CHUNK", 3)
    monkeypatch.setattr(site, "LIST_CHUNK", 5)
    monkeypatch.setattr(site, "TEXT_CHUNK", 4)
    judged = build(tmp_path)
    s = build_view(judged, str(tmp_path / "v"))
    assert s.parts == {"list": 2, "detail": 3, "text": 2}
    meta = _meta(tmp_path / "v")
    assert meta["chunks"]["detail_size"] == 3
    assert [d["id"] for d in _details(tmp_path / "v")] == _index(tmp_path / "v")["id"]
    assert DETAIL_CHUNK >= 50  # the real size keeps the file count down


def test_output_rules(judged, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    r = CliRunner().invoke(main, ["view", judged, "-o", str(foreign)])
    assert r.exit_code == 1 and r.output.count("Error:") == 1 and "did not write" in r.output
    assert (foreign / "notes.txt").read_text() == "keep me" and len(os.listdir(foreign)) == 1
    afile = tmp_path / "f.html"
    afile.write_text("x")
    r = CliRunner().invoke(main, ["view", judged, "-o", str(afile)])
    assert r.exit_code == 1 and "not a folder" in r.output and afile.read_text() == "x"
    r = CliRunner().invoke(main, ["view", str(tmp_path / "missing.duckdb")])
    assert r.exit_code == 1 and r.output.count("Error:") == 1 and "Traceback" not in r.output
    # an earlier explorer is replaced whole (no stale data file survives)
    out = tmp_path / "v"
    r = CliRunner().invoke(main, ["view", judged, "-o", str(out)],
                           env={"COLUMNS": "1000"})  # whole lines (80: test_output_width.py)
    assert r.exit_code == 0, r.output
    assert "8 pairs" in r.output and str(out / "index.html") in r.output
    (out / "data" / "detail-00099.js").write_text("stale")
    r = CliRunner().invoke(main, ["view", judged, "-o", str(out)])
    assert r.exit_code == 0 and not (out / "data" / "detail-00099.js").exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".v.new-")] == []


def test_an_explorer_holding_other_files_or_the_table_is_never_replaced(judged, tmp_path):
    """Replacing an explorer deletes its folder whole: one the user saved notes in, one that
    holds the judged table itself, or a symbolic link to one is refused and left as it was."""
    out = tmp_path / "v"
    assert CliRunner().invoke(main, ["view", judged, "-o", str(out)]).exit_code == 0
    (out / "notes.txt").write_text("keep me")
    r = CliRunner().invoke(main, ["view", judged, "-o", str(out)])
    assert r.exit_code == 1 and r.output.count("Error:") == 1 and "notes.txt" in r.output
    assert (out / "notes.txt").read_text() == "keep me"
    (out / "notes.txt").unlink()
    inner = out / "in.duckdb"
    shutil.copy(judged, inner)
    r = CliRunner().invoke(main, ["view", str(inner), "-o", str(out)])
    assert r.exit_code == 1 and "holds the judged table" in r.output and inner.exists()
    inner.unlink()
    link = tmp_path / "vlink"
    link.symlink_to(out)
    r = CliRunner().invoke(main, ["view", judged, "-o", str(link)])
    assert r.exit_code == 1 and "symbolic link" in r.output and link.is_symlink()
    assert not any(p.startswith(".vlink") for p in os.listdir(tmp_path))


def test_a_full_disk_leaves_the_earlier_explorer(judged, tmp_path, monkeypatch):
    from rmjudge.core.errors import DiskError
    from rmjudge.view import site

    out = tmp_path / "v"
    build_view(judged, str(out))
    before = sorted(p.name for p in (out / "data").iterdir())
    calls = []

    def full(path, data, check=None):
        calls.append(path)
        if len(calls) > 3:
            raise DiskError(f"cannot write {path}: No space left on device", path=path,
                            reason="No space left on device")

    monkeypatch.setattr(site, "write_file", full)
    r = CliRunner().invoke(main, ["view", judged, "-o", str(out)])
    assert r.exit_code == 4 and r.output.count("Error:") == 1
    assert f"cannot write {out}: No space left on device; nothing was placed" in r.output
    assert sorted(p.name for p in (out / "data").iterdir()) == before
    assert [p for p in os.listdir(tmp_path) if ".new-" in p] == []


def test_report_and_explorer_link_each_other(judged):
    pytest.importorskip("matplotlib")
    stem = judged[: -len(".duckdb")]
    r = CliRunner().invoke(main, ["report", judged])
    assert r.exit_code == 0, r.output
    build_view(judged)
    assert _meta(Path(f"{stem}.view"))["report"] == "../judged.report.html"
    r = CliRunner().invoke(main, ["report", judged])
    assert r.exit_code == 0, r.output
    assert 'href="judged.view/index.html"' in Path(f"{stem}.report.html").read_text()


# -- in the browser --------------------------------------------------------------------------
def _browser_missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install '.[test]')"
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "no chromium (Debian: apt-get install -y chromium chromium-driver)"
    if not shutil.which("chromedriver"):
        return "no chromedriver (Debian: apt-get install -y chromium-driver)"
    return None


browser = pytest.mark.skipif(_browser_missing() is not None, reason=str(_browser_missing()))

WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__violations.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--window-size=1400,900"):
        opts.add_argument(a)
    profile = tempfile.mkdtemp(prefix="rmjudge-view-test-")
    opts.add_argument(f"--user-data-dir={profile}")
    opts.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    d = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    d.downloads = tmp_path_factory.mktemp("downloads")
    d.execute_cdp_cmd("Browser.setDownloadBehavior",
                      {"behavior": "allow", "downloadPath": str(d.downloads)})
    d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def wait(driver, js: str, limit: float = 20.0):
    t = time.monotonic()
    while True:
        got = driver.execute_script(js)
        if got:
            return got
        if time.monotonic() - t > limit:
            raise AssertionError(f"timed out waiting for: {js}")
        time.sleep(0.02)


def open_page(driver, view: Path, hash_: str = "") -> None:
    driver.get("about:blank")
    driver.get((view / "index.html").as_uri() + hash_)
    wait(driver, "return document.body && document.body.dataset.ready === '1'")


def shown(driver) -> list[str]:
    """The ids of the rows drawn in the list (all of them: these lists are short)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#list .row')).sort(function (a, b) {"
        " return a.dataset.pos - b.dataset.pos; }).map(function (r) {"
        " return r.querySelector('.c-id').textContent; })")


def chip(driver, name: str) -> None:
    driver.execute_script(f"document.querySelector('.chip[data-chip=\"{name}\"]').click()")


def count(driver) -> str:
    return driver.execute_script("return document.getElementById('count').textContent")


@pytest.fixture(scope="module")
def judged_view(judged, tmp_path_factory):
    out = tmp_path_factory.mktemp("pages") / "judged.view"
    build_view(judged, str(out))
    return out


@browser
def test_filters_search_and_sorting_follow_the_store(driver, judged, judged_view):
    open_page(driver, judged_view)
    every = [r[0] for r in rows(judged, "SELECT id FROM pairs ORDER BY row_number")]
    assert shown(driver) == every and count(driver) == "8 of 8 shown"
    chip(driver, "inconsistent")
    flipped = [r[0] for r in rows(judged, "SELECT id FROM pairs WHERE consistent = false "
                                          "ORDER BY row_number")]
    assert shown(driver) == flipped
    chip(driver, "inconsistent")
    chip(driver, "disagree")
    disagree = [r[0] for r in rows(judged, "SELECT id FROM pairs WHERE label IN ('A','B') AND "
                                           "verdict IN ('A','B','tie') AND verdict <> label "
                                           "ORDER BY row_number")]
    assert shown(driver) == disagree
    # the chips' counts follow the other filters: forced verdicts among the disagreeing pairs
    n_forced = driver.execute_script(
        "return document.querySelector('.chip[data-chip=\"forced\"] .n').textContent")
    assert int(n_forced) == len({"p2"} & set(disagree))
    chip(driver, "disagree")
    sel = driver.execute_script(
        "var s = document.querySelectorAll('#groups select')[1];"
        "s.value = String(Array.from(s.options).findIndex(function (o) {"
        " return o.text === 'subset: y'; }) - 1); s.dispatchEvent(new Event('change'));"
        "return s.value")
    assert sel != "-1"
    assert shown(driver) == [r[0] for r in rows(judged, "SELECT id FROM pairs WHERE subset = 'y' "
                                                        "ORDER BY row_number")]
    driver.execute_script("var s = document.querySelectorAll('#groups select')[1]; s.value = '';"
                          "s.dispatchEvent(new Event('change'))")
    # full-text search reads the responses (not the ids): Shakespeare is in p8's response A
    driver.execute_script("var s = document.getElementById('search'); s.value = 'SHAKESPEARE';"
                          "s.dispatchEvent(new Event('input'))")
    wait(driver, "return /searched ids/.test(document.getElementById('search-status').textContent)")
    assert shown(driver) == ["p8"]
    driver.execute_script("var s = document.getElementById('search'); s.value = '';"
                          "s.dispatchEvent(new Event('input'))")
    wait(driver, "return document.querySelectorAll('#list .row').length === 8")
    # sort by margin: lowest first puts the ties (p_a 0.5) before the rest
    driver.execute_script("var s = document.getElementById('sort'); s.value = 'margin-asc';"
                          "s.dispatchEvent(new Event('change'))")
    margins = dict(rows(judged, "SELECT id, abs(p_a - 0.5) FROM pairs"))
    got = [margins[i] for i in shown(driver)]
    assert got == sorted(got)
    driver.execute_script("var s = document.getElementById('sort'); s.value = 'row';"
                          "s.dispatchEvent(new Event('change'))")
    # Enter opens the selected pair (p8: the selection stays on the pair the search found);
    # the browser's Back returns to the list
    driver.find_element("tag name", "body").send_keys("\ue007")
    wait(driver, "return document.body.dataset.opened === 'pair=p8'")
    driver.back()
    wait(driver, "return !document.body.dataset.opened && "
                 "!document.getElementById('list-view').hidden")


@browser
def test_numbers_say_what_they_are(driver, judged, judged_view):
    """The confidence is a mean log-probability (0 or negative): the list's header says so in
    full, not cut, and its tooltip (and each cell's) says what it is; every header has one; the
    pair page labels each order's and each rollout's confidence the same way; the flips chip is
    named as the docs name it."""
    open_page(driver, judged_view)
    head = driver.execute_script("""
        var e = document.querySelector('#list-head .c-conf');
        return {text: e.textContent, title: e.title, cut: e.scrollWidth > e.clientWidth,
                cell: document.querySelector('#list .row .c-conf').title,
                titled: Array.from(document.querySelectorAll('#list-head .c')).every(
                    function (h) { return h.title.length > 5; }),
                chip: document.querySelector('.chip[data-chip="inconsistent"]').textContent}""")
    assert head["text"] == "conf. (log p)" and not head["cut"], head
    assert "mean log-probability" in head["title"] and "0 = certain" in head["title"]
    assert "mean log-probability" in head["cell"] and head["titled"]
    assert head["chip"].startswith("flips (orders disagree)")
    open_page(driver, judged_view, "#pair=p5")
    wait(driver, "return document.body.dataset.opened === 'pair=p5' && "
                 "document.querySelectorAll('.order').length === 2")
    kv = driver.execute_script("""
        return Array.from(document.querySelectorAll('.order-head .kv, .rollout .rtop .kv')).map(
            function (e) { return [e.textContent, e.title]; })""")
    orders = [(t, h) for t, h in kv if t.startswith("confidence (mean log p) ")]
    rollouts = [(t, h) for t, h in kv if t.startswith("conf. (log p) ")]
    assert len(orders) == 2 and len(rollouts) >= 2
    assert all("mean log-probability" in h for _, h in orders + rollouts)
    assert all(float(t.split()[-1]) <= 0 for t, _ in orders + rollouts)


@browser
def test_a_pair_shows_its_anchor_reflections_and_survives_a_reload(driver, judged, judged_view):
    open_page(driver, judged_view, "#pair=p5")
    wait(driver, "return document.body.dataset.opened === 'pair=p5' && "
                 "document.querySelectorAll('.order').length === 2")
    ab = driver.execute_script("""
        var o = document.querySelectorAll('.order')[0];
        return {anchor: Array.from(o.querySelectorAll('.rollout.anchor .ridx')).map(function (e) { return e.textContent; }),
                won: Array.from(o.querySelectorAll('.rollout.won .ridx')).map(function (e) { return e.textContent; }),
                refl: o.querySelectorAll('.reflection').length,
                title: document.querySelector('.pid').textContent}""")
    anchor = rows(judged, "SELECT idx FROM samples WHERE pair_id = 'p5' AND \"order\" = 'ab' "
                          "AND stage = 'rollout' AND is_anchor")
    won = rows(judged, "SELECT idx FROM samples WHERE pair_id = 'p5' AND \"order\" = 'ab' "
                       "AND won_reflection ORDER BY idx")
    n_refl = rows(judged, "SELECT count(*) FROM samples WHERE pair_id = 'p5' AND "
                          "\"order\" = 'ab' AND stage = 'reflection'")[0][0]
    assert ab["anchor"] == [f"#{r[0]}" for r in anchor]
    assert ab["won"] == [f"#{r[0]}" for r in won] and ab["refl"] == n_refl == 3
    assert ab["title"] == "Pair p5"
    driver.refresh()
    wait(driver, "return document.body.dataset.opened === 'pair=p5' && "
                 "document.querySelectorAll('.order').length === 2")
    # keyboard: j opens the next pair of the list, Escape goes back to the list
    body = driver.find_element("tag name", "body")
    body.send_keys("j")
    wait(driver, "return document.body.dataset.opened === 'pair=p6'")
    assert driver.execute_script("return location.hash") == "#pair=p6"
    body.send_keys("\ue00c")  # Escape
    wait(driver, "return !document.body.dataset.opened && "
                 "!document.getElementById('list-view').hidden")


@browser
def test_labels_marked_on_the_page_import_back(driver, judged, judged_view, tmp_path):
    open_page(driver, judged_view)
    driver.execute_script("localStorage.clear()")
    open_page(driver, judged_view)
    body = driver.find_element("tag name", "body")
    body.send_keys("a")  # p1 (the selected row): A
    body.send_keys("j")
    body.send_keys("j")
    body.send_keys("b")  # p3: B
    body.send_keys("j")
    body.send_keys("s")  # p4: skipped
    body.send_keys("\ue007")  # Enter opens p4
    wait(driver, "return document.body.dataset.opened === 'pair=p4'")
    body.send_keys("t")  # p4 now tie; the page moves on to p5
    wait(driver, "return document.body.dataset.opened === 'pair=p5'")
    body.send_keys("s")  # p5 skipped
    wait(driver, "return document.body.dataset.opened === 'pair=p6'")
    driver.execute_script("document.getElementById('reviewer').value = 'ana';"
                          "document.getElementById('reviewer').dispatchEvent(new Event('change'))")
    assert driver.execute_script("return document.getElementById('download').textContent") == \
        "Download labels (4)"
    for f in driver.downloads.iterdir():
        f.unlink()
    driver.execute_script("document.getElementById('download').click()")
    wait(driver, "return document.body.dataset.downloaded === '4'")
    t = time.monotonic()
    target = driver.downloads / "judged.labels.jsonl"
    while not target.exists() and time.monotonic() - t < 10:
        time.sleep(0.05)
    lines = [json.loads(x) for x in target.read_text().splitlines()]
    assert {x["id"]: x["human_label"] for x in lines} == {"p1": "A", "p3": "B", "p4": "tie",
                                                          "p5": None}
    store = shutil.copy(judged, tmp_path / "copy.duckdb")
    r = CliRunner().invoke(main, ["review", "import", str(store), str(target)])
    assert r.exit_code == 0, r.output
    assert "imported 3 labels" in r.output and "1 row/task has no label yet" in r.output
    assert rows(str(store), "SELECT pair_id, reviewer, label FROM human_labels ORDER BY 1") == [
        ("p1", "ana", "A"), ("p3", "ana", "B"), ("p4", "ana", "tie")]
    # the imported labels are the list's human labels in the next explorer of that store
    build_view(str(store), str(tmp_path / "labelled"))
    idx = _index(tmp_path / "labelled")
    assert dict(zip(idx["id"], idx["human"])) == {"p1": "A", "p2": None, "p3": "B", "p4": "tie",
                                                   "p5": None, "p6": None, "p7": None, "p8": None}
    # the marks survive a reload of the page
    open_page(driver, judged_view)
    assert driver.execute_script("return document.getElementById('download').textContent") == \
        "Download labels (4)"


@browser
def test_hostile_texts_run_no_script_and_load_nothing(driver, hostile, tmp_path):
    out = tmp_path / "hostile.view"
    build_view(hostile, str(out))
    open_page(driver, out)
    ids = [r[0] for r in rows(hostile, "SELECT id FROM pairs ORDER BY row_number")]
    assert HOSTILE_ID in shown(driver) and len(shown(driver)) == len(ids) + 1  # + the error row
    # every pair, with every analysis opened, and the error row
    for key in ["pair=" + driver.execute_script("return encodeURIComponent(arguments[0])", i)
                for i in ids] + ["row=4"]:
        driver.execute_script("location.hash = arguments[0]", key)
        wait(driver, f"return document.body.dataset.opened === {json.dumps(key)}")
        driver.execute_script("document.querySelectorAll('details').forEach(function (d) {"
                              " d.open = true; });"
                              "document.querySelectorAll('.resp .mini').forEach(function (b) {"
                              " b.click(); b.click(); });")
    driver.execute_script("location.hash = arguments[0]",
                          "pair=" + driver.execute_script("return encodeURIComponent(arguments[0])", ids[0]))
    wait(driver, "return document.querySelectorAll('.order').length === 2")
    driver.execute_script("document.querySelectorAll('details').forEach(function (d) { d.open = true; })")
    text = driver.execute_script("return document.getElementById('pair-view').textContent")
    assert "window.__pwned" in text and "<img src=" in text  # the texts are there, as text
    # Markdown from the data: its code block is a code element holding the script as text
    code = driver.execute_script("return Array.from(document.querySelectorAll('#pair-view pre.code code'))"
                                 ".map(function (c) { return c.textContent; })")
    assert f"<script>{PWN}</script>" in code
    driver.execute_script("location.hash = ''")
    driver.execute_script("var s = document.getElementById('search'); s.value = 'onerror';"
                          "s.dispatchEvent(new Event('input'))")
    wait(driver, "return /searched ids/.test(document.getElementById('search-status').textContent)")
    time.sleep(0.3)
    state = driver.execute_script("""return {
        pwned: window.__pwned || 0, violations: window.__violations,
        remote: performance.getEntriesByType('resource').map(function (e) { return e.name; })
                  .filter(function (u) { return u.indexOf('file://') !== 0; }),
        made: document.querySelectorAll('#pair-view img, #pair-view script, #pair-view iframe,'
              + ' #pair-view a, #pair-view svg, #pair-view object, #pair-view style').length,
        proto: ({}).polluted === undefined}""")
    assert state == {"pwned": 0, "violations": [], "remote": [], "made": 0, "proto": True}
    logs = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert logs == []




# -- a ranked store (rmjudge rank) ------------------------------------------------------------
RANK_FLIP = "answer 1 q=6"
P3 = "p3" + HOSTILE_ID  # a prompt id with </script> and a script in it


@pytest.fixture(scope="module")
def ranked(tmp_path_factory):
    """Four prompts of four candidates ranked by a scripted judge that prefers the larger q=N
    (p0: one candidate always takes slot 1, so some comparisons are ties; p1: its gold is the
    reverse of the judge; p2: the engine fails on its candidate 3), hostile texts in a prompt
    and a candidate, and a prompt that cannot be ranked."""
    from helpers import quality_engine

    from rmjudge.core.types import Generation
    from rmjudge.rank import rank

    d = tmp_path_factory.mktemp("ranked")
    objs = []
    for p in range(4):
        vals = [(p * 7 + c * 5) % 11 + c for c in range(4)]
        objs.append({"id": P3 if p == 3 else f"p{p}", "prompt": f"question {p} " + HOSTILE[p], "subset": f"s{p % 2}",
                     "responses": [f"answer {c} q={v}" + (" " + HOSTILE[c] if p == 3 else "")
                                   + (" FAILME" if (p, c) == (2, 3) else "")
                                   for c, v in enumerate(vals)],
                     "ratings": [-v for v in vals] if p == 1 else vals})
    objs.insert(2, {"id": "lonely", "prompt": "q " + HOSTILE[0], "responses": [HOSTILE[1]]})
    src = d / "cands.jsonl"
    src.write_text("".join(json.dumps(o) + "\n" for o in objs))
    out = str(d / "cands.ranked.duckdb")
    base = quality_engine(flip={RANK_FLIP})

    def respond(req, i):
        if "FAILME" in req.messages[-1]["content"]:
            return Generation("", [], "error", error="the engine crashed")
        return base.respond(req, i)

    s = rank(str(src), out, engine=ScriptedEngine(respond),
             judge=JudgeSettings(samples=2, max_tokens=32, seed=3))
    assert (s.ranked, s.problems, s.failed) == (4, 1, 3)
    return out


@pytest.fixture(scope="module")
def ranked_view(ranked, tmp_path_factory):
    out = tmp_path_factory.mktemp("rpages") / "ranked.view"
    build_view(ranked, str(out))
    return out


def test_a_ranked_explorer_holds_the_stores_rankings(ranked, ranked_view):
    meta = _meta(ranked_view)
    assert meta["ranked"]["prompts"] == 4 and meta["ranked"]["errors"] == 1
    idx = {}
    for part in _data(ranked_view, "plist"):
        for k, v in part.items():
            idx.setdefault(k, []).extend(v)
    assert idx["id"] == ["p0", "p1", "lonely", "p2", P3] and idx["row"] == [1, 2, 3, 4, 5]
    flags = meta["ranked"]["flags"]
    assert [bool(f & flags["disagree"]) for f in idx["flags"]] == [False, True, False, False,
                                                                  False]
    assert bool(idx["flags"][2] & flags["error_row"]) and "needs at least two" in idx["prompt"][2]
    assert [bool(f & flags["failed"]) for f in idx["flags"]] == [False, False, False, True,
                                                                False]
    details = [d for part in _data(ranked_view, "pdetail") for d in part]
    want = rows(ranked, "SELECT prompt_id, candidate, rank, score, wins, losses, ties, "
                        "confidence, gold_rank, response FROM rankings ORDER BY input_row, rank")
    got = [(d["id"], c[0], c[1], c[2], c[3], c[4], c[5], c[7], c[8], c[9])
           for d in details if d["kind"] == "prompt" for c in d["candidates"]]
    assert got == [(r[0], r[1], r[2], pytest.approx(r[3], abs=1e-6), r[4], r[5], r[6],
                    pytest.approx(r[7], abs=1e-6), r[8], r[9]) for r in want]
    games = {g[2]: g for d in details if d["kind"] == "prompt" for g in d["games"]
             if g[3] != "failed"}
    failed = [g for d in details if d["kind"] == "prompt" for g in d["games"] if g[3] == "failed"]
    errs = rows(ranked, "SELECT row_number FROM errors WHERE row_number % 10000 <> 0 ORDER BY 1")
    assert sorted(g[7] for g in failed) == [r[0] for r in errs] and len(failed) == 3
    assert all(3 in g[:2] for g in failed)  # the comparisons of p2's failing candidate 3
    store = rows(ranked, "SELECT id, cand_a, cand_b, verdict FROM pairs")
    assert {k: (g[0], g[1], g[3]) for k, g in games.items()} == {
        r[0]: (r[1], r[2], r[3]) for r in store}
    assert details[2]["kind"] == "error" and details[2]["row"] == 3


@browser
def test_the_prompts_of_a_ranked_store_filter_search_and_open(driver, ranked, ranked_view):
    open_page(driver, ranked_view)
    driver.execute_script("localStorage.clear()")
    open_page(driver, ranked_view)

    def prompts():
        return driver.execute_script(
            "return Array.from(document.querySelectorAll('#plist .row')).sort(function (a, b) {"
            " return a.dataset.pos - b.dataset.pos; }).map(function (r) {"
            " return r.querySelector('.c-id').textContent; })")

    def pchip(name):
        driver.execute_script(f"document.querySelector('#pchips .chip[data-chip=\"{name}\"]')"
                              ".click()")

    assert prompts() == ["p0", "p1", "lonely", "p2", P3]
    assert driver.execute_script("return document.getElementById('list-view').hidden")
    marks_key = "return getComputedStyle(document.querySelector('.k-mark')).display"
    assert driver.execute_script(marks_key) == "none"  # prompts take no A/B marks
    pchip("disagree")
    assert prompts() == ["p1"]
    pchip("disagree")
    pchip("errors")
    assert prompts() == ["lonely", "p2"]  # not ranked; three comparisons the engine failed
    pchip("errors")
    # low confidence: the top candidate of p0 (ties around it) is the least sure
    conf = dict(rows(ranked, "SELECT prompt_id, confidence FROM rankings WHERE rank = 1"))
    driver.execute_script("var s = document.getElementById('lowconf'); s.value = arguments[0];"
                          "s.dispatchEvent(new Event('input'))", str(round(conf["p0"] + 0.01, 2)))
    pchip("lowconf")
    assert prompts() == sorted(p for p, c in conf.items() if c <= conf["p0"] + 0.01)
    pchip("lowconf")
    driver.execute_script("var s = document.getElementById('psearch'); s.value = 'Q=12';"
                          "s.dispatchEvent(new Event('input'))")
    wait(driver, "return /searched ids/.test(document.getElementById('psearch-status')"
                 ".textContent)")
    hits = rows(ranked, "SELECT DISTINCT prompt_id FROM rankings WHERE response LIKE '%q=12%' "
                        "ORDER BY input_row")
    assert prompts() == [r[0] for r in hits] and hits
    driver.execute_script("var s = document.getElementById('psearch'); s.value = '';"
                          "s.dispatchEvent(new Event('input'))")
    wait(driver, "return document.querySelectorAll('#plist .row').length === 5")
    # Enter opens the first prompt: its candidates in rank order, the K x K matrix
    driver.find_element("tag name", "body").send_keys("\ue007")
    wait(driver, "return document.body.dataset.opened === 'prompt=p0'")
    order = driver.execute_script("return Array.from(document.querySelectorAll('tr.cand'))"
                                  ".map(function (r) { return Number(r.dataset.candidate); })")
    assert order == [r[0] for r in rows(ranked, "SELECT candidate FROM rankings WHERE "
                                                "prompt_id = 'p0' ORDER BY rank")]
    cells = driver.execute_script(
        "return Array.from(document.querySelectorAll('table.matrix button.res')).map("
        "function (b) { return [b.dataset.pair, b.textContent]; })")
    assert len(cells) == 12 and {c for _, c in cells} >= {"W", "L", "½"}
    verdicts = dict(rows(ranked, "SELECT id, verdict FROM pairs WHERE prompt_id = 'p0'"))
    assert sorted({p for p, _ in cells}) == sorted(verdicts)
    assert sum(c == "½" for _, c in cells) == 2 * sum(v == "tie" for v in verdicts.values())
    # a cell opens its comparison with both orders; Esc returns to the prompt, Back as well
    pid = cells[0][0]
    driver.execute_script("document.querySelector('table.matrix button.res').click()")
    wait(driver, "return document.body.dataset.opened === 'pair=' + encodeURIComponent("
                 f"{json.dumps(pid)}) && document.querySelectorAll('.order').length === 2")
    assert driver.execute_script(marks_key) != "none"  # a comparison does
    facts = driver.execute_script("return [document.querySelector('#pair-view .pid').textContent,"
                                  " document.querySelector('#pair-view .facts').textContent]")
    a, b = rows(ranked, f"SELECT cand_a, cand_b FROM pairs WHERE id = '{pid}'")[0]
    assert facts[0] == f"Comparison {pid}"  # the user's row, not row * 10000 + n
    assert f"row 1candidate #{a} as A, #{b} as B" in facts[1]
    driver.find_element("tag name", "body").send_keys("\ue00c")
    wait(driver, "return document.body.dataset.opened === 'prompt=p0'")
    driver.execute_script("document.querySelector('table.matrix button.res').click()")
    wait(driver, "return /^pair=/.test(document.body.dataset.opened || '')")
    driver.back()
    wait(driver, "return document.body.dataset.opened === 'prompt=p0'")
    # a comparison opened from the comparisons' list links up to its prompt
    driver.execute_script("location.hash = 'pair=' + encodeURIComponent('p1#0-1')")
    wait(driver, "return document.body.dataset.opened === 'pair=p1%230-1'")
    driver.execute_script("document.querySelector('button[data-prompt]').click()")
    wait(driver, "return document.body.dataset.opened === 'prompt=p1' && "
                 "document.querySelectorAll('tr.cand').length === 4")
    driver.find_element("tag name", "body").send_keys("j")
    wait(driver, "return document.body.dataset.opened === 'prompt-row=3'")
    assert "needs at least two" in driver.execute_script(
        "return document.getElementById('prompt-view').textContent")
    # p2's failed comparisons are "?" cells that open their error rows
    driver.find_element("tag name", "body").send_keys("j")
    wait(driver, "return document.body.dataset.opened === 'prompt=p2'")
    assert driver.execute_script("return document.querySelectorAll("
                                 "'table.matrix button.res[data-row]').length") == 6
    driver.execute_script("document.querySelector('table.matrix button.res[data-row]').click()")
    wait(driver, "return /^row=4000[1-6]$/.test(document.body.dataset.opened || '')")
    assert "the engine crashed" in driver.execute_script(
        "return document.getElementById('pair-view').textContent")
    driver.find_element("tag name", "body").send_keys("\ue00c")
    wait(driver, "return document.body.dataset.opened === 'prompt=p2'")
    driver.find_element("tag name", "body").send_keys("\ue00c")
    wait(driver, "return !document.body.dataset.opened && "
                 "!document.getElementById('prompts-view').hidden")
    # the comparisons' tab is the pairwise explorer
    driver.execute_script("document.getElementById('tab-pairs').click()")
    n = rows(ranked, "SELECT (SELECT count(*) FROM pairs) + (SELECT count(*) FROM errors)")[0][0]
    assert count(driver) == f"{n} of {n} shown" and shown(driver)[0] == "p0#0-1"
    assert driver.execute_script("return document.querySelector('#list .row .c-row')"
                                 ".textContent") == "1"


@browser
def test_hostile_texts_in_a_ranked_store_run_no_script(driver, ranked, ranked_view):
    open_page(driver, ranked_view)
    p3 = "prompt=" + driver.execute_script("return encodeURIComponent(arguments[0])", P3)
    for key in [p3, "prompt=p0", "prompt-row=3"]:
        driver.execute_script("location.hash = arguments[0]", key)
        wait(driver, f"return document.body.dataset.opened === {json.dumps(key)}")
        driver.execute_script("document.querySelectorAll('details').forEach(function (d) {"
                              " d.open = true; })")
    text = driver.execute_script("return document.getElementById('prompt-view').textContent")
    assert "<img src=" in text or "needs at least two" in text
    driver.execute_script("location.hash = arguments[0]", p3)
    wait(driver, f"return document.body.dataset.opened === {json.dumps(p3)}")
    # a comparison of that prompt links back up to it
    driver.execute_script("document.querySelector('table.matrix button.res').click()")
    wait(driver, "return /^pair=/.test(document.body.dataset.opened || '')")
    driver.execute_script("document.querySelector('button[data-prompt]').click()")
    wait(driver, f"return document.body.dataset.opened === {json.dumps(p3)}")
    driver.execute_script("document.querySelectorAll('details').forEach(function (d) {"
                          " d.open = true; })")
    assert "window.__pwned" in driver.execute_script(
        "return document.getElementById('prompt-view').textContent")
    time.sleep(0.2)
    state = driver.execute_script("""return {
        pwned: window.__pwned || 0, violations: window.__violations,
        remote: performance.getEntriesByType('resource').map(function (e) { return e.name; })
                  .filter(function (u) { return u.indexOf('file://') !== 0; }),
        made: document.querySelectorAll('#prompt-view img, #prompt-view script,'
              + ' #prompt-view iframe, #prompt-view a, #prompt-view svg, #prompt-view object,'
              + ' #prompt-view style').length}""")
    assert state == {"pwned": 0, "violations": [], "remote": [], "made": 0}
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []


def test_huge_candidates_travel_whole_and_the_list_stays_small(tmp_path):
    """Candidates of 150,000 characters: ranked and shown whole in their prompt's details
    (the page renders them on a click), while the prompts' list carries a short preview."""
    from helpers import quality_engine

    from rmjudge.rank import rank

    big = ["word " * 30_000 + f"q={v}" for v in (1, 3, 2)]
    src = tmp_path / "big.jsonl"
    src.write_text(json.dumps({"id": "big", "prompt": "tell " * 30_000, "responses": big}) + "\n")
    out = str(tmp_path / "big.duckdb")
    rank(str(src), out, engine=quality_engine(), judge=JudgeSettings(samples=2, max_tokens=32))
    build_view(out, str(tmp_path / "v"))
    [d] = [d for part in _data(tmp_path / "v", "pdetail") for d in part]
    assert [c[9] for c in d["candidates"]] == [big[1], big[2], big[0]]
    plist = _data(tmp_path / "v", "plist")[0]
    assert len(plist["prompt"][0]) <= 161
    assert (tmp_path / "v" / "data" / "plist-00000.js").stat().st_size < 2000


@browser
def test_a_right_to_left_override_in_a_candidate_stays_inside_its_text(driver, tmp_path):
    """A candidate holding U+202E (and U+2067, an isolate left open) reversed the "(N chars)"
    label drawn beside its preview in the ranked view."""
    from helpers import quality_engine

    from rmjudge.rank import rank

    src = tmp_path / "rtl.jsonl"
    texts = ["answer q=3 \u202eevil override", "answer q=2 \u2067open isolate", "answer q=1"]
    src.write_text(json.dumps({"id": "p0", "prompt": "question", "responses": texts}) + "\n")
    out = str(tmp_path / "rtl.duckdb")
    rank(str(src), out, engine=quality_engine(), judge=JudgeSettings(samples=1, max_tokens=32))
    view = tmp_path / "rtl.view"
    build_view(out, str(view))
    open_page(driver, view, "#prompt=p0")
    wait(driver, "return document.body.dataset.opened === 'prompt=p0'")
    got = driver.execute_script("""
        return Array.from(document.querySelectorAll('table.cands td.ctext summary .pv'))
          .map(function (span) {
            var walk = document.createTreeWalker(span, NodeFilter.SHOW_TEXT), node, label;
            while ((node = walk.nextNode())) if (/chars\)$/.test(node.data)) label = node;
            var t = label.data, i = t.lastIndexOf('('), j = t.lastIndexOf(')');
            function x(k) { var r = document.createRange(); r.setStart(label, k);
                            r.setEnd(label, k + 1); return r.getBoundingClientRect().left; }
            return [span.textContent, x(i) < x(j)];
          });""")
    assert len(got) == 3
    for text, left_to_right in got:
        assert left_to_right, text
