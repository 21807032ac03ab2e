"""Where training targets' analyses come from: `rollout_source` samples rollouts from the base
(llama.cpp on a GGUF, an OpenAI-compatible server, or transformers on an HF model) for
build-data and `sft --analyses base`; `template_source` reads only what templated targets need
(`sft --analyses template`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rmjudge.core.extras import TRAIN, require

from rmjudge.training.data import DataError

BACKENDS = ("auto", "llama", "transformers")


def rollout_source(model, gguf_file, backend, sampling, parallel, threads, server=None,
                   lora=None):
    """(source, description): llama.cpp on a GGUF (with a GGUF LoRA adapter when `lora`), an
    OpenAI-compatible server (`server`: ServerSettings; `model`, when a GGUF, gives its chat
    template), or transformers on an HF model."""
    from rmjudge.training.rollouts import EngineRollouts, TransformersRollouts

    if server is not None:
        from rmjudge.engine import load_engine
        from rmjudge.core.settings import EngineSettings

        engine = load_engine(EngineSettings(model=model), server=server)
        return EngineRollouts(engine, sampling), engine.describe()

    gguf = None
    if model is None:
        from rmjudge.models.resolve import resolve_model

        gguf = resolve_model(None)
    elif gguf_file:
        gguf = str(Path(model) / gguf_file)
    elif model.lower().endswith(".gguf"):
        gguf = model
    if backend == "llama" and gguf is None:
        raise DataError("--backend llama needs a GGUF: --model file.gguf (or --gguf-file)")
    if lora is not None and (server is not None or gguf is None or backend == "transformers"):
        raise DataError("--lora is a GGUF LoRA applied by llama.cpp: use it with a GGUF --model "
                        "(or the embedded default) and without --server or --backend "
                        "transformers")
    if gguf is not None and backend != "transformers":
        from rmjudge.engine import load_engine
        from rmjudge.core.settings import EngineSettings

        engine = load_engine(EngineSettings(model=gguf, parallel=parallel, threads=threads,
                                            lora=lora))
        return EngineRollouts(engine, sampling), (f"llama.cpp on {gguf}"
                                                  + (f" + LoRA {lora}" if lora else ""))
    from rmjudge.training.hf import (ModelSource, load_base, load_tokenizer, materialize,
                                     model_suffix)

    src = ModelSource.parse(gguf or model)
    require("the transformers backend", "train", TRAIN)
    base = materialize(src)
    hf_model = load_base(base, quantization="none")
    hf_model.eval()
    return (TransformersRollouts(hf_model, load_tokenizer(ModelSource(base)), sampling,
                                 model_suffix(hf_model), src.name),
            f"transformers on {src.name}")


def template_source(model, gguf_file, criteria):
    """What `sft --analyses template` needs of the base without sampling from it: the prompt
    suffix of its family (read from the GGUF's header, no llama.cpp load; or from an HF
    folder's config)."""
    from rmjudge.training.sft_templates import TemplateSource

    if model is not None and not gguf_file and not model.lower().endswith(".gguf"):
        from rmjudge.prompts import suffix_for_model

        cfg = Path(model) / "config.json"
        arch = json.loads(cfg.read_text()).get("model_type") if cfg.is_file() else None
        return TemplateSource(suffix_for_model(arch, model), criteria)
    from rmjudge.models.gguf_header import read_gguf_header
    from rmjudge.models.resolve import resolve_model
    from rmjudge.prompts import suffix_for_model

    path = str(Path(model) / gguf_file) if model and gguf_file else resolve_model(model)
    fields = read_gguf_header(path, tensors=False).fields

    def meta(key: str) -> str | None:  # a string field, as llama.cpp reads it (engine/vocab.py)
        value = fields.get(key)
        return value if isinstance(value, str) else None

    name = meta("general.name") or Path(path).name
    return TemplateSource(suffix_for_model(meta("general.architecture"), name), criteria)


@dataclass(frozen=True)
class RolloutBackend:
    """`rmjudge-train sft --backend`: what samples the base's rollouts."""

    backend: str = field(default="auto", metadata={
        "help": "Rollouts: llama.cpp for a GGUF, transformers otherwise.", "choices": BACKENDS})
