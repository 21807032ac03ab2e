"""The transport of `--server` (engine/server.py is the judge logic over it).

`ServerClient` is the HTTP side only; it knows nothing of prompts, samples or verdicts:

- **Connection**: an asyncio event loop in a daemon thread runs an `httpx.AsyncClient`
  (`run(coro)` from any thread, even inside another loop); a semaphore bounds the requests in
  flight (`--server-concurrency`). `close()` (also at interpreter exit) cancels and awaits what
  is still in flight, closes the client and the loop, so a stopped run prints nothing after its
  error line. The API key is read from `RMJUDGE_API_KEY` and sent as a
  bearer token, never stored; a query string in `--server` (an API version, a gateway's key) goes
  with every request, after the path rmjudge appends.
- **Requests** (`request`): 429, 5xx, connection errors and timeouts are retried with exponential
  backoff and jitter, honouring `Retry-After`; `HTTPStatus` is a final refusal, `Unreachable`
  means retries are exhausted. A response is read as it streams, up to a cap derived from its
  `max_tokens` (responses.py); `--server-timeout` bounds the whole response.
- **Counting**: requests sent, requests in flight (and their peak), and the cost: prompt tokens
  sent and tokens received over every answered request, from the server's `usage`.
- **Discovery** (`discover`): the served model (`/v1/models`, `--server-model`), the server's
  flavor (llama-server, vLLM, SGLang, llama-cpp-python, any OpenAI-compatible one), its context
  size and llama-server's `/props`; a server still loading its model (503) is waited for.
- **llama-server's own endpoint** `/tokenize` (`server_tokens`).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from rmjudge.servers import openai_chat
from rmjudge.servers import responses as wire
from rmjudge.core.extras import install_hint
from rmjudge.core.errors import ModelError
from rmjudge.servers.settings import ServerSettings, public_url  # noqa: F401  (re-exported)

API_KEY_ENV = "RMJUDGE_API_KEY"
RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}

# The most bytes one response may have: a generation of max_tokens tokens with their top
# log-probabilities in any server's format fits in a few KiB per token; a server that sends
# more (an endless or runaway body) stops the run instead of filling the client's memory.
BODY_BASE = 8 << 20
BODY_PER_TOKEN = 8 << 10


class ServerError(ModelError):
    """The server cannot be used (unreachable, refuses, lacks log-probabilities)."""


class Unreachable(Exception):
    """Retries are exhausted: the server is down, refuses connections or keeps failing."""

    def __init__(self, reason: str, attempts: int):
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts


class HTTPStatus(Exception):
    """A final non-retryable HTTP status (4xx, a deterministic 500)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Served:
    """What discovery found: the server's flavor, the model's name, its context size (0 when
    unknown) and llama-server's /props (empty elsewhere)."""

    flavor: str
    model: str
    n_ctx: int
    props: dict = field(default_factory=dict)


class EventLoop:
    """An asyncio loop in a daemon thread: `run(coro)` from any thread, even inside a loop.

    `close()` ends it cleanly: every task still on it (requests a failed run left in flight,
    backoff sleeps) is cancelled and awaited, the `closers` run (the HTTP client's), async
    generators are finalised, then the loop stops and is closed. So nothing is left for the
    garbage collector to report ("Task was destroyed but it is pending!") after the run's one
    error line. It runs at interpreter exit too, for a loop nobody closed."""

    DRAIN_SECONDS = 5.0  # a task that ignores cancellation does not hold the exit longer

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.closers: list = []  # coroutine functions run on close, after the tasks ended
        self.thread = threading.Thread(target=self.loop.run_forever, name="rmjudge-http",
                                       daemon=True)
        self.thread.start()
        self._closed = weakref.finalize(self, _close_loop, self.loop, self.thread, self.closers,
                                        self.DRAIN_SECONDS)

    def run(self, coro):
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()
            raise

    def close(self) -> None:
        self._closed()


async def _drain(loop: asyncio.AbstractEventLoop, closers: list) -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks(loop) if t is not me]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for close in closers:
        try:
            await close()
        except Exception:  # noqa: BLE001 - closing must not mask the run's own error
            pass
    await loop.shutdown_asyncgens()


def _close_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread, closers: list,
                wait: float) -> None:
    """EventLoop.close (a finalizer: it holds no reference to the EventLoop)."""
    if loop.is_closed() or not thread.is_alive():
        return
    if threading.current_thread() is thread:  # collected on the loop itself: cannot wait here
        loop.stop()
        return
    try:
        asyncio.run_coroutine_threadsafe(_drain(loop, closers), loop).result(wait)
    except Exception:  # noqa: BLE001 - a drain that fails or times out still stops the loop
        pass
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=wait)
    if not thread.is_alive():
        loop.close()


