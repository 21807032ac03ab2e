"""Throughput of rmjudge's batched engine against the naive path, in one run, same machine.

    python benchmarks/bench_engine.py --pairs 3 --samples 8 --max-tokens 64 --out benchmarks/results.json
    python benchmarks/bench_engine.py --workload long --pairs 2 --samples 4 --max-tokens 96 \
        --parallel 16 --scaling 1,4 --baseline-src ../main --busy

Workloads: `short` (the first PandaLM pairs) and `long` (pairs whose prompt is at most 600
characters and whose responses are 300-1,500 characters).

Variants (each in its own process, so peak RSS is its own), on the same pairs and settings
(ReflectRM, N samples, both orders):
  engine        rmjudge's batched llama.cpp engine (the default `rmjudge score` path)
  naive_lp      the same protocol through llama-cpp-python's Llama.create_completion, one
                generation at a time, with log-probabilities (logits_all=True)
  naive         the same, without log-probabilities (every confidence unknown: first anchor)
  engine_nocache  the engine with its prefix cache off (`--prefix-cache-mb 0`): every
                reflection evaluates its rollout prompt's text again
  ceiling       a bare llama.cpp batched decode loop (llama.cpp's own sampler, no protocol,
                no log-probs) with the same number of parallel sequences and tokens each
  prefill       llama.cpp evaluating the workload's rollout prompts alone, in 512-token
                chunks, each in its own KV stream: the prompt rate with nothing else to do
After engine, ceiling and prefill: `bound`, the engine's own token counts at those two rates
(its generated tokens at the ceiling's decode rate, its evaluated prompt tokens at the
prefill rate): what the engine would reach with no scheduling, sampling or batch-size cost.
Plus `--scaling 1,2,4,8,16,32`: the engine with that many parallel sequences.
Plus `--baseline-src DIR`: the engine of another checkout (e.g. before a change), same settings.
Plus `--busy`: the engine again while one competing CPU-bound process runs (fairness).
`--judge-format NAME` runs every variant in that judge format (docs/judges.md): e.g.
`--variants engine --judge-format prometheus2` beside a `reflectrm` run on the same pairs.
Pairs come from ../shared/data/pandalm (or --data). Reported: generated tokens/s, generated
tokens per CPU second (with --threads 1, a figure a busy shared machine distorts far less),
processed (prompt + generated) tokens/s, pairs/s, peak RSS (MB).
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


def _is_long(obj: dict) -> bool:
    texts = [obj.get("chosen"), obj.get("rejected")]
    return (isinstance(obj.get("prompt"), str) and len(obj["prompt"]) <= 600
            and all(isinstance(t, str) and 300 <= len(t) <= 1500 for t in texts))


def _pairs(path: str, n: int, workload: str = "short"):
    from rmjudge.io.mapping import Mapper
    from rmjudge.io.readers import read_rows

    m = Mapper(seed=0)
    out = []
    for raw in read_rows(path):
        if raw.obj is not None and (workload == "short" or _is_long(raw.obj)):
            out.append(m.to_pair(raw.row_number, raw.obj))
        if len(out) == n:
            break
    return out


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    """CPU seconds of this process: with --threads 1 (no spinning threads) a measure of the
    work done that a busy shared machine distorts far less than wall time."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_protocol(kind: str, args) -> dict:
    from rmjudge.engine import load_engine
    from rmjudge.engine.naive import NaiveEngine
    from rmjudge.judging.judge import Judge
    from rmjudge.core.settings import EngineSettings, JudgeSettings

    es = EngineSettings(parallel=args.parallel, threads=args.threads,
                        prefix_cache_mb=0 if kind == "engine_nocache" else 256)
    if kind.startswith("engine"):
        engine = load_engine(es)
    else:
        engine = NaiveEngine(es, logprobs=(kind == "naive_lp"))
    fmt = {} if args.judge_format == "reflectrm" else {"judge_format": args.judge_format}
    js = JudgeSettings(samples=args.samples, max_tokens=args.max_tokens, seed=args.seed, **fmt)
    pairs = _pairs(args.data, args.pairs, args.workload)
    t0, c0 = time.perf_counter(), _cpu_s()
    results = list(Judge(engine, js).run(pairs))
    dt, cpu = time.perf_counter() - t0, _cpu_s() - c0
    gens = sum(len(o.samples) for r in results if hasattr(r, "orders") for o in r.orders.values())
    prompt = getattr(engine, "prompt_tokens_evaluated", None)
    return {"variant": kind, "judge_format": args.judge_format, "workload": args.workload, "parallel": args.parallel, "seconds": dt,
            "generated_tokens": engine.generated_tokens, "generations": gens,
            "tok_per_s": engine.generated_tokens / dt, "pairs_per_s": len(results) / dt,
            "prompt_tokens": prompt,
            "prompt_tokens_reused": getattr(engine, "prompt_tokens_reused", None),
            "processed_tok_per_s": None if prompt is None else (prompt + engine.generated_tokens) / dt,
            "cpu_seconds": cpu, "tok_per_cpu_s": engine.generated_tokens / cpu,
            "peak_rss_mb": _peak_rss_mb(),
            # mean sequences per decode call, of --parallel (batch occupancy)
            "occupancy": (engine.decode_rows / engine.decode_steps / args.parallel
                          if getattr(engine, "decode_steps", 0) else None)}


