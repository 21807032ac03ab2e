"""A benchmark's published rows, from a local copy (JSON array, JSON Lines, Parquet, a folder in
the published layout) or the Hub (`hf://datasets/...`, offline from the cache with
HF_HUB_OFFLINE=1: `rmjudge.io.huggingface`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator

import orjson

from rmjudge.bench.base import BenchError, Benchmark
from rmjudge.io.readers import InputError, read_rows


@dataclass(frozen=True)
class Published:
    """One published row (`obj`), or the reason it cannot be read (`problem`, `raw`)."""

    file: str
    row_number: int  # 1-based within its file
    obj: dict[str, Any] | None
    fields: dict[str, Any]  # inherited from the file's place in the layout (LLMBar's subset)
    problem: str | None = None
    raw: str | None = None


def read_published(bench: Benchmark, source: str) -> Iterator[Published]:
    """Every published row of `bench` under `source`, in file order."""
    if "://" not in source and not os.path.exists(source):
        raise BenchError(f"{bench.title} data not found at {source}: give a local copy of "
                         f"its published files ({bench.layout}) or a Hub id "
                         "(hf://datasets/ORG/NAME[:CONFIG][@SPLIT])")
    for path, fields in bench.files(source):
        yield from read_file(path, fields)


LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def read_file(path: str, fields: dict[str, Any]) -> Iterator[Published]:
    """The published rows of one file (or Hub id); BenchError when the file cannot be read at
    all (a Git LFS pointer, not a JSON array, UTF-16 or binary text), so that `bench --check`
    lists it as not read and goes on with the other files."""
    if "://" not in path and _head(path).startswith(LFS_POINTER):
        raise BenchError(f"{path} is a Git LFS pointer, not the data: fetch the file itself "
                         "(`git lfs pull` in the clone)")
    if "://" not in path and path.lower().endswith(".json") and _is_json_array(path):
        try:
            with open(path, "rb") as f:
                rows = orjson.loads(f.read())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise BenchError(f"cannot read {path} as a JSON array: {exc}") from None
        for n, obj in enumerate(rows, 1):
            if isinstance(obj, dict):
                yield Published(path, n, obj, fields)
            else:
                yield Published(path, n, None, fields, "element is not a JSON object",
                                orjson.dumps(obj).decode()[:2000])
        return
    rows = read_rows(path)
    while True:
        try:
            r = next(rows)
        except StopIteration:
            return
        except InputError as exc:  # the file as a whole (UTF-16, binary, not JSON Lines)
            raise BenchError(str(exc)) from None
        if r.obj is None:
            yield Published(path, r.row_number, None, fields, r.error or "unreadable row", r.raw)
        else:
            yield Published(path, r.row_number, r.obj, fields)


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(4096)
    except IsADirectoryError:
        return b""
    except OSError as exc:
        raise BenchError(f"cannot read {path}: {exc.strerror or exc}") from None


def _is_json_array(path: str) -> bool:
    return _head(path).removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"[")
