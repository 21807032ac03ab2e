"""Engines: `batched` (the fast llama.cpp engine), `naive` (one sequence at a time through
llama-cpp-python's high-level `Llama`, kept as a baseline and for cross-checks) and `server`
(an OpenAI-compatible HTTP server: llama-server, vLLM, SGLang; see engine/server.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmjudge.core.settings import EngineSettings

if TYPE_CHECKING:
    from rmjudge.engine.server import ServerSettings


def load_engine(settings: EngineSettings | None = None, kind: str | None = None,
                vocab_only: bool = False, server: "ServerSettings | None" = None):
    """An engine of `kind`. With `vocab_only`, a `ModelVocab` instead (prompt token counts and
    model metadata without loading weights; both local engines tokenize the same way). With
    `server` (or kind "server"): judge through that server; `settings.model`, when set, is then
    only where the chat template and tokenizer come from. A local engine on the embedded model
    chosen by default (no model, no LoRA given) gets the packaged demo format adapter unless
    `settings.demo_adapter` is False (rmjudge.models.resolve.with_demo_adapter)."""
    settings = settings or EngineSettings()
    kind = kind or settings.kind
    if server is not None or kind == "server":
        from rmjudge.engine.server import ServerEngine
        from rmjudge.core.settings import SettingsError

        if server is None:
            raise SettingsError("the server engine needs --server URL")
        if server.template_model is None and settings.model:
            from dataclasses import replace

            server = replace(server, template_model=settings.model)
        return ServerEngine(server)
    from rmjudge.models.resolve import with_demo_adapter

    settings = with_demo_adapter(settings)  # the embedded model chosen by default only
    if settings.lora:
        check_lora_settings(settings)
    if vocab_only:
        from rmjudge.engine.vocab import ModelVocab

        return ModelVocab(settings)
    if kind == "naive":
        from rmjudge.engine.naive import NaiveEngine

        return NaiveEngine(settings)
    from rmjudge.engine.llama import LlamaEngine

    return LlamaEngine(settings)


def check_lora_settings(settings: EngineSettings) -> None:
    """Refuse a LoRA adapter trained on another prompt format (ModelError, before any model is
    loaded); print a one-line warning for one that records no format (rmjudge/models/adapter_format.py)."""
    import sys

    from rmjudge.core.errors import ModelError
    from rmjudge.models.adapter_format import check_lora
    from rmjudge.models.embedded import merged_demo_adapter
    from rmjudge.models.checks import check_gguf
    from rmjudge.models.resolve import resolve_model

    model = resolve_model(settings.model)
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