def _bare_model():
    """llama_cpp, the embedded model (loaded as the engine loads it) and its tokenizer."""
    from rmjudge.engine.vocab import Tokenizer, load_model, model_info
    from rmjudge.models.llamacpp import llama_backend
    from rmjudge.models.resolve import resolve_model

    L = llama_backend()
    path = resolve_model(None)
    model = load_model(path, vocab_only=False)
    return L, model, Tokenizer(L, model, model_info(model, path))


def _bare_context(L, model, args, n_ctx: int, unified: bool):
    """A context of `args.parallel` sequences, 512-token batches, flash attention off (as the
    engine on CPU): (context, its memory)."""
    p = L.llama_context_default_params()
    p.n_ctx = n_ctx
    p.n_batch = p.n_ubatch = 512
    p.n_seq_max = args.parallel
    p.n_threads = p.n_threads_batch = args.threads or os.cpu_count()
    p.kv_unified = unified
    p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = L.llama_init_from_model(model, p)
    return ctx, L.llama_get_memory(ctx)


def run_ceiling(args, unified: bool) -> dict:
    """llama.cpp's batched example, reduced to its loop: one prompt prefilled once, copied to
    `parallel` sequences, each decoding `max_tokens` tokens with llama.cpp's dist sampler.
    `unified`: one KV cache for all sequences (llama.cpp's default for this example) or one
    stream per sequence (what the engine uses)."""
    from rmjudge import prompts

    L, model, tok = _bare_model()
    pair = _pairs(args.data, 1, args.workload)[0]
    msgs = prompts.pref_messages(pair.messages, pair.response_a, pair.response_b)
    toks = tok.encode_prompt(msgs, prompts.ASSISTANT_PREFIX)
    P, M = args.parallel, args.max_tokens
    total = args.total_tokens
    n_ctx = (len(toks) + P * (M + 8) + 256) if unified else P * (len(toks) + M + 256)
    ctx, mem = _bare_context(L, model, args, n_ctx, unified)
    batch = L.llama_batch_init(max(512, P), 0, 1)
    vocab = L.llama_model_get_vocab(model)
    generated = 0
    t0, c0 = time.perf_counter(), _cpu_s()
    rounds = 0
    decode_s = 0.0  # the decode steps alone, without the prompt's prefill
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
        t_dec = time.perf_counter()
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
        decode_s += time.perf_counter() - t_dec
        for sp in samplers:
            L.llama_sampler_free(sp)
        rounds += 1
    dt, cpu = time.perf_counter() - t0, _cpu_s() - c0
    del vocab
    return {"variant": "ceiling" if not unified else "ceiling_unified", "workload": args.workload,
            "parallel": P, "seconds": dt, "generated_tokens": generated,
            "tok_per_s": generated / dt, "pairs_per_s": None, "prompt_tokens": len(toks) * rounds,
            "processed_tok_per_s": (generated + len(toks) * rounds) / dt,
            "cpu_seconds": cpu, "tok_per_cpu_s": generated / cpu,
            "decode_rows_per_s": generated / decode_s, "peak_rss_mb": _peak_rss_mb()}


