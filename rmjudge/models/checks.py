"""Model files checked and identified: a GGUF file (`check_gguf`), a Hugging Face model folder
(`check_hf_folder`), and a file's sha256 (`file_sha256`), cached so a large model hashes once."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rmjudge.core.errors import ModelError
from rmjudge.files import cache

SHA_CACHE = "sha256.json"


def check_gguf(path: str, what: str = "model") -> str:
    """Raise ModelError unless `path` is a readable GGUF file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelError(f"{what} file not found: {path}; check the path (a .gguf file)")
    if p.is_dir():
        raise ModelError(f"{what} path is a directory, not a GGUF file: {path}; give the .gguf "
                         "file inside it")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(f"{what} file is not a GGUF file (bad magic {magic!r}): {path}; give "
                         "a .gguf file (rmjudge-export makes one from a Hugging Face model)")
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
