"""`--server-api openai-chat` (rmjudge/servers/openai_chat.py) against a local stub on 127.0.0.1
that enforces the OpenAI chat schema strictly: it rejects any parameter outside the documented
set (400), any top_logprobs over 20, any endpoint but /v1/models and /v1/chat/completions, a
missing or wrong API key (401), and answers its first chat request with 429 and Retry-After."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers import rows

pytest.importorskip("httpx")

DATA = Path(__file__).parent / "data"
KEY = "sk-test-9f3a7c1e55d2b08e4"
# The documented OpenAI chat parameters the stub accepts (a subset of the API reference).
ALLOWED = {"model", "messages", "max_tokens", "temperature", "top_p", "seed", "logprobs",
           "top_logprobs", "stop", "n", "stream"}
ANSWERS = [("<Analysis>\nResponse 1 names a color.\n</Analysis>\n<Result>Response 1 is better "
            "than Response 2"),  # the stub cuts the stop string, as OpenAI does
           "<Analysis>\nBoth are short and I keep thinking"]  # no verdict: forced


class StrictStub:
    def __init__(self, retry_after: float = 1.0):
        self.bodies: list[dict] = []
        self.rejected: list[str] = []
        self.chat_times: list[float] = []
        self.throttled = 0
        self.retry_after = retry_after
        self.calls = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, obj, headers=None):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if self.headers.get("authorization") != f"Bearer {KEY}":
                    stub.rejected.append("auth")
                    self._send(401, {"error": {"message": "Incorrect API key provided",
                                               "type": "invalid_request_error"}})
                    return False
                return True

            def do_GET(self):
                if not self._authorized():
                    return
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": "judge-1", "object": "model", "owned_by": "system"}]})
                else:
                    stub.rejected.append(f"GET {self.path}")
                    self._send(404, {"error": {"message": f"Unknown path {self.path}"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if not self._authorized():
                    return
                if self.path != "/v1/chat/completions":
                    stub.rejected.append(f"POST {self.path}")
                    self._send(404, {"error": {"message": f"Unknown path {self.path}"}})
                    return
                unknown = sorted(set(body) - ALLOWED)
                if unknown:
                    stub.rejected.append(f"param {unknown[0]}")
                    self._send(400, {"error": {"message": "Unrecognized request argument "
                                               f"supplied: {unknown[0]}"}})
                    return
                if body.get("top_logprobs", 0) > 20 or (
                        "top_logprobs" in body and body.get("logprobs") is not True):
                    stub.rejected.append("top_logprobs")
                    self._send(400, {"error": {"message": "top_logprobs must be <= 20 and "
                                               "needs logprobs: true"}})
                    return
                stub.chat_times.append(time.monotonic())
                with stub.lock:
                    stub.calls += 1
                    first = stub.calls == 1
                if first:
                    stub.throttled += 1
                    self._send(429, {"error": {"message": "Rate limit reached"}},
                               {"retry-after": str(stub.retry_after)})
                    return
                stub.bodies.append(body)
                self._send(200, stub.answer(body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()

    def answer(self, body: dict) -> dict:
        k = body.get("top_logprobs", 0)
        if body["max_tokens"] == 1:  # a probe or a verdict-only request
            alts = [{"token": "1", "logprob": -0.4}, {"token": "2", "logprob": -1.2},
                    {"token": " 1", "logprob": -3.0}, {"token": "The", "logprob": -4.0}][:max(k, 1)]
            content, lps = "1", [{"token": "1", "logprob": -0.4, "top_logprobs": alts}]
            finish = "length"
        else:
            seed = body.get("seed", 0)
            content = ANSWERS[seed % 2]
            lps = [{"token": w, "logprob": -0.5, "top_logprobs": []} for w in content.split()]
            finish = "stop" if seed % 2 == 0 else "length"
        return {"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "logprobs": {"content": lps}, "finish_reason": finish}],
                "usage": {"prompt_tokens": 50, "completion_tokens": len(lps),
                          "total_tokens": 50 + len(lps)}}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stub():
    s = StrictStub()
    yield s
    s.close()


def _run(url, out, env, *extra):
    cmd = [sys.executable, "-m", "rmjudge", "score", str(DATA / "pandalm_5.jsonl"), "-o", str(out),
           "--server", url, "--server-api", "openai-chat", "--samples", "2", "--max-tokens", "16",
           "--limit", "2", "--server-concurrency", "4",
           "--forced",  # forced verdicts are opt-in: the verdict-only requests are tested too
           *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def _env(tmp_path, key=KEY):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("RMJUDGE_API_KEY", None)
    if key is not None:
        env["RMJUDGE_API_KEY"] = key
    return env


def test_strict_api_judges_with_documented_parameters_only(stub, tmp_path):
    out = tmp_path / "o.duckdb"
    r = _run(stub.url, out, _env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert stub.rejected == []  # no unknown parameter, endpoint or top_logprobs over 20
    assert all(set(b) <= ALLOWED for b in stub.bodies)
    assert "documented OpenAI parameters only" in r.stderr
    # the 429's Retry-After (1 s) was honoured before the request was sent again
    assert stub.throttled == 1 and stub.chat_times[1] - stub.chat_times[0] >= 0.95
    # samples: the judge's messages, no prefilled assistant turn
    samples = [b for b in stub.bodies if b["max_tokens"] == 16]
    assert samples and all(b["messages"][-1]["role"] == "user" for b in samples)
    verdict_only = [b for b in stub.bodies if b["max_tokens"] == 1 and len(b["messages"]) > 1]
    assert verdict_only and all(b["top_logprobs"] == 20 and b["temperature"] == 0.0
                                for b in verdict_only)
    assert all(b["messages"][-2]["role"] == "assistant" for b in verdict_only)
    assert rows(str(out), "SELECT count(*) FROM pairs") == [(2,)]
    # the parsed answers lost their <Analysis> opening (prefilled in-process) and got their
    # stop string back; the unparsed ones have a forced verdict from the top log-probabilities
    assert rows(str(out), """SELECT count(*) FROM samples WHERE stage='rollout'
                          AND verdict_source='parsed' AND text LIKE '<Analysis>%'""") == [(0,)]
    forced = rows(str(out), """SELECT p_first FROM samples WHERE verdict_source='forced'""")
    one = math.log(math.exp(-0.4) + math.exp(-3.0))  # "1" and " 1" are both choice 1
    p = math.exp(one) / (math.exp(one) + math.exp(-1.2))
    assert forced and all(min(abs(q - p), abs(q - (1 - p))) < 1e-6 for (q,) in forced)
    settings = json.loads(rows(str(out), "SELECT settings FROM runs")[0][0])
    assert "verdict-only" in settings["prompt_encoding"]
    # cost: the usage of every answered request, in the runs table and the summary
    sent = 50 * len(stub.bodies)
    received = sum(len(stub.answer(b)["choices"][0]["logprobs"]["content"])
                   for b in stub.bodies)
    assert rows(str(out), "SELECT tokens_sent, tokens_received FROM runs") == [(sent, received)]
    assert (f"server cost: {sent} prompt tokens sent, {received} tokens received"
            in r.stdout + r.stderr)


def test_the_api_key_never_reaches_an_output(stub, tmp_path):
    out = tmp_path / "o.duckdb"
    r = _run(stub.url, out, _env(tmp_path), "--commit-every", "1")
    assert r.returncode == 0, r.stderr
    e = subprocess.run([sys.executable, "-m", "rmjudge", "filter", str(out), "-o",
                        str(tmp_path / "dpo.jsonl")], capture_output=True, text=True,
                       env=_env(tmp_path))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert out in files and len(files) >= 3
    leaks = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert leaks == []
    for text in (r.stdout, r.stderr, e.stdout, e.stderr):
        assert KEY not in text
    # a wrong key: one Error line naming the variable, not the key
    bad = "sk-wrong-key-0123456789"
    r = _run(stub.url, tmp_path / "b.duckdb", _env(tmp_path, key=bad))
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("Error: the server at ") and "RMJUDGE_API_KEY" in r.stderr
    assert bad not in r.stderr + r.stdout


def test_top_logprobs_are_capped_at_20(stub, tmp_path):
    from rmjudge import prompts
    from rmjudge.engine.server import ServerEngine, ServerSettings, sample_seed
    from rmjudge.core.types import GenRequest

    msgs = prompts.pref_messages([{"role": "user", "content": "Name a color."}], "Red.", "Cat.")
    # a seed whose two samples get one parsed and one unparsed answer from the stub
    seed = next(s for s in range(100) if sample_seed(s, 0) % 2 != sample_seed(s, 1) % 2)
    r = GenRequest(messages=msgs, n=2, assistant_prefix=prompts.ASSISTANT_PREFIX,
                   temperature=1.0, seed=seed, max_tokens=16, stop=prompts.STOP, share_key="k",
                   force=prompts.force_spec("pref"))
    os.environ["RMJUDGE_API_KEY"] = KEY
    try:
        with ServerEngine(ServerSettings(url=stub.url, api="openai-chat", top_logprobs=50,
                                         backoff=0.01)) as eng:
            assert eng.flavor == "openai-chat" and eng.endpoint == "chat"
            gens = eng.generate([r])[0]
    finally:
        del os.environ["RMJUDGE_API_KEY"]
    assert stub.rejected == []
    assert max(b.get("top_logprobs", 0) for b in stub.bodies) == 20
    assert sum(g.forced_probs is not None for g in gens) == 1
