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
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson  # noqa: E402

WORDS = ("model answer response prompt judge reason detail correct clear helpful concise step "
         "evidence claim source example error fact number result method value check").split()
TOPICS = ("the boiling point of water", "binary search", "the French revolution", "photosynthesis",
          "compound interest", "a haiku about autumn", "Python list comprehensions", "TCP handshakes",
          "the Pythagorean theorem", "how vaccines work", "sorting a linked list", "tax brackets")


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _paragraph(rng: random.Random, chars: int) -> str:
    out = []
    size = 0
    while size < chars:
        s = _sentence(rng, rng.randint(8, 16))
        out.append(s)
        size += len(s) + 1
    return " ".join(out)


def _response(rng: random.Random, k: int) -> str:
    body = _paragraph(rng, rng.randint(250, 450))
    items = "\n".join(f"- {_sentence(rng, rng.randint(5, 9))}" for _ in range(rng.randint(2, 4)))
    code = ""
    if k % 3 == 0:
        code = f"\n\n```python\ndef step_{k}(x):\n    return x * {k % 7 + 2}  # {rng.choice(WORDS)}\n```"
    return f"{body}\n\n{items}{code}\n\n**In short:** {_sentence(rng, 10)}"


class Texts:
    """Pools of generated paragraphs, drawn from per sample (generating every text word by
    word took most of the store's writing time)."""

    def __init__(self, rng: random.Random, size: int = 3000):
        self.rng = rng
        self.analysis = [_paragraph(rng, 560) for _ in range(size)]
        self.cut = [_paragraph(rng, 700) for _ in range(size // 10)]
        self.critique = [_paragraph(rng, 420) for _ in range(size)]
        self.prompt = [_paragraph(rng, 220) for _ in range(size)]

    def verdict(self, pred: int, refl: bool = False) -> str:
        from rmjudge.prompts import completion_text

        body = self.rng.choice(self.critique if refl else self.analysis)
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
                rng.choice(texts.analysis) + "\nBoth have merits; I cannot decide."
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
               error_every: int = 500) -> dict:
    """A synthetic judged store at `path` (see the module docstring); returns its counts."""
    from rmjudge.store import PAIR_COLUMNS, SAMPLE_COLUMNS, Store, insert_rows

    rng = random.Random(seed)
    responses = [_response(rng, k) for k in range(400)]
    texts = Texts(rng)
    settings = {"samples": samples, "temperature": 1.0, "max_tokens": 512, "reflect": True,
                "on_inconsistent": "tie", "seed": seed, "forced": True}
    pair_cols = [c for c, _ in PAIR_COLUMNS] + ["source", "subset"]
    sample_cols = [c for c, _ in SAMPLE_COLUMNS]
    n_samples = n_errors = 0
    t0 = time.perf_counter()
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
                topic = rng.choice(TOPICS)
                prompt = (f"Explain {topic} to a {rng.choice(('student', 'colleague', 'child'))}. "
                          + rng.choice(texts.prompt))
                a, b = rng.sample(responses, 2)
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
                    hashlib.sha256(pid.encode()).hexdigest()[:16],
                    rng.choice(("pandalm", "hh-rlhf", "arena")), rng.choice(("easy", "hard", "chat", "code"))])
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
            "seconds": time.perf_counter() - t0, "bytes": os.path.getsize(path)}


def chromium_times(page: str, pair_id: str, query: str) -> dict:
    """First contentful paint, list ready, opening a pair by its link, and a full-text search,
    in headless Chromium (seconds)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--window-size=1400,900"):
        opts.add_argument(a)
    profile = tempfile.mkdtemp(prefix="rmjudge-view-profile-")
    opts.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
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
        t = time.perf_counter()
        driver.execute_script(f"location.hash = 'pair=' + encodeURIComponent({orjson.dumps(pair_id).decode()})")
        wait(f"return document.body.dataset.opened === 'pair=' + encodeURIComponent({orjson.dumps(pair_id).decode()})"
             " && !!document.querySelector('.order')")
        out["open_pair"] = time.perf_counter() - t
        t = time.perf_counter()
        driver.execute_script(f"location.hash = 'pair=' + encodeURIComponent('syn-000050')")
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
        out["js_heap_mb"] = driver.execute_script(
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
    args = ap.parse_args()
    if args.work:
        Path(args.work).mkdir(parents=True, exist_ok=True)
        run(Path(args.work), args)
    else:
        with tempfile.TemporaryDirectory(prefix="rmjudge-bench-view-") as tmp:
            run(Path(tmp), args)


def run(work: Path, args) -> None:
    from rmjudge.view.site import build_view

    store = str(work / f"synthetic-{args.pairs}.duckdb")
    if not os.path.exists(store):
        got = make_store(store, args.pairs, args.samples)
        print(f"store: {got['pairs']} pairs, {got['samples']} samples, {got['errors']} error "
              f"rows, {got['bytes'] / 1e6:.0f} MB, written in {got['seconds']:.1f} s")
    t = time.perf_counter()
    s = build_view(store, str(work / "view"))
    print(f"build: {time.perf_counter() - t:.1f} s wall, {s.files} files, "
          f"{s.bytes / 1e6:.0f} MB ({s.parts})")
    sizes = {}
    for name in os.listdir(work / "view" / "data"):
        kind = name.split("-")[0].removesuffix(".js")
        sizes[kind] = sizes.get(kind, 0) + os.path.getsize(work / "view" / "data" / name)
    print("bytes by kind: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items())))
    if not args.no_browser:
        times = chromium_times(s.page, f"syn-{args.pairs // 2:06d}", "compound interest to a child")
        print("chromium: " + ", ".join(f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in times.items()))


if __name__ == "__main__":
    main()
