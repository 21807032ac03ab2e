"""The prompt format a LoRA adapter was trained on, and the check that a judge uses it.

A judge adapter learns the wording of the prompts it was trained on (`rmjudge.prompts`,
`PROMPT_FORMAT`). Training writes that format beside the PEFT adapter (`ADAPTER_INFO_FILE`),
`rmjudge-export lora` copies it into the GGUF LoRA's metadata (`GGUF_KEY`), and scoring with
`--lora` reads it back: an adapter of another format is refused before anything is judged; an
adapter that records none (made before formats were recorded, or by another tool) is used with
a one-line warning.

The GGUF header is read here with the standard library (the `gguf` package belongs to the
export extra, and `import rmjudge` needs no more than the core dependencies).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from rmjudge.engine.models import ModelError
from rmjudge.prompts import PROMPT_FORMAT

GGUF_KEY = "rmjudge.prompt_format"
ADAPTER_INFO_FILE = "rmjudge.json"

# GGUF metadata value types (ggml's gguf_type) -> struct format of a scalar
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    def __init__(self, f):
        self.f = f

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        raw = self.f.read(size)
        if len(raw) != size:
            raise EOFError
        return struct.unpack(fmt, raw)[0]

    def string(self) -> str:
        n = self.take("<Q")
        raw = self.f.read(n)
        if len(raw) != n:
            raise EOFError
        return raw.decode("utf-8", "replace")

    def value(self, vtype: int):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype, n = self.take("<I"), self.take("<Q")
            if itype in _SCALARS:  # skipped, never needed here
                self.f.seek(n * struct.calcsize(_SCALARS[itype]), 1)
                return None
            for _ in range(n):
                self.value(itype)
            return None
        raise ValueError(f"unknown GGUF value type {vtype}")


def gguf_metadata_value(path: str | Path, key: str):
    """The value of metadata `key` in a GGUF file (None when the file has no such key)."""
    with open(path, "rb") as f:
        r = _Reader(f)
        try:
            if f.read(4) != b"GGUF":
                return None
            version = r.take("<I")
            if version < 2:
                return None
            r.take("<Q")  # tensor count
            n_kv = r.take("<Q")
            for _ in range(n_kv):
                name = r.string()
                vtype = r.take("<I")
                val = r.value(vtype)
                if name == key:
                    return val
        except (EOFError, ValueError, struct.error):
            return None
    return None


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
