"""The header of a GGUF file (its metadata and tensor table), read with the standard library.

What rmjudge, training and export need of a GGUF's header is a few metadata values (the
architecture, the pre-tokenizer, the file type, an adapter's prompt format) and the tensor
table (names, shapes, types). The `gguf` package's `GGUFReader` builds a NumPy view of every
element of every metadata array first, the tokenizer's 49,152 tokens and 48,900 merges
included: 2.4 s of CPU per read of the embedded model, paid several times per export. This
reader decodes only the values asked for and skips the rest by their lengths (about 0.05 s on
the same file); it needs no package beyond the standard library, so `import rmjudge` stays light.
The layout read is GGUF versions 2 and 3 (little-endian), as ggml's gguf.cpp writes it.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmjudge.core.errors import UserError

# GGUF metadata value types (ggml's gguf_type) -> struct format of a scalar
SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                  10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32  # of the data section, unless `general.alignment` says otherwise
TRUNCATED = ("the file ends inside its header; give a complete GGUF file (a download or copy "
             "may have been cut short)")


class GGUFFormatError(UserError, ValueError):
    """Not a GGUF file of a version read here, or one cut short: a user error (the commands
    print it as one `Error:` line naming the file)."""


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array: its element type and length, and its values when they were asked for
    (`read_gguf_header(..., arrays=...)`), else None."""

    item_type: int
    count: int
    values: list | None = None

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class GGUFTensor:
    """One entry of the tensor table: `shape` in ggml's ne order (ne[0], the row length,
    first), `ggml_type` ggml's type id (e.g. 0 F32, 1 F16, 3 Q4_1, 8 Q8_0), `offset` from the
    start of the data section."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFHeader:
    """`data_offset`: where the data section starts in the file (the tensors' `offset`s count
    from there); 0 when the tensor table was not read."""

    version: int
    fields: dict[str, Any] = field(default_factory=dict)
    tensors: list[GGUFTensor] = field(default_factory=list)
    data_offset: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


class _Cursor:
    """Reads little-endian values from a buffer, moving forward."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, fmt: str):
        try:
            value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        except struct.error:
            raise GGUFFormatError(TRUNCATED) from None
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("<Q")
        end = self.pos + n
        if end > len(self.buf):
            raise GGUFFormatError(TRUNCATED)
        text = bytes(self.buf[self.pos:end]).decode("utf-8", "replace")
        self.pos = end
        return text

    def skip_strings(self, count: int) -> None:
        buf, pos, unpack = self.buf, self.pos, struct.unpack_from
        size = len(buf)
        try:
            for _ in range(count):
                pos += 8 + unpack("<Q", buf, pos)[0]
        except struct.error:
            raise GGUFFormatError(TRUNCATED) from None
        if pos > size:
            raise GGUFFormatError(TRUNCATED)
        self.pos = pos

    def value(self, vtype: int, keep_array: bool):
        if vtype in SCALAR_FORMATS:
            return self.take(SCALAR_FORMATS[vtype])
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            itype, count = self.take("<I"), self.take("<Q")
            if keep_array:
                return GGUFArray(itype, count, [self.value(itype, True) for _ in range(count)])
            if itype in SCALAR_FORMATS:
                self.pos += count * struct.calcsize(SCALAR_FORMATS[itype])
            elif itype == STRING:
                self.skip_strings(count)
            else:  # arrays of arrays: walk them
                for _ in range(count):
                    self.value(itype, False)
            if self.pos > len(self.buf):
                raise GGUFFormatError(TRUNCATED)
            return GGUFArray(itype, count)
        raise GGUFFormatError(f"unknown GGUF metadata type {vtype}")


def read_gguf_header(path: str | Path, arrays: tuple[str, ...] | bool = (),
                     tensors: bool = True) -> GGUFHeader:
    """The metadata of the GGUF at `path` (scalars and strings as Python values, arrays as
    `GGUFArray`: values decoded only for the keys in `arrays`, or all with `arrays=True`) and,
    with `tensors`, its tensor table. Raises GGUFFormatError for a file that is not GGUF v2/v3
    or ends inside its header, OSError when it cannot be read."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise GGUFFormatError(f"{path} is not a GGUF file (it does not start with 'GGUF'); "
                                  "give a .gguf model")
        try:
            f.seek(0, 2)
            if f.tell() < 24:
                raise GGUFFormatError(TRUNCATED)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _parse(memoryview(mm), arrays, tensors)
        except GGUFFormatError as exc:
            raise GGUFFormatError(f"{path}: {exc}") from None


def _parse(buf: memoryview, arrays, want_tensors: bool) -> GGUFHeader:
    c = _Cursor(buf)
    c.pos = 4
    try:
        version = c.take("<I")
        if version not in (2, 3):
            raise GGUFFormatError(f"GGUF version {version} is not read here (2 and 3 are); "
                                  "convert it with a current llama.cpp")
        n_tensors, n_kv = c.take("<Q"), c.take("<Q")
        fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = c.string()
            fields[key] = c.value(c.take("<I"), arrays is True or key in arrays)
        table: list[GGUFTensor] = []
        if want_tensors:
            for _ in range(n_tensors):
                name = c.string()
                dims = tuple(c.take("<Q") for _ in range(c.take("<I")))
                table.append(GGUFTensor(name, dims, c.take("<I"), c.take("<Q")))
            align = fields.get("general.alignment", DEFAULT_ALIGNMENT)
            if not isinstance(align, int) or align <= 0:
                raise GGUFFormatError(f"general.alignment {align!r} is not a positive integer")
            return GGUFHeader(version, fields, table, -(-c.pos // align) * align)
        return GGUFHeader(version, fields, table)
    finally:
        c.buf = None
        buf.release()


def gguf_metadata_value(path: str | Path, key: str):
    """The value of metadata `key` in a GGUF file (None when the file has no such key, is not
    a GGUF file or cannot be read); an array comes back as `GGUFArray` with its values."""
    try:
        return read_gguf_header(path, arrays=(key,), tensors=False).get(key)
    except (GGUFFormatError, OSError):
        return None
