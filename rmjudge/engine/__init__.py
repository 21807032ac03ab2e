"""Engines: `batched` (the fast llama.cpp engine), `naive` (one sequence at a time through
llama-cpp-python's high-level `Llama`, kept as a baseline and for cross-checks) and `server`
(an OpenAI-compatible HTTP server: llama-server, vLLM, SGLang; see engine/server.py). Each
implements `rmjudge.engine.base.Engine`; `ENGINES` is the registry `load_engine` chooses from."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from rmjudge.core.settings import EngineSettings, SettingsError

if TYPE_CHECKING:
    from rmjudge.engine.base import Engine
    from rmjudge.servers.settings import ServerSettings


def load_llama(settings: EngineSettings, server: "ServerSettings | None") -> "Engine":
    from rmjudge.engine.llama import LlamaEngine

    return LlamaEngine(settings)


def load_naive(settings: EngineSettings, server: "ServerSettings | None") -> "Engine":
    from rmjudge.engine.naive import NaiveEngine

    return NaiveEngine(settings)


def load_server(settings: EngineSettings, server: "ServerSettings | None") -> "Engine":
    """The server engine; `settings.model`, when set, is only where the chat template and
    tokenizer come from."""
    from rmjudge.engine.server import ServerEngine

    if server is None:
        raise SettingsError("the server engine needs --server URL")
    if server.template_model is None and settings.model:
        server = replace(server, template_model=settings.model)
    return ServerEngine(server)


# Engine kind -> its loader (engine settings, server settings or None -> an `Engine`): the one
# registry of engines. A new backend is its module and one line here (docs/architecture.md,
# "Engines"); `--engine` offers the in-process kinds, `core.settings.ENGINE_KINDS`, and
# `--server URL` picks "server".
ENGINES: dict[str, Callable[[EngineSettings, "ServerSettings | None"], "Engine"]] = {
    "batched": load_llama,
    "naive": load_naive,
    "server": load_server,
}
REMOTE = ("server",)  # kinds that judge elsewhere: no model, demo adapter or vocabulary here


def load_engine(settings: EngineSettings | None = None, kind: str | None = None,
                vocab_only: bool = False, server: "ServerSettings | None" = None):
    """An engine of `kind` (`ENGINES`; default `settings.kind`). With `vocab_only`, a
    `ModelVocab` instead (prompt token counts and model metadata without loading weights; both
    local engines tokenize the same way). With `server` (or kind "server"): judge through that
    server. A local engine's model is resolved here unless the run resolved it already
    (`rmjudge.models.resolve.resolve_judge`): on the embedded model chosen by default (no
    model, no LoRA given) it gets the packaged demo format adapter unless
    `settings.demo_adapter` is False."""
    settings = settings or EngineSettings()
    kind = "server" if server is not None else kind or settings.kind
    if kind not in ENGINES:
        raise SettingsError(f"no engine {kind!r}: one of {', '.join(ENGINES)}")
    if kind not in REMOTE:
        from rmjudge.models.resolve import resolve_judge

        settings = resolve_judge(settings)  # as it is when the run resolved it
        if settings.lora:
            check_lora_settings(settings)
        if vocab_only:
            from rmjudge.engine.vocab import ModelVocab

            return ModelVocab(settings)
    return ENGINES[kind](settings, server)


def check_lora_settings(settings: EngineSettings) -> None:
    """Refuse a LoRA adapter trained on another prompt format (ModelError, before any model is
    loaded); print a one-line warning for one that records no format
    (rmjudge/models/adapter_format.py). `settings`: resolved (`resolve_judge`)."""
    import sys

    from rmjudge.core.errors import ModelError
    from rmjudge.models.adapter_format import check_lora
    from rmjudge.models.embedded import merged_demo_adapter
    from rmjudge.models.checks import check_gguf
    from rmjudge.models.resolve import local_model

    model = local_model(settings)
    if merged_demo_adapter(model):  # the run would record the same judge as without --lora
        from rmjudge.models.embedded import fast_copy_path
        from rmjudge.models.packaged import packaged_model_path

        raise ModelError(f"{model} has the demo format adapter merged in already; to apply "
                         "--lora, give --model the Q8_0 copy it was made from "
                         f"({fast_copy_path(packaged_model_path())}), or leave --lora out")
    warning = check_lora(check_gguf(settings.lora, what="LoRA adapter"))
    if warning:
        sys.stderr.write(warning + "\n")
        sys.stderr.flush()