class ServerClient:
    """HTTP to one OpenAI-compatible server (see the module docstring)."""

    def __init__(self, settings: ServerSettings):
        try:
            import httpx
        except ImportError:
            raise ModelError(f"--server needs httpx: {install_hint('server')}") from None
        self._httpx = httpx
        self.settings = settings
        parts = urlsplit(settings.url)
        path = parts.path.rstrip("/")
        path = path if path.endswith("/v1") else path + "/v1"
        self.base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        self.root = self.base[: -len("/v1")]
        self._params = parse_qsl(parts.query, keep_blank_values=True)
        self.url = public_url(self.base)
        self._key = os.environ.get(API_KEY_ENV) or None
        self.strict = settings.api == openai_chat.API
        self.requests_sent = 0
        # cost: prompt tokens sent and tokens received over every answered request (samples,
        # forced verdicts, priming, the start-up checks), from the servers' `usage`
        self.tokens_sent = 0
        self.tokens_received = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self._sem: asyncio.Semaphore | None = None
        self._client = None
        self._loop: EventLoop | None = EventLoop()
        try:
            self.run(self._open())
        except BaseException:
            self.close()
            raise

    # -- lifecycle -------------------------------------------------------------------------
    def run(self, coro):
        """Run a coroutine on the client's loop and return its result (from any thread)."""
        if self._loop is None:
            coro.close()
            raise ServerError(f"the connection to {self.url} is closed")
        return self._loop.run(coro)

    async def _open(self) -> None:
        httpx = self._httpx
        k = self.settings.concurrency
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self._client = httpx.AsyncClient(
            headers=headers, params=self._params or None,
            timeout=httpx.Timeout(self.settings.timeout, connect=10.0, pool=None),
            limits=httpx.Limits(max_connections=k + 4, max_keepalive_connections=k + 4),
        )
        self._sem = asyncio.Semaphore(k)
        self._loop.closers.append(self._client.aclose)  # type: ignore[union-attr]

    def close(self) -> None:
        """Cancel what is still in flight, close the HTTP client and its thread (also done at
        interpreter exit); see EventLoop."""
        if self._loop is None:
            return
        self._loop.close()
        self._loop = None

    # -- requests ----------------------------------------------------------------------------
    async def request(self, method: str, url: str, body: dict | None = None,
                      retry: bool = True) -> Any:
        """One call with retries on 429/5xx/connection errors/timeouts; returns parsed JSON.

        Raises `HTTPStatus` for a final non-retryable status, `Unreachable` when retries
        are exhausted and `wire.ProtocolError` for a body over the size cap or a success that is
        not a JSON object. The semaphore is held only while a request is on the wire."""
        httpx = self._httpx
        attempts = 1 + (self.settings.retries if retry else 0)
        cap = BODY_BASE + BODY_PER_TOKEN * int((body or {}).get("max_tokens") or 0)
        last = ""
        for attempt in range(attempts):
            wait = None
            async with self._sem:  # type: ignore[union-attr]
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                self.requests_sent += 1
                try:
                    # --server-timeout bounds the whole response, also one that trickles in
                    resp, data = await asyncio.wait_for(self._fetch(method, url, body, cap),
                                                        self.settings.timeout)
                except (httpx.TimeoutException, asyncio.TimeoutError):
                    last = f"no answer within {self.settings.timeout:g} s"
                except httpx.TransportError as exc:
                    last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                else:
                    status = resp.status_code
                    if status < 400:
                        try:
                            out = json.loads(data)
                        except (ValueError, RecursionError):
                            last = f"answered {status} with a body that is not JSON"
                        else:
                            if not isinstance(out, dict):
                                raise wire.ProtocolError(
                                    f"answered {url[len(self.root):]} with JSON that is not an "
                                    f"object: {data[:80]!r}")
                            self._count_usage(body, out)
                            return out
                    elif status in RETRY_STATUS and not wire.deterministic(status, data):
                        last = f"HTTP {status}: {wire.error_text(data)}"
                        wait = wire.retry_after(resp)
                    else:
                        raise HTTPStatus(status, wire.error_text(data))
                finally:
                    self.in_flight -= 1
            if attempt + 1 < attempts:
                backoff = min(30.0, self.settings.backoff * 2 ** attempt) * random.uniform(0.5, 1.5)
                await asyncio.sleep(max(backoff, min(wait or 0.0, 60.0)))
        raise Unreachable(last, attempts)

    async def post(self, path: str, body: dict) -> Any:
        """POST to a /v1 endpoint (`/completions`, `/chat/completions`)."""
        return await self.request("POST", self.base + path, body)

    async def post_native(self, body: dict) -> Any:
        """POST to llama-server's own `/completion` (beside /v1)."""
        return await self.request("POST", self.root + "/completion", body)

    async def get(self, path: str, root: bool = False, retry: bool = True) -> Any:
        return await self.request("GET", (self.root if root else self.base) + path, retry=retry)

    def _count_usage(self, body: dict | None, out: dict) -> None:
        """Add a completion's prompt and completion tokens to the run's cost: the server's
        `usage`, else the token ids sent and the log-probabilities received."""
        if body is None:
            return
        sent, received = wire.usage(out)
        if sent is None and isinstance(body.get("prompt"), list):
            sent = len(body["prompt"])
        choices = out.get("choices") if isinstance(out.get("choices"), list) else []
        counted = sum(len(wire.token_logprobs(c.get("logprobs")) or [])
                      for c in choices if isinstance(c, dict))
        # llama-server's usage counts one choice of an n: N request
        received = max(received or 0, counted)
        self.tokens_sent += sent or 0
        self.tokens_received += received

    async def _fetch(self, method: str, url: str, body: dict | None, cap: int):
        async with self._client.stream(method, url, json=body) as resp:  # type: ignore
            return resp, await wire.read_capped(resp, cap)

    # -- discovery -----------------------------------------------------------------------------
    async def discover(self) -> Served:
        """The served model and the server's flavor, context size and /props."""
        try:
            listing = await self.get("/models", retry=False)
        except Unreachable as exc:
            if exc.reason.startswith("HTTP 503"):  # up, still loading its model: wait for it
                return await self._discover_loaded()
            raise ServerError(f"cannot reach the server at {self.url} ({exc.reason}); start it, "
                              "or fix --server (for example http://127.0.0.1:8000/v1)") from None
        except HTTPStatus as exc:
            if exc.status in (401, 403):
                raise ServerError(f"the server at {self.url} refused the request (HTTP "
                                  f"{exc.status}: {exc.message}); set {API_KEY_ENV} to its "
                                  "API key") from None
            if exc.status == 503:  # still loading: wait like any other request
                listing = await self.get("/models")
            elif exc.status == 404:
                listing = {}
            else:
                raise ServerError(f"the server at {self.url} answered /models with HTTP "
                                  f"{exc.status}: {exc.message}") from None
        data = listing.get("data")
        models = [m for m in (data if isinstance(data, list) else [])
                  if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]
        names = [m["id"] for m in models]
        want = self.settings.model
        if want is None:
            if not isinstance(data, list):
                raise ServerError(
                    f"{self.url}/models lists no models (HTTP 404 or no model list): is "
                    f"{self.url} the /v1 URL of an OpenAI-compatible server? Fix --server, or "
                    "name the model with --server-model")
            if len(names) != 1:
                raise ServerError(
                    f"the server at {self.url} serves {len(names)} models"
                    f"{': ' + ', '.join(names) if names else ''}; choose one with --server-model")
            want = names[0]
        elif names and want not in names:
            raise ServerError(f"the server at {self.url} does not serve {want!r}; it serves "
                              f"{', '.join(names)}: fix --server-model")
        entry = next((m for m in models if m["id"] == want), {})
        owner = str(entry.get("owned_by", "")).lower()
        props: dict = {}
        if self.strict:  # only the documented endpoints: /models and /chat/completions
            return Served(openai_chat.API, want, 0, props)
        try:
            p = await self.get("/props", root=True, retry=False)
            props = p if isinstance(p, dict) else {}
        except (Unreachable, HTTPStatus, wire.ProtocolError):
            props = {}
        if "vllm" in owner:
            flavor = "vllm"
        elif "sglang" in owner:
            flavor = "sglang"
        elif "llamacpp" in owner or "default_generation_settings" in props:
            flavor = "llama-server"
        elif owner == "me":
            flavor = "llama-cpp-python"
        else:
            flavor = "openai-compatible"
        meta, gen = entry.get("meta"), props.get("default_generation_settings")
        n_ctx = (entry.get("max_model_len") or (meta.get("n_ctx_train") if isinstance(meta, dict)
                                                else None)
                 or (gen.get("n_ctx") if isinstance(gen, dict) else None) or 0)
        try:
            n_ctx = int(n_ctx)
        except (TypeError, ValueError):
            n_ctx = 0
        return Served(flavor, want, n_ctx, props)

    async def _discover_loaded(self) -> Served:
        """`discover` once a server that answered 503 (llama-server: "Loading model") is
        ready: /models is retried with backoff first."""
        try:
            await self.get("/models")
        except Unreachable as exc:
            raise ServerError(f"the server at {self.url} is up but not ready ({exc.reason}) "
                              f"after {exc.attempts} attempts; wait for it to load its model "
                              "and retry") from None
        except HTTPStatus:
            pass  # answered otherwise: discover says what
        return await self.discover()

    # -- llama-server's own endpoints ----------------------------------------------------------
    async def server_tokens(self, text: str, special: bool, add_bos: bool) -> list[int]:
        """llama-server's /tokenize of `text` (`parse_special` as `special`)."""
        out = await self.request("POST", self.root + "/tokenize", {
            "content": text, "add_special": add_bos, "parse_special": special})
        ids = out.get("tokens")
        if not isinstance(ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise wire.ProtocolError("answered /tokenize without a list of token ids: "
                                     f"{str(out)[:80]}")
        return ids
