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

`--layouts` places the sequences in other KV streams (slot ids) than 0 to rows - 1: `halves`
puts the second half `rows` slots up (0-3 and 8-11 for 8 rows), `spread` every other slot. With
a stream per sequence llama.cpp cuts a decode call wherever the slot ids skip one (its
`split_equal`), and each piece reads all the weights again: what a gap in the busy slots costs
the engine and llama-server.

    python benchmarks/bench_decode_width.py --shape 1.7b --rows 8 --threads 2 \
        --layouts packed,halves,spread,packed
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def context(L, model, streams: int, cells: int, threads: int):
    """A context as the engine makes one: a KV stream per sequence, flash attention off."""
    p = L.llama_context_default_params()
    p.n_ctx = streams * cells
    p.n_batch = p.n_ubatch = 512
    p.n_seq_max = streams
    p.n_threads = p.n_threads_batch = threads
    p.kv_unified = False
    p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    return L.llama_init_from_model(model, p)


def slots_of(layout: str, rows: int) -> list[int]:
    """The slot ids of `rows` sequences laid out as `layout` (packed, halves, spread)."""
    if layout == "packed":
        return list(range(rows))
    if layout == "halves":
        half = rows // 2
        return list(range(half)) + list(range(rows, rows + rows - half))
    if layout == "spread":
        return list(range(0, 2 * rows, 2))
    raise SystemExit(f"unknown layout {layout!r}: packed, halves or spread")


def step_costs(L, model, rows: int, args, clock=None, layout: str = "packed") -> list[float]:
    """Seconds of each decode step of `rows` sequences (after a `--prompt`-token prefill), by
    `clock` (default: CPU time with one thread, else wall time), in the slots of `layout`."""
    slots = slots_of(layout, rows)
    ctx = context(L, model, max(max(slots) + 1, 2), args.prompt + args.steps + 256,
                   args.threads)
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(512, 0, 1)
    clock = clock or (time.process_time if args.threads == 1 else time.perf_counter)
    try:
        for start in range(0, args.prompt, 512):  # the batch holds 512 tokens
            n = min(512, args.prompt - start)
            for i in range(n):
                pos = start + i
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = 100 + pos % 1000, pos, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = pos == args.prompt - 1
            batch.n_tokens = n
            L.llama_decode(ctx, batch)
        for s in slots:
            if s:
                L.llama_memory_seq_cp(mem, 0, s, -1, -1)
        costs = []
        for step in range(args.steps):
            for i, s in enumerate(slots):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = 200 + i, args.prompt + step, 1
                batch.seq_id[i][0] = s
                batch.logits[i] = True
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
    ap.add_argument("--layouts", default="packed", help="slot layouts, a comma list: packed "
                    "(0 to rows - 1), halves, spread (see above)")
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
        for layout in args.layouts.split(","):
            step = statistics.median(step_costs(L, model, rows, args, layout=layout)[1:])
            print(f"rows={rows:<3} {layout:<7} step={step * 1000:7.1f} ms  per token="
                  f"{step / rows * 1000:6.1f} ms  tokens/s={rows / step:6.1f}", flush=True)
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
