"""`rmjudge rank` against judging the same comparisons as flat pairs with `rmjudge score`: same
model, settings, seed and comparisons, in one run on one machine.

    python benchmarks/bench_rank.py --prompts 4 --k 4 --samples 2 --max-tokens 24 --threads 1 \
        --jobs 4 --out benchmarks/results_rank.json
    python benchmarks/bench_rank.py --prompts 2 --k 3 --samples 8 --max-tokens 64 --threads 1 \
        --jobs 3 --variants rank,flat,flat_shuffled --out benchmarks/results_rank_n8.json

Data: PandaLM's human test set (../shared/data/pandalm/pairs.jsonl, or --data), whose
instructions come with several models' responses: the `--prompts` instructions with at least K
distinct responses whose pairs are longest (instruction + two of its K longest responses: 1.4
to 1.6 k characters for the top 8, just under LLMBar's 1.6 to 2.4 k), each with its K longest
responses as candidates.

Variants (`--variants`, each in its own process, a fresh engine and prefix cache):
  rank           `rmjudge rank` (round-robin: K(K-1)/2 comparisons per prompt, both orders),
                 in its judging order (rmjudge/rank/runner.py `schedule`)
  rank_noshare   the same with the engine's in-flight opening copies off
                 (`LlamaEngine.share_prefill = False`): what the previous release's engine did
  flat           `rmjudge score` on the same comparisons written as flat pairs (same ids, so
                 the same seeds and samples), prompt by prompt: what expanding the candidates
                 into a pairs file gives
  flat_shuffled  the same pairs in a seeded random order (how preference files usually come)
Reported per variant: wall seconds, generated tokens/s, comparisons/s, generated tokens per CPU
second of the process (with --threads 1 a busy shared machine distorts it far less than
tokens/s), prompt tokens evaluated, restored from the prefix cache and copied in flight per
comparison (exact counts, whatever the load), decode rows per decode call, and the 1-minute
load average before and after; then each variant's speed-up over `flat` and over
`flat_shuffled` (per CPU second and per wall second) and whether every comparison got the same
per-order verdicts in every variant.

`--jobs J` runs J variant processes at a time (a shared machine's time is short): their CPU
seconds and token counts stay comparable, their wall figures do not.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = ("rank", "rank_noshare", "flat", "flat_shuffled")
# shared/data beside the checkout (or beside the folder of worktrees it sits in)
DEFAULT_DATA = next((d / "shared" / "data" / "pandalm" / "pairs.jsonl" for d in HERE.parents
                     if (d / "shared" / "data" / "pandalm" / "pairs.jsonl").exists()),
                    HERE.parent.parent / "shared" / "data" / "pandalm" / "pairs.jsonl")


def candidates(path: str, n_prompts: int, k: int) -> list[dict]:
    """rank inputs: {id, prompt, responses} for the first n_prompts fitting instructions."""
    groups: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            p = row["prompt"]
            first.setdefault(p, str(row["id"]))
            for r in (row["chosen"], row["rejected"]):
                if r not in groups.setdefault(p, []):
                    groups[p].append(r)
    fit = []
    for p, rs in groups.items():
        if len(rs) >= k:
            top = sorted(rs, key=lambda r: (-len(r), r))[:k]
            fit.append((-(len(p) + 2 * sum(map(len, top)) / k), first[p], p, top))
    fit = sorted(sorted(fit)[:n_prompts], key=lambda x: x[1])
    return [{"id": f"pandalm-{pid}", "prompt": p, "responses": top} for _, pid, p, top in fit]


def flat_rows(prompts: list[dict], shuffled: bool, seed: int) -> list[dict]:
    """The comparisons `rank` makes (round-robin), as flat pairs: the same ids, and each pair's
    candidates in the slots `rank` draws for them, so every prompt is the same text."""
    from rmjudge.io.rows import RawRow
    from rmjudge.rank.layouts import read_prompts
    from rmjudge.rank.runner import comparison_row
    from rmjudge.rank.strategies import round_robin

    rows = []
    for p in read_prompts(RawRow(n, obj) for n, obj in enumerate(prompts, 1)):
        for i, j in round_robin(p.k):
            c = comparison_row(p, i, j, 1, seed)
            rows.append({k: c[k] for k in ("id", "prompt", "response_a", "response_b")})
    if shuffled:
        random.Random(0).shuffle(rows)
    return rows


def run_variant(args) -> dict:
    """One variant in this process; its figures."""
    from rmjudge.engine import load_engine
    from rmjudge.core.settings import EngineSettings, JudgeSettings

    es = EngineSettings(model=args.model, threads=args.threads, parallel=args.parallel)
    js = JudgeSettings(samples=args.samples, max_tokens=args.max_tokens, seed=args.seed)
    engine = load_engine(es)
    if args.variant == "rank_noshare":
        engine.share_prefill = False
    work = Path(args.workdir)
    out = str(work / f"{args.variant}.duckdb")
    load_before = os.getloadavg()[0]
    cpu0 = time.process_time()
    t0 = time.monotonic()
    if args.variant.startswith("rank"):
        from rmjudge.rank import rank

        s = rank(str(work / "candidates.jsonl"), out, engine=engine, judge=js,
                 strategy="round-robin")
        comparisons = s.judged
    else:
        from rmjudge.runs.pipeline import score

        s = score(str(work / f"{args.variant}.jsonl"), engine, js, output=out)
        comparisons = s.judged
    per = max(comparisons, 1)
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    return {"variant": args.variant, "wall_s": round(wall, 2), "comparisons": comparisons,
            "generated_tokens": engine.generated_tokens,
            "generated_tok_s": round(engine.generated_tokens / wall, 1),
            "comparisons_s": round(comparisons / wall, 4), "cpu_s": round(cpu, 2),
            "generated_tok_per_cpu_s": round(engine.generated_tokens / cpu, 1),
            "prompt_tokens_evaluated": engine.prompt_tokens_evaluated,
            "prompt_tokens_reused": engine.prompt_tokens_reused,
            "prompt_tokens_copied": engine.prompt_tokens_copied,
            "prompt_evaluated_per_comparison": round(engine.prompt_tokens_evaluated / per, 1),
            "prompt_reused_per_comparison": round(engine.prompt_tokens_reused / per, 1),
            "prompt_copied_per_comparison": round(engine.prompt_tokens_copied / per, 1),
            "decode_rows_per_call": round(engine.decode_rows / max(engine.decode_steps, 1), 2),
            "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0]}


def verdicts(db: str) -> dict:
    import duckdb

    con = duckdb.connect(db, read_only=True)
    try:
        return {r[0]: r[1:] for r in con.execute(
            "SELECT id, verdict_ab, verdict_ba, p_a FROM pairs").fetchall()}
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--parallel", type=int, default=None)
    ap.add_argument("--model", default=None, help="GGUF judge (default: the embedded one)")
    ap.add_argument("--variants", default="rank,rank_noshare,flat,flat_shuffled",
                    help="comma-separated, of " + ", ".join(VARIANTS))
    ap.add_argument("--jobs", type=int, default=1, help="variant processes at a time")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args)))
        return
    import tempfile

    from rmjudge.files import make_dir

    work = Path(args.workdir or os.path.join(tempfile.gettempdir(), f"bench_rank_{os.getpid()}"))
    make_dir(str(work))
    prompts = candidates(args.data, args.prompts, args.k)
    if len(prompts) < args.prompts:
        sys.exit(f"only {len(prompts)} instructions of {args.data} fit; lower --prompts or --k")
    (work / "candidates.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    variants = [v for v in args.variants.split(",") if v]
    if "rank" not in variants or "flat" not in variants or set(variants) - set(VARIANTS):
        sys.exit(f"--variants: rank and flat, and any of {', '.join(VARIANTS)}")
    for v in [v for v in variants if v.startswith("flat")]:
        rows = flat_rows(prompts, v == "flat_shuffled", args.seed)
        (work / f"{v}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = []
    passthrough = []
    skip = False
    for a in sys.argv[1:]:  # the options of a variant: all but --out and --workdir
        if skip:
            skip = False
        elif a in ("--out", "--workdir"):
            skip = True
        elif not a.startswith(("--out=", "--workdir=")):
            passthrough.append(a)
    procs = []
    for v in variants:
        while len([p for p in procs if p[1].poll() is None]) >= max(args.jobs, 1):
            time.sleep(1)
        cmd = [sys.executable, __file__, *passthrough, "--workdir", str(work), "--variant", v]
        procs.append((v, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True)))
    for v, proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"{v} failed:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    base = next(r for r in results if r["variant"] == "flat")
    shuf = next((r for r in results if r["variant"] == "flat_shuffled"), None)
    ref = verdicts(str(work / "rank.duckdb"))
    summary = {
        "command": "python benchmarks/bench_rank.py " + " ".join(passthrough),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_1min_end": os.getloadavg()[0],
        "prompts": len(prompts), "k": args.k,
        "mean_pair_chars": round(sum(len(p["prompt"]) + 2 * sum(map(len, p["responses"]))
                                     / args.k for p in prompts) / len(prompts)),
        "cpu_count": os.cpu_count(), "results": results,
        "speedup_vs_flat": {r["variant"]: round(r["generated_tok_s"] / base["generated_tok_s"],
                                                3) for r in results},
        "speedup_vs_flat_cpu": {r["variant"]: round(r["generated_tok_per_cpu_s"]
                                                    / base["generated_tok_per_cpu_s"], 3)
                                for r in results},
        "speedup_vs_shuffled_cpu": {r["variant"]: round(r["generated_tok_per_cpu_s"]
                                                        / shuf["generated_tok_per_cpu_s"], 3)
                                    for r in results} if shuf else None,
        "speedup_vs_shuffled": {r["variant"]: round(r["generated_tok_s"]
                                                    / shuf["generated_tok_s"], 3)
                                for r in results} if shuf else None,
        "jobs": args.jobs,
        "same_verdicts": all(verdicts(str(work / f"{v}.duckdb")) == ref for v in variants[1:]),
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
