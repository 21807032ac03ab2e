"""Where `--server` finds a chat template by the served model's name (engine/server.py): the
name may be the path of a GGUF on this machine (llama-cpp-python's server names models so), a
Hugging Face repository id (vLLM, SGLang), or an alias; only a repository id is looked up on the
Hub, and no name is ever an error by itself."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from rmjudge.engine.chat import ChatTemplate
from rmjudge.models import ModelError

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
        from rmjudge.hub_models import hub_file
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
