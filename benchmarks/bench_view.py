"""`rmjudge view` at scale: build the explorer of a large synthetic store and time it in Chromium.

    python benchmarks/bench_view.py --pairs 100000 --samples 8 --work /tmp/view-bench

1. Writes a synthetic run store of `--pairs` pairs judged at N = `--samples` in both orders
   (`make_store`: rows written with the store's bulk writer, `Store.write` + `insert_rows`, in
   batches; nothing is judged). Texts have the lengths of real judge data: prompts of about 300
   characters, responses of 600-1,100 with Markdown lists and code, rollout analyses of about
   600 and reflections of about 450; a third of the pair-orders are unanimous (no reflection),
   the others reflect every other usable rollout against the anchor; about 1% of rollouts are
   cut at the token limit, 1% do not parse and get a forced verdict; 0.2% of input rows are
   error rows.
2. Builds the explorer (`build_view`) and reports its wall time, files and bytes.
3. With Chromium (Debian's `chromium` + `chromium-driver`, selenium): opens the page from disk
   and reports the time to first contentful paint and until the list is ready, then the time to
   open a pair by its link (`#pair=ID`, its detail file read on demand) and of a full-text
   search over every prompt and response. `--no-browser` skips this part.
Nothing is asserted: the figures are printed (docs/view.md records them with this command).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

TOPICS = ("the boiling point of water", "binary search", "the French revolution", "photosynthesis",
          "compound interest", "a haiku about autumn", "Python list comprehensions", "TCP handshakes",
          "the Pythagorean theorem", "how vaccines work", "sorting a linked list", "tax brackets")
PROSE = [
    "The short answer is that it depends on the inputs, so it helps to look at a simple case first.",
    "Start from the definition and check each step against a small example before generalizing.",
    "A common mistake is to skip the edge cases, which is where most of the surprises are.",
    "In practice the first version is rarely the fastest, but it is the easiest to verify.",
    "The key idea is to split the problem into parts that can be solved independently.",
    "Most textbooks present this with a diagram, which makes the order of the steps clear.",
    "If the numbers are large, round them first to see whether the result is plausible.",
    "This works because every step keeps the invariant that the earlier steps established.",
    "Historians still disagree about the causes, but the sequence of events is well documented.",
    "The same reasoning applies to the general case once the notation is in place.",
    "It is worth writing the result down in one sentence before adding any detail.",
    "Measurements at sea level differ from those taken on a mountain, which explains the gap.",
    "A quick sanity check is to compare the answer with a value you already know.",
    "The difference matters mostly for large inputs; for small ones both approaches are fine.",
]
JUDGE = [
    "Response {w} answers the question that was asked and stays on topic throughout.",
    "Response {l} restates the prompt at length before it gets to an answer.",
    "The steps in Response {w} come in a sensible order and each one is justified.",
    "Response {l} contains a factual error in its second paragraph.",
    "Both responses are fluent, but only Response {w} follows the requested format.",
    "Response {l} is longer, yet the extra length adds nothing the user asked for.",
    "Response {w} gives a concrete example that makes the explanation easy to check.",
    "Response {l} leaves out the final check that the prompt explicitly asks for.",
    "The code in Response {w} runs as written; the snippet in Response {l} has an off-by-one error.",
    "Response {w} is concise without dropping any of the required details.",
    "Response {l} hedges so much that the user is left without a usable answer.",
    "On accuracy, helpfulness and clarity, Response {w} is ahead on all three.",
]
CRITIQUE = [
    "Critique {w} identifies the factual error that Critique {l} overlooks.",
    "Critique {l} praises the length of the answer, which is not a quality the task rewards.",
    "Critique {w} checks the answer against the prompt's constraints one by one.",
    "Critique {l} contradicts itself about which response follows the format.",
    "Critique {w} is grounded in specific sentences of the responses; Critique {l} stays vague.",
    "Both critiques agree on the facts, but Critique {w} weighs them correctly.",
]


def _prose(rng: random.Random, pool: list[str], chars: int, **names) -> str:
    out, size = [], 0
    while size < chars:
        sentence = rng.choice(pool).format(**names)
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)


def _paragraph(rng: random.Random, chars: int) -> str:
    return _prose(rng, PROSE, chars)


def _response(rng: random.Random, k: int) -> str:
    body = _paragraph(rng, rng.randint(250, 450))
    items = "\n".join(f"- {rng.choice(PROSE)}" for _ in range(rng.randint(2, 4)))
    code = ""
    if k % 3 == 0:
        code = f"\n\n```python\ndef step_{k}(x):\n    return x * {k % 7 + 2}  # scale the input\n```"
    return f"{body}\n\n{items}{code}\n\n**In short:** {rng.choice(PROSE)}"


class Texts:
    """Pools of generated paragraphs, drawn from per sample (generating every text word by
    word took most of the store's writing time)."""

    def __init__(self, rng: random.Random, size: int = 3000):
        self.rng = rng
        self.analysis = {p: [_prose(rng, JUDGE, 560, w=p, l=3 - p) for _ in range(size)]
                         for p in (1, 2)}
        self.cut = [_prose(rng, JUDGE, 700, w=1, l=2) for _ in range(size // 10)]
        self.critique = {p: [_prose(rng, CRITIQUE, 420, w=p, l=3 - p) for _ in range(size)]
                         for p in (1, 2)}
        self.prompt = [_paragraph(rng, 220) for _ in range(size)]

    def verdict(self, pred: int, refl: bool = False) -> str:
        from rmjudge.prompts import completion_text

        body = self.rng.choice((self.critique if refl else self.analysis)[pred])
        return completion_text("refl" if refl else "pref", body, pred)


def _letter(order: str, pred: int | None) -> str | None:
    if pred is None:
        return None
    return "A" if (pred == 1) == (order == "ab") else "B"


def _order(rng: random.Random, texts: Texts, pid: str, order: str, n: int,
           good: int) -> tuple[list, dict]:
    """One pair-order: its sample rows and its figures (as the protocol would record them)."""
    rows, rollouts = [], []
    unanimous = rng.random() < 1 / 3
    p_good = 0.8
    for i in range(n):
        pred = good if unanimous or rng.random() < p_good else 3 - good
        source, finish = "generated", "stop"
        r = rng.random()
        if r < 0.01:
            finish, source = "length", None
        elif r < 0.02:
            source = "forced"
        conf = round(-rng.random() * 1.5, 4)
        rollouts.append({"idx": i, "pred": pred, "src": source, "finish": finish, "conf": conf,
                         "won": None, "anchor": False, "p_first": None})
        if source == "forced":
            rollouts[-1]["p_first"] = round(rng.random(), 3)
    usable = [r for r in rollouts if r["src"] == "generated" and r["finish"] != "length"]
    pool = usable or [r for r in rollouts if r["src"] == "forced"]
    anchor = max(pool, key=lambda r: (r["conf"], -r["idx"])) if pool else None
    if anchor:
        anchor["anchor"] = True
    shortcut = len({r["pred"] for r in usable}) <= 1
    refl = []
    if anchor and usable and not shortcut:
        for r in usable:
            if r is anchor:
                continue
            slot = rng.choice((1, 2))
            won = rng.random() < (0.7 if r["pred"] == good else 0.3)
            r["won"] = won
            refl.append((len(refl), r["idx"], slot, slot if won else 3 - slot))
    group = [r for r in usable if r["won"]] if refl else usable
    n1 = sum(r["pred"] == 1 for r in group)
    n2 = len(group) - n1
    if anchor and n1 == n2:
        group = group + [anchor]
        n1 += anchor["pred"] == 1
        n2 += anchor["pred"] == 2
    pred = None if not anchor else (1 if n1 > n2 else 2 if n2 > n1 else anchor["pred"])
    share = n1 / (n1 + n2) if n1 + n2 else None
    for r in rollouts:
        text = (rng.choice(texts.cut) if r["finish"] == "length" else
                rng.choice(texts.analysis[r["pred"]]) + "\nBoth have merits; I cannot decide."
                if r["src"] == "forced" else texts.verdict(r["pred"]))
        tokens = len(text) // 4
        rows.append([pid, order, "rollout", r["idx"], text,
                     None if r["src"] is None else r["pred"], r["conf"], r["anchor"], None, None,
                     r["won"], r["src"], tokens, r["finish"], r["p_first"]])
    for k, of, slot, picked in refl:
        text = texts.verdict(picked, refl=True)
        rows.append([pid, order, "reflection", k, text, picked, None, False, of, slot, None,
                     "generated", len(text) // 4, "stop", None])
    figures = {"pred": pred, "share_1": share, "shortcut": shortcut and bool(usable),
               "conf": round(sum(r["conf"] for r in group) / len(group), 4) if group else None,
               "n": n}
    return rows, figures


def make_store(path: str, pairs: int, samples: int = 8, seed: int = 0, batch: int = 2000,
               error_every: int = 500, data: list[dict] | None = None) -> dict:
    """A synthetic judged store at `path` (see the module docstring); returns its counts.
    `data`: rows {prompt, chosen, rejected, source, subset} whose texts are used (in turn)
    instead of generated ones."""
    from rmjudge.store import PAIR_COLUMNS, SAMPLE_COLUMNS, Store, insert_rows

    rng = random.Random(seed)
    responses = [_response(rng, k) for k in range(400)]
    texts = Texts(rng)
    settings = {"samples": samples, "temperature": 1.0, "max_tokens": 512, "reflect": True,
                "on_inconsistent": "tie", "seed": seed, "forced": True}
    pair_cols = [c for c, _ in PAIR_COLUMNS] + ["source", "subset"]
    sample_cols = [c for c, _ in SAMPLE_COLUMNS]
    n_samples = n_errors = 0
    t0, c0 = time.perf_counter(), time.process_time()
    with Store(path) as store:
        store.set_meta("settings", settings)
        run_id = store.start_run({"version": "synthetic", "model_path": "synthetic-judge.gguf",
                                  "settings": settings, "input": "benchmarks/bench_view.py"})
        store.write(lambda con: store.add_columns({"source": "VARCHAR", "subset": "VARCHAR"}, con))
        row_number = 0
        for start in range(0, pairs, batch):
            prow, srow, erow = [], [], []
            for k in range(start, min(pairs, start + batch)):
                row_number += 1
                if error_every and row_number % error_every == 0:
                    erow.append([row_number, f"bad-{row_number}",
                                 "field 'chosen' is missing: map it with --map chosen=COLUMN",
                                 orjson.dumps({"prompt": "q", "id": f"bad-{row_number}"}).decode(),
                                 run_id])
                    row_number += 1
                pid = f"syn-{k:06d}"
                label = rng.choice("AB")
                if data:
                    d = data[k % len(data)]
                    prompt, source, subset = d["prompt"], d.get("source"), d.get("subset")
                    a, b = ((d["chosen"], d["rejected"]) if label == "A"
                            else (d["rejected"], d["chosen"]))
                else:
                    topic = rng.choice(TOPICS)
                    prompt = (f"Explain {topic} to a "
                              f"{rng.choice(('student', 'colleague', 'child'))}. "
                              + rng.choice(texts.prompt))
                    a, b = rng.sample(responses, 2)
                    source = rng.choice(("pandalm", "hh-rlhf", "arena"))
                    subset = rng.choice(("easy", "hard", "chat", "code"))
                good_ab = 1 if label == "A" else 2
                s_ab, f_ab = _order(rng, texts, pid, "ab", samples, good_ab)
                s_ba, f_ba = _order(rng, texts, pid, "ba", samples, 3 - good_ab)
                srow += s_ab + s_ba
                v_ab, v_ba = _letter("ab", f_ab["pred"]), _letter("ba", f_ba["pred"])
                shares = [s for s in (f_ab["share_1"], None if f_ba["share_1"] is None
                                      else 1 - f_ba["share_1"]) if s is not None]
                p_a = sum(shares) / len(shares) if shares else None
                if v_ab and v_ba:
                    consistent = v_ab == v_ba
                    verdict = v_ab if consistent else "tie"
                else:
                    consistent, verdict = None, v_ab or v_ba or "error"
                messages = orjson.dumps([{"role": "user", "content": prompt}]).decode()
                prow.append([
                    pid, row_number, verdict, v_ab, v_ba, consistent, p_a, f_ab["share_1"],
                    None if f_ba["share_1"] is None else 1 - f_ba["share_1"], label,
                    verdict == label if verdict in ("A", "B", "tie") else None,
                    f_ab["shortcut"], f_ba["shortcut"], None if consistent is not False else "tie",
                    f_ab["conf"], f_ba["conf"], samples, samples, prompt, messages, a, b, run_id,
                    hashlib.sha256(pid.encode()).hexdigest()[:16], source, subset])
            n_samples += len(srow)
            n_errors += len(erow)

            def statements(con, prow=prow, srow=srow, erow=erow) -> None:
                insert_rows(con, "pairs", prow, pair_cols)
                insert_rows(con, "samples", srow, sample_cols)
                if erow:
                    insert_rows(con, "errors", erow, ["row_number", "id", "reason", "raw", "run_id"])

            store.write(statements)
        store.finish_run(status="finished", pairs_judged=pairs, errors=n_errors)
    return {"pairs": pairs, "samples": n_samples, "errors": n_errors,
            "seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
            "bytes": os.path.getsize(path)}


def sql_json_details(t) -> int:
    """The details as DuckDB builds them itself (`json_object` per pair, the samples
    aggregated with `list(json_array(...) ORDER BY ...)`): the first way `rmjudge view` was
    written, timed against `PairItems.detail_rows` (sorted streams joined in Python, orjson).
    Returns the bytes made."""
    from rmjudge.core.sql import quote_ident
    from rmjudge.view.data import DETAIL_PAIR_FIELDS, SAMPLE_FIELDS, PairItems

    PairItems(t)  # its `items` view
    fields = ", ".join(f"s.{quote_ident(f)}" for f in SAMPLE_FIELDS)
    pair = ", ".join(f"{sql_literal_(k)}, p.{quote_ident(c)}" for k, c in DETAIL_PAIR_FIELDS.items())
    cur = t.con.execute(f"""
        WITH sm AS (SELECT s.pair_id, to_json(list(json_array({fields})
                        ORDER BY s."order", s.stage DESC, s.idx)) AS js
                    FROM samples s GROUP BY s.pair_id)
        SELECT json_object({pair}, 'samples', json(coalesce(sm.js, '[]')))::VARCHAR
        FROM items i JOIN pairs p ON i.kind = 'pair' AND p.id = i.id
        LEFT JOIN sm ON sm.pair_id = p.id ORDER BY i.pos""")
    total = 0
    while True:
        rows = cur.fetchmany(5000)
        if not rows:
            return total
        total += sum(len(r[0]) for r in rows)


def sql_literal_(text: str) -> str:
    from rmjudge.core.sql import sql_literal

    return sql_literal(text)


def compare_details(store: str) -> None:
    """CPU and wall time of the two ways of making every pair's details, in this process."""
    from rmjudge.analysis.tables import open_judged
    from rmjudge.view.data import PairItems

    for name, run in (("DuckDB JSON (json_object, list ORDER BY)", sql_json_details),
                      ("sorted streams + orjson (rmjudge view)",
                       lambda t: sum(len(x) for x in PairItems(t).detail_rows()))):
        with open_judged(store) as t:
            w, c = time.perf_counter(), time.process_time()
            n = run(t)
            print(f"details, {name}: {time.perf_counter() - w:.1f} s wall, "
                  f"{time.process_time() - c:.1f} s CPU, {n / 1e6:.0f} MB")


def chromium_times(page: str, pair_id: str, query: str) -> dict:
    """First contentful paint, list ready, opening a pair by its link, and a full-text search,
    in headless Chromium (seconds), with a browser profile removed afterwards."""
    from rmjudge.files import scratch

    with scratch(prefix="rmjudge-view-profile-") as profile:
        return browse(page, pair_id, query, profile)


def browse(page: str, pair_id: str, query: str, profile: str) -> dict:
    """`chromium_times` in the browser profile folder `profile`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--window-size=1400,900"):
        opts.add_argument(a)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    url = "file://" + os.path.abspath(page)
    out = {}
    try:
        def wait(js: str, limit: float = 120.0) -> float:
            t = time.perf_counter()
            while not driver.execute_script(js):
                if time.perf_counter() - t > limit:
                    raise TimeoutError(js)
                time.sleep(0.01)
            return time.perf_counter() - t

        driver.get(url)
        wait("return document.body && document.body.dataset.ready === '1'")
        out["first_paint"] = driver.execute_script(
            "var e = performance.getEntriesByType('paint').filter(function (p) { return "
            "p.name === 'first-contentful-paint'; })[0]; return e ? e.startTime / 1000 : null")
        out["list_ready"] = driver.execute_script(
            "return performance.getEntriesByName('rmjudge-list-ready')[0].startTime / 1000")
        out["js_heap_mb_list"] = driver.execute_script(
            "return performance.memory ? performance.memory.usedJSHeapSize / 1e6 : null")
        t = time.perf_counter()
        driver.execute_script(f"location.hash = 'pair=' + encodeURIComponent({orjson.dumps(pair_id).decode()})")
        wait(f"return document.body.dataset.opened === 'pair=' + encodeURIComponent({orjson.dumps(pair_id).decode()})"
             " && !!document.querySelector('.order')")
        out["open_pair"] = time.perf_counter() - t
        t = time.perf_counter()
        driver.execute_script("location.hash = 'pair=' + encodeURIComponent('syn-000050')")
        wait("return document.body.dataset.opened === 'pair=syn-000050' && !!document.querySelector('.order')")
        out["open_next_in_same_part"] = time.perf_counter() - t
        driver.execute_script("location.hash = ''")
        wait("return !document.body.dataset.opened")
        t = time.perf_counter()
        driver.execute_script(
            "var s = document.getElementById('search'); s.value = arguments[0];"
            "s.dispatchEvent(new Event('input'));", query)
        wait("return /searched ids/.test(document.getElementById('search-status').textContent)",
             600)
        out["search_all_text"] = time.perf_counter() - t
        out["search_hits"] = driver.execute_script(
            "return document.getElementById('count').textContent")
        out["js_heap_mb_searched"] = driver.execute_script(
            "return performance.memory ? performance.memory.usedJSHeapSize / 1e6 : null")
    finally:
        driver.quit()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--work", default=None, help="folder for the store and the explorer "
                    "(default: a temporary folder, removed at the end)")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--compare", action="store_true", help="also time the details made by "
                    "DuckDB's own JSON functions against the way rmjudge view makes them")
    ap.add_argument("--data", default=None, help="JSONL of {prompt, chosen, rejected, source, "
                    "subset} whose texts the store uses in turn (e.g. ../shared/data/pandalm/"
                    "pairs.jsonl) instead of generated ones")
    args = ap.parse_args()
    from rmjudge.files import make_dir, scratch

    if args.work:
        make_dir(args.work)
        run(Path(args.work), args)
    else:
        with scratch(prefix="rmjudge-bench-view-") as tmp:
            run(Path(tmp), args)


def run(work: Path, args) -> None:
    from rmjudge.view.site import build_view

    store = str(work / f"synthetic-{args.pairs}.duckdb")
    if not os.path.exists(store):
        data = None
        if args.data:
            with open(args.data, "rb") as f:
                data = [orjson.loads(line) for line in f if line.strip()]
        got = make_store(store, args.pairs, args.samples, data=data)
        print(f"store: {got['pairs']} pairs, {got['samples']} samples, {got['errors']} error "
              f"rows, {got['bytes'] / 1e6:.0f} MB, written in {got['seconds']:.1f} s "
              f"({got['cpu']:.1f} s CPU)")
    if args.compare:
        compare_details(store)
    load = os.getloadavg()[0]
    t, c = time.perf_counter(), time.process_time()
    s = build_view(store, str(work / "view"))
    print(f"build: {time.perf_counter() - t:.1f} s wall, {time.process_time() - c:.1f} s CPU "
          f"(load average {load:.1f} at the start), {s.files} files, "
          f"{s.bytes / 1e6:.0f} MB ({s.parts})")
    sizes = {}
    for name in os.listdir(work / "view" / "data"):
        kind = name.split("-")[0].removesuffix(".js")
        sizes[kind] = sizes.get(kind, 0) + os.path.getsize(work / "view" / "data" / name)
    print("bytes by kind: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items())))
    if not args.no_browser:
        times = chromium_times(s.page, f"syn-{args.pairs // 2:06d}", "compound interest to a child")
        print("chromium: " + ", ".join(
            f"{k} {v:.0f}" if k.startswith("js_heap") else
            f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {v}" for k, v in times.items()))


if __name__ == "__main__":
    main()
