"""The prompt format a LoRA adapter was trained on, and the check that a judge uses it.

A judge adapter learns the wording of the prompts it was trained on (`rmjudge.prompts`,
`PROMPT_FORMAT`). Training writes that format beside the PEFT adapter (`ADAPTER_INFO_FILE`),
`rmjudge-export lora` copies it into the GGUF LoRA's metadata (`GGUF_KEY`), and scoring with
`--lora` reads it back: an adapter of another format is refused before anything is judged; an
adapter that records none (made before formats were recorded, or by another tool) is used with
a one-line warning.

The GGUF header is read by `rmjudge.models.gguf_header` (the standard library only: the `gguf`
package belongs to the export extra, and `import rmjudge` needs no more than the core
dependencies).
"""

from __future__ import annotations

import json
from pathlib import Path

from rmjudge.models.gguf_header import gguf_metadata_value
from rmjudge.core.errors import ModelError
from rmjudge.prompts import PROMPT_FORMAT

GGUF_KEY = "rmjudge.prompt_format"
ADAPTER_INFO_FILE = "rmjudge.json"


def read_adapter_info(adapter_dir: str | Path) -> int | None:
    """The prompt format recorded beside a PEFT adapter (None when none is recorded)."""
    p = Path(adapter_dir, ADAPTER_INFO_FILE)
    if not p.is_file():
        return None
    try:
        value = json.loads(p.read_text()).get("prompt_format")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def check_lora(path: str | Path) -> str | None:
    """Refuse (ModelError) a GGUF LoRA trained on another prompt format than this rmjudge's;
    return a one-line warning for one that records no format, None when it matches."""
    recorded = gguf_metadata_value(path, GGUF_KEY)
    if recorded is None:
        return (f"warning: the LoRA adapter {path} records no prompt format ({GGUF_KEY}); it is "
                f"used as if trained on format {PROMPT_FORMAT}, this rmjudge's")
    if recorded != PROMPT_FORMAT:
        raise ModelError(
            f"the LoRA adapter {path} was trained on prompt format {recorded}, but this rmjudge "
            f"prompts in format {PROMPT_FORMAT}: judging with it would score prompts it never "
            f"learned; retrain it on data built by this rmjudge (`rmjudge-train build-data`), "
            f"or use an rmjudge release with prompt format {recorded}")
    return None
