"""`rmjudge score --server URL`: options for judging through an OpenAI-compatible server.

Kept apart from the in-process engine's options (cli/options.py). With `--server`, `--model`
(a GGUF path or Hub spec) is only where the chat template and tokenizer come from, when the
server does not expose its template; the API key is read from $RMJUDGE_API_KEY, never from an
option, so it stays out of shell history and of the run tables.
"""

from __future__ import annotations

import click

from rmjudge.cli.options import combine_options
from rmjudge.core.extras import install_hint


def server_default(name: str):
    """A `ServerSettings` field's default: the dataclass is where it is written."""
    from dataclasses import fields

    from rmjudge.engine.server_settings import ServerSettings

    return next(f.default for f in fields(ServerSettings) if f.name == name)


server_options = combine_options([
    click.option("--server", "server_url", default=None, metavar="URL",
                 help="Judge through an OpenAI-compatible server (llama-server, vLLM, SGLang), "
                 "e.g. http://127.0.0.1:8000/v1. API key: $RMJUDGE_API_KEY. "
                 f"{install_hint('server')}."),
    click.option("--server-model", default=None, metavar="NAME",
                 help="Model name on the server (default: the only one it serves)."),
    click.option("--server-concurrency", default=server_default("concurrency"), show_default=True,
                 metavar="K",
                 help="HTTP requests in flight."),
    click.option("--server-retries", default=server_default("retries"), show_default=True,
                 metavar="N",
                 help="Retries of a request on 429/5xx/connection errors (exponential backoff)."),
    click.option("--server-timeout", default=server_default("timeout"), show_default=True,
                 metavar="SECONDS",
                 help="Wait for one response at most this long."),
    click.option("--server-api", default="auto", show_default=True,
                 type=click.Choice(["auto", "openai-chat"]),
                 help="openai-chat: send only documented OpenAI chat parameters (hosted and "
                 "strict APIs); auto: detect the server and use its extensions."),
    click.option("--server-share-prompt", is_flag=True,
                 help="llama-server: send a request's N samples as one request with n: N, so "
                 "the prompt is evaluated once (samples seeded together, not one by one)."),
    click.option("--chat-template", default=None, metavar="FILE",
                 help="Jinja chat template, when the server does not expose its own "
                 "(otherwise --model GGUF, else the Hub tokenizer of the served model)."),
])


def server_settings(kw: dict):
    """A ServerSettings from the options (None without --server); pops them from `kw`."""
    url = kw.pop("server_url")
    model, k = kw.pop("server_model"), kw.pop("server_concurrency")
    retries, timeout = kw.pop("server_retries"), kw.pop("server_timeout")
    template, api = kw.pop("chat_template"), kw.pop("server_api")
    share = kw.pop("server_share_prompt")
    if url is None:
        if model or template or api != "auto" or share:
            from rmjudge.core.settings import SettingsError

            raise SettingsError("--server-model, --server-api, --server-share-prompt and "
                                "--chat-template need --server URL")
        return None
    from rmjudge.engine.server_settings import ServerSettings

    if template is not None:
        check_template_file(template)
    return ServerSettings(url=url, model=model, concurrency=k, retries=retries, timeout=timeout,
                          chat_template=template, api=api, share_prompt=share)


def check_template_file(path: str) -> None:
    """Refuse a --chat-template file that cannot render a judge prompt (a syntax error, an
    operation the sandbox blocks), naming the file, before any server is contacted."""
    from rmjudge.engine.chat import ChatTemplate
    from rmjudge.engine.served_template import read_chat_template
    from rmjudge.core.settings import SettingsError

    text = read_chat_template(path, SettingsError)
    ChatTemplate(text, origin=f"--chat-template {path}",
                 fix="fix the file, or leave --chat-template out to use the server's template")
