"""Throughput of rmjudge's batched engine against the naive path, in one run, same machine.

    python benchmarks/bench_engine.py --pairs 3 --samples 8 --max-tokens 64 --out benchmarks/results.json

Variants (each in its own process, so peak RSS is its own), on the same pairs and settings
(ReflectRM, N samples, both orders):
  engine        rmjudge's batched llama.cpp engine (the default `rmjudge score` path)
  naive_lp      the same protocol through llama-cpp-python's Llama.create_completion, one
                generation at a time, with log-probabilities (logits_all=True)
  naive         the same, without log-probabilities (every confidence unknown: first anchor)
  ceiling       a bare llama.cpp batched decode loop (llama.cpp's own sampler, no protocol,
                no log-probs) with the same number of parallel sequences and tokens each
Plus `--scaling 1,2,4,8,16,32`: the engine with that many parallel sequences.
Pairs come from ../shared/data/pandalm (or --data). Reported: generated tokens/s, pairs/s,
peak RSS (MB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "pandalm" / "pairs.jsonl"


def _pairs(path: str, n: int):
    from rmjudge.io.mapping import Mapper
    from rmjudge.io.readers import read_rows

    m = Mapper(seed=0)
    out = []
    for raw in read_rows(path):
        if raw.obj is not None:
            out.append(m.to_pair(raw.row_number, raw.obj))
        if len(out) == n:
            break
    return out


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_protocol(kind: str, args) -> dict:
    from rmjudge.engine import load_engine
    from rmjudge.engine.naive import NaiveEngine
    from rmjudge.judge import Judge
    from rmjudge.settings import EngineSettings, JudgeSettings

    es = EngineSettings(parallel=args.parallel, threads=args.threads)
    if kind == "engine":
        engine = load_engine(es)
    else:
        engine = NaiveEngine(es, logprobs=(kind == "naive_lp"))
    js = JudgeSettings(samples=args.samples, max_tokens=args.max_tokens, seed=args.seed)
    pairs = _pairs(args.data, args.pairs)
    t0 = time.perf_counter()
    results = list(Judge(engine, js).run(pairs))
    dt = time.perf_counter() - t0
    gens = sum(len(o.samples) for r in results if hasattr(r, "orders") for o in r.orders.values())
    return {"variant": kind, "parallel": args.parallel, "seconds": dt,
            "generated_tokens": engine.generated_tokens, "generations": gens,
            "tok_per_s": engine.generated_tokens / dt, "pairs_per_s": len(results) / dt,
            "prompt_tokens": getattr(engine, "prompt_tokens_evaluated", None),
            "peak_rss_mb": _peak_rss_mb()}


def run_ceiling(args) -> dict:
    """llama.cpp's batched example, reduced to its loop: one prompt prefilled once, copied to
    `parallel` sequences, each decoding `max_tokens` tokens with llama.cpp's dist sampler."""
    import ctypes

    import llama_cpp as L

    from rmjudge import prompts
    from rmjudge.engine.llama import Tokenizer, _info_from_model, _llama, _load_model
    from rmjudge.models import resolve_model

    _llama()
    path = resolve_model(None)
    model = _load_model(path, vocab_only=False)
    info = _info_from_model(L, model, path)
    tok = Tokenizer(L, model, info)
    pair = _pairs(args.data, 1)[0]
    msgs = prompts.pref_messages(pair.messages, pair.response_a, pair.response_b)
    toks = tok.encode(tok.render(msgs, prompts.ASSISTANT_PREFIX))
    P, M = args.parallel, args.max_tokens
    total = args.total_tokens
    p = L.llama_context_default_params()
    p.n_ctx = len(toks) + P * (M + 8) + 256
    p.n_batch = p.n_ubatch = 512
    p.n_seq_max = P
    p.n_threads = p.n_threads_batch = args.threads or os.cpu_count()
    p.kv_unified = True
    ctx = L.llama_init_from_model(model, p)
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(max(512, P), 0, 1)
    vocab = L.llama_model_get_vocab(model)
    generated = 0
    t0 = time.perf_counter()
    rounds = 0
    while generated < total:
        L.llama_memory_clear(mem, True)
        n = 0
        for i, t in enumerate(toks):
            batch.token[n], batch.pos[n], batch.n_seq_id[n] = t, i, 1
            batch.seq_id[n][0] = 0
            batch.logits[n] = i == len(toks) - 1
            n += 1
        batch.n_tokens = n
        L.llama_decode(ctx, batch)
        for s in range(1, P):
            L.llama_memory_seq_cp(mem, 0, s, -1, -1)
        samplers = []
        for s in range(P):
            sp = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
            L.llama_sampler_chain_add(sp, L.llama_sampler_init_dist(1000 + s + rounds * P))
            samplers.append(sp)
        idx = [len(toks) - 1] * P
        pos = len(toks)
        for _ in range(M):
            n = 0
            for s in range(P):
                t = L.llama_sampler_sample(samplers[s], ctx, idx[s])
                batch.token[n], batch.pos[n], batch.n_seq_id[n] = t, pos, 1
                batch.seq_id[n][0] = s
                batch.logits[n] = True
                idx[s] = n
                n += 1
            batch.n_tokens = n
            L.llama_decode(ctx, batch)
            pos += 1
            generated += P
        for sp in samplers:
            L.llama_sampler_free(sp)
        rounds += 1
    dt = time.perf_counter() - t0
    del vocab, ctypes
    return {"variant": "ceiling", "parallel": P, "seconds": dt, "generated_tokens": generated,
            "tok_per_s": generated / dt, "pairs_per_s": None, "peak_rss_mb": _peak_rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", default="engine,naive_lp,naive,ceiling")
    ap.add_argument("--scaling", default="", help="comma list of --parallel values for the engine")
    ap.add_argument("--out", default=None, help="write all rows as JSON here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--total-tokens", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        row = run_ceiling(args) if args.child == "ceiling" else run_protocol(args.child, args)
        print(json.dumps(row))
        return
    rows = []

    def child(kind: str, parallel: int, total: int = 0) -> dict:
        cmd = [sys.executable, __file__, "--child", kind, "--data", args.data, "--pairs",
               str(args.pairs), "--samples", str(args.samples), "--max-tokens", str(args.max_tokens),
               "--parallel", str(parallel), "--seed", str(args.seed), "--total-tokens", str(total)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"{kind} failed:\n{out.stderr[-2000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(_fmt(row), flush=True)
        return row

    engine_tokens = 0
    for kind in args.variants.split(","):
        if kind == "ceiling":
            rows.append(child("ceiling", args.parallel, max(engine_tokens, args.parallel * args.max_tokens)))
        else:
            rows.append(child(kind, args.parallel))
            if kind == "engine":
                engine_tokens = rows[-1]["generated_tokens"]
    for p in [int(x) for x in args.scaling.split(",") if x]:
        r = child("engine", p)
        r["variant"] = f"engine@{p}"
        rows.append(r)
    if args.out:
        meta = {"pairs": args.pairs, "samples": args.samples, "max_tokens": args.max_tokens,
                "parallel": args.parallel, "cpus": os.cpu_count(), "rows": rows}
        Path(args.out).write_text(json.dumps(meta, indent=2))


def _fmt(r: dict) -> str:
    pps = "-" if r.get("pairs_per_s") is None else f"{r['pairs_per_s']:.3f}"
    pre = f" prefill={r['prompt_tokens']}" if r.get("prompt_tokens") else ""
    return (f"{r['variant']:<12} parallel={r['parallel']:<3} tok/s={r['tok_per_s']:8.1f} "
            f"pairs/s={pps:>7} tokens={r['generated_tokens']:<6} seconds={r['seconds']:7.1f} "
            f"peak_rss={r['peak_rss_mb']:.0f}MB{pre}")


if __name__ == "__main__":
    main()