def run_prefill(args) -> dict:
    """The rollout prompts of the workload's pairs (both orders), each evaluated alone in its
    own KV stream in 512-token chunks with logits for its last token only."""
    from rmjudge import prompts
    from rmjudge.judging.protocol import order_responses

    L, model, tok = _bare_model()
    prompts_toks = []
    for pair in _pairs(args.data, args.pairs, args.workload):
        for order in ("ab", "ba"):
            r1, r2 = order_responses(pair, order)
            msgs = prompts.pref_messages(pair.messages, r1, r2)
            prompts_toks.append(tok.encode_prompt(msgs, prompts.ASSISTANT_PREFIX))
    longest = max(len(t) for t in prompts_toks)
    ctx, mem = _bare_context(L, model, args, args.parallel * ((longest + 255) // 256 * 256),
                             unified=False)
    batch = L.llama_batch_init(512, 0, 1)
    t0, c0 = time.perf_counter(), _cpu_s()
    total = 0
    for toks in prompts_toks:
        for start in range(0, len(toks), 512):
            chunk = toks[start:start + 512]
            for i, t in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, start + i, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = start + i == len(toks) - 1
            batch.n_tokens = len(chunk)
            L.llama_decode(ctx, batch)
        L.llama_memory_seq_rm(mem, 0, -1, -1)
        total += len(toks)
    dt, cpu = time.perf_counter() - t0, _cpu_s() - c0
    return {"variant": "prefill", "workload": args.workload, "parallel": args.parallel,
            "seconds": dt, "generated_tokens": 0, "tok_per_s": 0.0, "pairs_per_s": None,
            "prompt_tokens": total, "processed_tok_per_s": total / dt, "cpu_seconds": cpu,
            "tok_per_cpu_s": None, "peak_rss_mb": _peak_rss_mb()}


def bound_row(engine: dict, ceiling: dict, prefill: dict) -> dict:
    """The engine's token counts at the ceiling's decode rate and the bare prefill rate."""
    seconds = (engine["generated_tokens"] / ceiling["tok_per_s"]
               + engine["prompt_tokens"] / prefill["processed_tok_per_s"])
    return {"variant": "bound", "workload": engine["workload"], "parallel": engine["parallel"],
            "seconds": seconds, "generated_tokens": engine["generated_tokens"],
            "tok_per_s": engine["generated_tokens"] / seconds, "pairs_per_s": None,
            "prompt_tokens": engine["prompt_tokens"],
            "processed_tok_per_s": (engine["generated_tokens"] + engine["prompt_tokens"]) / seconds,
            "cpu_seconds": None, "tok_per_cpu_s": None, "peak_rss_mb": 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--naive-pairs", type=int, default=None,
                    help="pairs for the naive variants (default: --pairs; they are slow)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants",
                    default="engine,engine_nocache,naive_lp,naive,ceiling,prefill,ceiling_unified")
    ap.add_argument("--workload", default="short,long", help="short, long, or both (comma list)")
    ap.add_argument("--scaling", default="", help="comma list of --parallel values for the engine")
    ap.add_argument("--baseline-src", default=None,
                    help="also run the engine of this checkout (its rmjudge/ on PYTHONPATH)")
    ap.add_argument("--busy", action="store_true",
                    help="also run the engine beside one competing CPU-bound process")
    ap.add_argument("--judge-format", default="reflectrm",
                    help="the judge format of every variant's prompts and parsing (docs/judges.md)")
    ap.add_argument("--out", default=None, help="write all rows as JSON here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--total-tokens", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.child.startswith("ceiling"):
            row = run_ceiling(args, unified=args.child == "ceiling_unified")
        elif args.child == "prefill":
            row = run_prefill(args)
        else:
            row = run_protocol(args.child, args)
        print(json.dumps(row))
        return
    rows = []

    def child(kind: str, workload: str, parallel: int, total: int = 0, src: str | None = None,
              label: str | None = None, busy: bool = False) -> dict:
        pairs = args.naive_pairs if kind.startswith("naive") and args.naive_pairs else args.pairs
        cmd = [sys.executable, __file__, "--child", kind, "--data", args.data, "--pairs",
               str(pairs), "--samples", str(args.samples), "--max-tokens", str(args.max_tokens),
               "--parallel", str(parallel), "--seed", str(args.seed), "--total-tokens", str(total),
               "--workload", workload, "--judge-format", args.judge_format]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        env = dict(os.environ)
        if src:
            env["PYTHONPATH"] = os.path.abspath(src)
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        if out.returncode != 0:
            raise SystemExit(f"{kind} failed:\n{out.stderr[-2000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        if label:
            row["variant"] = label
        print(_fmt(row), flush=True)
        return row

    for workload in args.workload.split(","):
        engine_tokens = 0
        for kind in args.variants.split(","):
            if kind.startswith("ceiling"):
                total = max(engine_tokens, args.parallel * args.max_tokens)
                rows.append(child(kind, workload, args.parallel, total))
            else:
                rows.append(child(kind, workload, args.parallel))
                if kind == "engine":
                    engine_tokens = rows[-1]["generated_tokens"]
        got = {r["variant"]: r for r in rows if r["workload"] == workload}
        if {"engine", "ceiling", "prefill"} <= set(got):
            rows.append(bound_row(got["engine"], got["ceiling"], got["prefill"]))
            print(_fmt(rows[-1]), flush=True)
            got["bound"] = rows[-1]
        for name in ("engine", "bound"):
            for base in ("naive", "naive_lp", "ceiling"):
                if name in got and base in got:
                    print(f"{workload:<6} {name} / {base}: "
                          f"{got[name]['tok_per_s'] / got[base]['tok_per_s']:.2f}x", flush=True)
        if args.baseline_src:
            rows.append(child("engine", workload, args.parallel, src=args.baseline_src,
                              label="engine_baseline"))
        if args.busy:
            rows.append(child("engine", workload, args.parallel, label="engine+busy", busy=True))
        for p in [int(x) for x in args.scaling.split(",") if x]:
            rows.append(child("engine", workload, p, label=f"engine@{p}"))
    if args.out:
        meta = {"pairs": args.pairs, "samples": args.samples, "max_tokens": args.max_tokens,
                "parallel": args.parallel, "cpus": os.cpu_count(), "load": os.getloadavg(),
                "rows": rows}
        Path(args.out).write_text(json.dumps(meta, indent=2))


def _fmt(r: dict) -> str:
    pps = "-" if r.get("pairs_per_s") is None else f"{r['pairs_per_s']:.3f}"
    proc = r.get("processed_tok_per_s")
    proc = "-" if proc is None else f"{proc:.1f}"
    return (f"{r.get('workload', ''):<6} {r['variant']:<16} parallel={r['parallel']:<3} "
            f"gen_tok/s={r['tok_per_s']:7.1f} gen_tok/cpu_s={r.get('tok_per_cpu_s') or 0:7.1f} "
            f"proc_tok/s={proc:>7} pairs/s={pps:>7} "
            f"tokens={r['generated_tokens']:<6} seconds={r['seconds']:7.1f} "
            f"peak_rss={r['peak_rss_mb']:.0f}MB load={os.getloadavg()[0]:.1f}"
            + (f" occupancy={r['occupancy']:.0%}" if r.get("occupancy") else "")
            + (f" decode_rows/s={r['decode_rows_per_s']:.1f}"
               if r.get("decode_rows_per_s") else ""))


if __name__ == "__main__":
    main()
