"""The settings of `--server` (`ServerSettings`) and the URL as shown (`public_url`).

Kept apart from the transport (client.py, which imports asyncio and starts an event
loop) so that the commands' options can take their defaults from the dataclass without
importing the transport: `rmjudge score`, `rank`, `bench` and `eval` start about 45 ms of CPU
faster (docs/development.md), and the transport is imported only by a run with `--server`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from rmjudge.core.extras import install_hint
from rmjudge.core.settings import SettingsError, setting
from rmjudge.servers import openai_chat


@dataclass(frozen=True)
class ServerSettings:
    """How the judge is reached through an OpenAI-compatible server; the fields with help are
    the `--server*` options of the judging commands (`--server` unset: no server)."""

    url: str = setting(help="Judge through an OpenAI-compatible server (llama-server, vLLM, "
                       "SGLang), e.g. http://127.0.0.1:8000/v1. API key: $RMJUDGE_API_KEY. "
                       f"{install_hint('server')}.", option="--server", dest="server_url",
                       metavar="URL", cli_default=None)
    # served model name; None: the only one the server lists
    model: str | None = setting(None, "Model name on the server (default: the only one it "
                                "serves).", dest="server_model", option="--server-model",
                                metavar="NAME")
    concurrency: int = setting(32, "HTTP requests in flight.", option="--server-concurrency",
                               dest="server_concurrency", metavar="K")
    # Jinja file; see engine/server.py for the order
    chat_template: str | None = setting(None, "Jinja chat template, when the server does not "
                                        "expose its own (otherwise --model GGUF, else the Hub "
                                        "tokenizer of the served model).", metavar="FILE")
    # a GGUF (path or hf: spec) whose template/tokenizer to use
    template_model: str | None = setting(None, cli=False)
    timeout: float = setting(600.0, "Wait for one response at most this long.",
                             option="--server-timeout", dest="server_timeout",
                             metavar="SECONDS")
    # attempts after the first, on 429/5xx/connection errors/timeouts
    retries: int = setting(6, "Retries of a request on 429/5xx/connection errors (exponential "
                           "backoff).", option="--server-retries", dest="server_retries",
                           metavar="N")
    backoff: float = setting(0.5, cli=False)  # first backoff in s (doubles, jittered, <= 30 s)
    top_logprobs: int = setting(20, cli=False)  # alternatives asked for when forcing a verdict
    # prime the prefix cache once per group of requests sharing a prompt
    prime: bool = setting(True, cli=False)
    # llama-server: a request's samples as one request with n: N. With the server's slots
    # known (slot_groups below, the default) that is what llama-server always gets; the flag
    # stays so that earlier commands run
    share_prompt: bool = setting(False, "llama-server: send a request's N samples as one "
                                 "request with n: N, so the prompt is evaluated once (samples "
                                 "seeded together, not one by one).",
                                 flag="--server-share-prompt", dest="server_share_prompt")
    # llama-server: a group holds the slots it decodes on (servers/slots.py), its samples sent
    # as one request with n: N and its shared-prefix requests in turn
    slot_groups: bool = setting(True, cli=False)
    # llama-server started with --slot-save-path: a group's shared prompt evaluated on one
    # slot and copied to its others (servers/slot_copies.py), its requests pinned to them
    slot_copies: bool = setting(True, cli=False)
    # "openai-chat": documented OpenAI chat parameters only (openai_chat.py)
    api: str = setting("auto", "openai-chat: send only documented OpenAI chat parameters "
                       "(hosted and strict APIs); auto: detect the server and use its "
                       "extensions.", option="--server-api", dest="server_api",
                       choices=openai_chat.APIS)

    # the order of the options in a command's help
    OPTIONS = ("url", "model", "concurrency", "retries", "timeout", "api", "share_prompt",
               "chat_template")

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
