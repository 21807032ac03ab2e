"""The arithmetic of training and of the greedy generations that check it (`--precision`).

- `auto` (the default): bfloat16 where the device computes it natively (a CUDA GPU that
  supports it; a CPU with AVX512-BF16 or AMX), float32 elsewhere.
- `bf16`: bfloat16 on any device (on a CPU without native support torch emulates it, slowly).
- `fp32`: float32 throughout.

bfloat16 here is autocast (torch's mixed precision): the weights, the LoRA adapter and the
optimizer state stay in float32; matrix products run in bfloat16. On a CPU it is transformers'
Trainer with `bf16=True` (accelerate's CPU autocast) and `torch.autocast("cpu")` around the
greedy generations. Measured on rmjudge 0.13.0 (2-core AMD EPYC with AVX512-BF16, one
thread): a warm-start training step ran 1.65x as fast in bfloat16, a greedy generation 1.06x,
and the SFT warm start of tests/test_training_sft.py took 131 s in float32 and 99 s in
bfloat16, its check generations parsing as often (`python benchmarks/bench_sft_loss.py`,
docs/training.md).
Rollouts sampled through transformers (`--analyses base` without an engine) stay float32: they
are cached by their settings, and another precision would sample other texts.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

PRECISIONS = ("auto", "bf16", "fp32")

PRECISION_HELP = ("Arithmetic of training and its greedy generations: auto (bfloat16 where the "
                  "device computes it natively: a CUDA GPU that supports it, a CPU with "
                  "AVX512-BF16 or AMX; else float32), bf16 or fp32.")


def check_precision(precision: str, error: type[Exception]) -> None:
    """`error` naming the option when `precision` is not one of PRECISIONS."""
    if precision not in PRECISIONS:
        raise error(f"--precision {precision}: expected one of {', '.join(PRECISIONS)}")


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 products in hardware (AVX512-BF16 or AMX), as torch
    reports it; False where torch cannot tell."""
    import torch

    cpu = getattr(torch, "cpu", None)
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(cpu, probe, None)
        try:
            if check is not None and check():
                return True
        except Exception:  # a probe torch no longer offers in this form
            continue
    return False


def use_bf16(precision: str, error: type[Exception] = ValueError) -> bool:
    """Whether `precision` (one of PRECISIONS) means bfloat16 on this machine's device; `error`
    when `bf16` is asked of a CUDA GPU that cannot compute it (torch would fail mid-run)."""
    check_precision(precision, error)
    import torch

    cuda = torch.cuda.is_available()
    if precision == "bf16" and cuda and not torch.cuda.is_bf16_supported():
        raise error(f"--precision bf16: {torch.cuda.get_device_name()} does not compute "
                    "bfloat16; use --precision auto or fp32")
    if precision != "auto":
        return precision == "bf16"
    if cuda:
        return bool(torch.cuda.is_bf16_supported())
    return cpu_has_native_bf16()


def precision_name(bf16: bool) -> str:
    """What a run records of its arithmetic."""
    return "bf16" if bf16 else "fp32"


@contextlib.contextmanager
def autocast(model: Any, bf16: bool) -> Iterator[None]:
    """bfloat16 autocast on `model`'s device while the block runs (nothing when not `bf16`)."""
    if not bf16:
        yield
        return
    import torch

    device = next(model.parameters()).device.type
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        yield
