"""Engines: `batched` (the fast llama.cpp engine) and `naive` (one sequence at a time through
llama-cpp-python's high-level `Llama`, kept as a baseline and for cross-checks)."""

from __future__ import annotations

from rmjudge.settings import EngineSettings


def load_engine(settings: EngineSettings | None = None, kind: str = "batched", vocab_only: bool = False):
    """An engine of `kind`; with `vocab_only`, a `ModelVocab` instead (prompt token counts and
    model metadata without loading weights; both engines tokenize the same way)."""
    settings = settings or EngineSettings()
    if vocab_only:
        from rmjudge.engine.vocab import ModelVocab

        return ModelVocab(settings)
    if kind == "naive":
        from rmjudge.engine.naive import NaiveEngine

        return NaiveEngine(settings)
    from rmjudge.engine.llama import LlamaEngine

    return LlamaEngine(settings)
