"""A smaller judge for the tests of engine mechanics: the embedded model cut to its first few
transformer blocks.

Its vocabulary, tokenizer, chat template, embeddings and every tensor shape are the embedded
model's, so llama.cpp runs the same kernels on the same shapes and the engine the same code
(prompt rendering, token ids, scheduling, prefix sharing, KV copies, forced verdicts, servers);
only the depth differs. The tests that check how rmjudge runs a model (byte-identical samples
whatever the batching, kill and resume, servers' contracts) use it; the tests of what the demo
judge writes (the README's command, the demo adapter, training) keep the embedded model.

The GGUF is rewritten byte for byte (header, metadata with `llama.block_count` changed, the kept
tensors' infos and data), so the metadata is walked here for its byte positions: rmjudge's
reader (rmjudge/models/gguf_header.py) gives the values, not where they lie.
"""

from __future__ import annotations

import os
import re
import struct

ALIGN = 32  # GGUF's default alignment (the embedded file sets none)
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes
_STRING, _ARRAY = 8, 9
_BLOCK = re.compile(r"blk\.(\d+)\.")


def _skip_value(buf: bytes, pos: int, vtype: int) -> int:
    if vtype in _SCALAR:
        return pos + _SCALAR[vtype]
    if vtype == _STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == _ARRAY:
        itype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if itype in _SCALAR:
            return pos + count * _SCALAR[itype]
        for _ in range(count):
            pos = _skip_value(buf, pos, itype)
        return pos
    raise ValueError(f"unknown GGUF value type {vtype}")


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", buf, pos)
    return buf[pos + 8:pos + 8 + n].decode(), pos + 8 + n


def cut_model(src: str, dst: str, blocks: tuple[int, ...]) -> str:
    """Write `src` (a llama-architecture GGUF) to `dst` with only the transformer blocks
    `blocks` (indices into the source, in order; renumbered from 0)."""
    new_index = {b: i for i, b in enumerate(blocks)}
    with open(src, "rb") as f:
        buf = f.read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    assert magic == b"GGUF" and version == 3, (magic, version)
    pos = 24
    kv = bytearray()
    for _ in range(n_kv):
        start = pos
        key, pos = _string(buf, pos)
        (vtype,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        end = _skip_value(buf, pos, vtype)
        entry = bytearray(buf[start:end])
        if key.endswith(".block_count"):
            assert vtype == 4 and struct.unpack_from("<I", buf, pos)[0] > max(blocks)
            struct.pack_into("<I", entry, pos - start, len(blocks))
        elif key == "general.alignment":
            raise ValueError("a GGUF with its own alignment is not handled")
        kv += entry
        pos = end
    tensors = []
    for _ in range(n_tensors):
        name, pos = _string(buf, pos)
        (n_dims,) = struct.unpack_from("<I", buf, pos)
        dims = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
        ggml_type, offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        tensors.append((name, dims, ggml_type, offset))
    data_start = -(-pos // ALIGN) * ALIGN
    offsets = sorted(t[3] for t in tensors) + [len(buf) - data_start]
    size = {o: offsets[i + 1] - o for i, o in enumerate(offsets[:-1])}  # padded extents
    kept = []
    for name, dims, ggml_type, offset in tensors:
        m = _BLOCK.match(name)
        if m is None:
            kept.append((name, dims, ggml_type, offset))
        elif int(m.group(1)) in new_index:
            name = f"blk.{new_index[int(m.group(1))]}.{name[m.end():]}"
            kept.append((name, dims, ggml_type, offset))
    infos, data, at = bytearray(), bytearray(), 0
    for name, dims, ggml_type, offset in kept:
        raw = name.encode()
        infos += struct.pack("<Q", len(raw)) + raw + struct.pack("<I", len(dims))
        infos += struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", ggml_type, at)
        chunk = buf[data_start + offset:data_start + offset + size[offset]]
        data += chunk + bytes(-len(chunk) % ALIGN)
        at += len(chunk) + (-len(chunk) % ALIGN)
    head = struct.pack("<4sIQQ", b"GGUF", 3, len(kept), n_kv) + kv + infos
    head += bytes(-len(head) % ALIGN)
    tmp = f"{dst}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(head)
        f.write(data)
    os.replace(tmp, dst)
    return dst
