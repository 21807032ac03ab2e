"""The settings of `--server` (`ServerSettings`) and the URL as shown (`public_url`).

Kept apart from the transport (server_client.py, which imports asyncio and starts an event
loop) so that the commands' options can take their defaults from the dataclass without
importing the transport: `rmjudge score`, `rank`, `bench` and `eval` start about 45 ms of CPU
faster (docs/development.md), and the transport is imported only by a run with `--server`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from rmjudge.core.settings import SettingsError
from rmjudge.engine import openai_chat

@dataclass(frozen=True)
class ServerSettings:
    url: str
    model: str | None = None  # served model name; None: the only one the server lists
    concurrency: int = 32  # HTTP requests in flight
    chat_template: str | None = None  # Jinja file; see engine/server.py for the order
    template_model: str | None = None  # a GGUF (path or hf: spec) whose template/tokenizer to use
    timeout: float = 600.0  # seconds to wait for one response
    retries: int = 6  # attempts after the first, on 429/5xx/connection errors/timeouts
    backoff: float = 0.5  # first backoff in seconds (doubles per attempt, jittered, <= 30 s)
    top_logprobs: int = 20  # alternatives asked for when forcing a verdict
    prime: bool = True  # prime the prefix cache once per group of requests sharing a prompt
    share_prompt: bool = False  # llama-server: a request's samples as one request with n: N
    slot_groups: bool = True  # llama-server: a shared prompt's requests in turn, one per slot
    api: str = "auto"  # "openai-chat": documented OpenAI chat parameters only (openai_chat.py)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingsError(f"--server must be an http(s) URL such as http://host:8000/v1, "
                                f"got {public_url(self.url)!r}")
        if self.concurrency < 1:
            raise SettingsError("--server-concurrency must be at least 1")
        if self.retries < 0:
            raise SettingsError("--server-retries must be at least 0")
        if self.timeout <= 0:
            raise SettingsError("--server-timeout must be positive")
        if self.top_logprobs < 2:
            raise SettingsError("top_logprobs must be at least 2")
        if self.api not in openai_chat.APIS:
            raise SettingsError(f"--server-api must be one of {', '.join(openai_chat.APIS)}, "
                                f"got {self.api!r}")

    @property
    def public(self) -> str:
        """The URL as shown and recorded: no credentials, no query string."""
        return public_url(self.url)


def public_url(url: str) -> str:
    """The URL without user:password@ and without a query string (which may carry a key)."""
    p = urlsplit(url)
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{p.port}" if p.port else "")
    return urlunsplit((p.scheme, netloc, p.path.rstrip("/"), "", ""))
