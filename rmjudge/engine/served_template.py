"""Where `--server` finds the judge's chat template (engine/server.py), in this order: the
server's own (llama-server's `/props`), a `--chat-template` file, the GGUF given with `--model`,
the served model's name when it is a local GGUF path (llama-cpp-python's server), else the
Hugging Face tokenizer of that name when it is a Hub repository id (`tokenizer_config.json`).

The name may be the path of a GGUF on this machine (llama-cpp-python's server names models so),
a Hugging Face repository id (vLLM, SGLang), or an alias; only a repository id is looked up on
the Hub, and no name is ever an error by itself."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from rmjudge.engine.chat import ChatTemplate
from rmjudge.servers.client import ServerError, ServerSettings
from rmjudge.core.errors import ModelError

# A Hugging Face repository id: "org/name", letters, digits, "-", "_" and "." (no "--" or "..",
# no leading or trailing "-" or "."). A served model named otherwise (a file path, an alias)
# is not looked up on the Hub.
REPO_ID = re.compile(r"^[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9])?/[A-Za-z0-9](?:[\w.-]{0,94}"
                     r"[A-Za-z0-9])?$")


def is_repo_id(name: str) -> bool:
    return bool(REPO_ID.match(name)) and "--" not in name and ".." not in name


def local_gguf(name: str) -> bool:
    """Whether a served model's name is the path of a GGUF file on this machine."""
    try:
        if not os.path.isfile(name):
            return False
        with open(name, "rb") as f:
            return f.read(4) == b"GGUF"
    except (OSError, ValueError):
        return False


def text_value(v: Any) -> str:
    return v if isinstance(v, str) else ""


def hub_template(name: str) -> tuple[ChatTemplate, str] | None:
    """The chat template of a Hub model named like the served model, from its cached or
    downloaded tokenizer_config.json (needs huggingface_hub; honours HF_HUB_OFFLINE). None for
    a name that is not a repository id, and whenever the Hub has no usable template."""
    if not is_repo_id(name):
        return None
    try:
        from rmjudge.models.hub import hub_file
    except ImportError:
        return None
    try:
        path = hub_file(name, "tokenizer_config.json")
    except (ModelError, ValueError, OSError):  # huggingface_hub's validation errors included
        return None
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    template = cfg.get("chat_template")
    if isinstance(template, list):  # named templates: take the default
        template = next((t.get("template") for t in template
                         if isinstance(t, dict) and t.get("name") == "default"), None)
    if not template:
        try:
            jinja = hub_file(name, "chat_template.jinja")
            if jinja is None:
                return None
            with open(jinja, encoding="utf-8") as f:
                template = f.read()
        except (ModelError, ValueError, OSError):
            return None
    if not isinstance(template, str):
        return None

    def tok(v: Any) -> str:
        return (v.get("content") or "") if isinstance(v, dict) else (v or "")

    return (ChatTemplate(template, tok(cfg.get("bos_token")), tok(cfg.get("eos_token"))),
            f"the Hub tokenizer of {name}")


@dataclass
class Found:
    """A served model's chat template (None: the server renders its own), where it came from,
    the model's architecture ("unknown" without a GGUF) and the GGUF's tokenizer (None without
    one)."""

    template: ChatTemplate | None
    source: str
    architecture: str = "unknown"
    tokenizer: Any = None


def read_chat_template(path: str, error: type = ServerError) -> str:
    """The text of a `--chat-template` file, read bounded (rmjudge.io.textfile): a FIFO, a
    device or a file over 1 MiB is refused with one line naming it."""
    from rmjudge.io.textfile import TEXT_FILE_LIMIT, read_text_file, size_words

    return read_text_file(path, f"--chat-template {path}",
                          f"give a readable UTF-8 Jinja2 file of at most "
                          f"{size_words(TEXT_FILE_LIMIT)}, or leave --chat-template out to use "
                          "the server's template", error)


def check_template_file(path: str) -> None:
    """Refuse a --chat-template file (or the API's `server={"chat_template": ...}`) that cannot
    render a judge prompt (a syntax error, an operation the sandbox blocks), naming the file,
    before any server is contacted."""
    from rmjudge.core.settings import SettingsError

    text = read_chat_template(path, SettingsError)
    ChatTemplate(text, origin=f"--chat-template {path}",
                 fix="fix the file, or leave --chat-template out to use the server's template")


def find_template(settings: ServerSettings, model: str, props: dict, root: str,
                  strict: bool) -> Found:
    """The template of the served `model` in the documented order (module docstring); `props`
    is llama-server's /props (empty elsewhere), `root` the server's URL without /v1, `strict`
    `--server-api openai-chat` (no Hub lookup: the API renders its own template)."""
    arch, tokenizer, gguf_template = "unknown", None, None
    template_model = settings.template_model
    if not template_model and not props.get("chat_template") and local_gguf(model):
        # llama-cpp-python names a model by the path it was started with: on this machine
        # that file is the served GGUF, with its template and vocabulary
        template_model = model
    if template_model:
        from rmjudge.engine.vocab import ModelVocab
        from rmjudge.core.settings import EngineSettings

        local = ModelVocab(EngineSettings(model=template_model))
        tokenizer = local.tok
        arch = local.info.architecture
        gguf_template = local.tok.template
    if isinstance(props.get("chat_template"), str) and props["chat_template"]:
        return Found(ChatTemplate(props["chat_template"], text_value(props.get("bos_token")),
                                  text_value(props.get("eos_token"))),
                     f"the server ({root}/props)", arch, tokenizer)
    if settings.chat_template:
        text = read_chat_template(settings.chat_template)
        bos, eos = (gguf_template.bos, gguf_template.eos) if gguf_template else ("", "")
        return Found(ChatTemplate(text, bos, eos), settings.chat_template, arch, tokenizer)
    if strict and gguf_template is None:
        return Found(None, "", arch, tokenizer)
    if gguf_template is not None:
        if not gguf_template.source:
            raise ServerError(f"{template_model} has no chat template; pass "
                              "--chat-template FILE")
        return Found(gguf_template, template_model, arch, tokenizer)  # type: ignore[arg-type]
    hub = hub_template(model)
    if hub is not None:
        return Found(hub[0], hub[1], arch, tokenizer)
    return Found(None, "", arch, tokenizer)
