"""What one decode step costs by the number of sequences in it: llama.cpp alone, the model
loaded as the engine loads it (plain weight buffers, one KV stream per sequence, flash attention
off), a prompt evaluated once and copied to every sequence, then decode steps of one token per
sequence; the median step's wall time (CPU time with --threads 1) over the sequences.

    python benchmarks/bench_decode_width.py --shape 1.7b --rows 1,4,8,9,16,32 --threads 2

llama.cpp multiplies K-quant weights (Q4_K, Q5_K, Q6_K, ...) row by row (`ggml_vec_dot_*`)
in a call of few tokens and with a tiled kernel from about 8 tokens on: the tiled kernel
unpacks the weights once per call, so its cost is mostly fixed, and decoding many sequences
together pays only past that point. `GGML_CPU_TILED_MM=0` (never tiled) or
`GGML_CPU_TILED_MM_FORCE=1` (always) in the environment show each kernel alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def _context(L, model, streams: int, cells: int, threads: int):
    p = L.llama_context_default_params()
    p.n_ctx = streams * cells
    p.n_batch = p.n_ubatch = 512
    p.n_seq_max = streams
    p.n_threads = p.n_threads_batch = threads
    p.kv_unified = False
    p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    return L.llama_init_from_model(model, p)


def step_costs(L, model, rows: int, args, clock=None) -> list[float]:
    """Seconds of each decode step of `rows` sequences (after a `--prompt`-token prefill), by
    `clock` (default: CPU time with one thread, else wall time)."""
    ctx = _context(L, model, max(rows, 2), args.prompt + args.steps + 256, args.threads)
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(512, 0, 1)
    clock = clock or (time.process_time if args.threads == 1 else time.perf_counter)
    try:
        for i in range(args.prompt):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = 100 + i % 1000, i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == args.prompt - 1
        batch.n_tokens = args.prompt
        L.llama_decode(ctx, batch)
        for s in range(1, rows):
            L.llama_memory_seq_cp(mem, 0, s, -1, -1)
        costs = []
        for step in range(args.steps):
            for s in range(rows):
                batch.token[s], batch.pos[s], batch.n_seq_id[s] = 200 + s, args.prompt + step, 1
                batch.seq_id[s][0] = s
                batch.logits[s] = True
            batch.n_tokens = rows
            t = clock()
            L.llama_decode(ctx, batch)
            costs.append(clock() - t)
        return costs
    finally:
        L.llama_batch_free(batch)
        L.llama_free(ctx)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a GGUF (default: the embedded judge's file)")
    ap.add_argument("--shape", default=None, help="a judge shape instead (judge_shapes.py)")
    ap.add_argument("--quant", default="Q4_K_M")
    ap.add_argument("--rows", default="1,2,4,8,9,12,16,32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=440, help="prompt tokens before the steps")
    ap.add_argument("--steps", type=int, default=6, help="decode steps per width (the first "
                    "is left out of the median)")
    args = ap.parse_args()
    from rmjudge.engine.vocab import load_model
    from rmjudge.models.llamacpp import llama_backend
    from rmjudge.models.resolve import resolve_model

    if args.shape:
        from judge_shapes import bench_model

        args.model = bench_model(args.shape, args.quant)
    path = resolve_model(args.model)
    L = llama_backend()
    model = load_model(path, vocab_only=False)
    kernel = {k: os.environ[k] for k in ("GGML_CPU_TILED_MM", "GGML_CPU_TILED_MM_FORCE")
              if k in os.environ}
    print(f"model {os.path.basename(path)}; threads {args.threads} "
          f"({'CPU' if args.threads == 1 else 'wall'} time); kernel settings {kernel or 'default'};"
          f" load {os.getloadavg()[0]:.2f}", flush=True)
    for rows in [int(r) for r in args.rows.split(",")]:
        step = statistics.median(step_costs(L, model, rows, args)[1:])
        print(f"rows={rows:<3} step={step * 1000:7.1f} ms  per token={step / rows * 1000:6.1f} ms"
              f"  tokens/s={rows / step:6.1f}", flush=True)
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
