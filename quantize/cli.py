"""`rmjudge-export` (also `python -m rmjudge.quantize`): thin click commands over the export steps.

    rmjudge-export unpack MODEL.gguf OUT_DIR            # a GGUF as a Hugging Face folder
    rmjudge-export merge --base B --adapter A -o DIR    # LoRA merged into a bf16 base
    rmjudge-export convert DIR -o model-f16.gguf        # Hugging Face -> GGUF
    rmjudge-export quantize model-f16.gguf -o model-Q4_K_M.gguf [--type Q4_K_M]
    rmjudge-export lora ADAPTER --base B -o adapter.gguf
    rmjudge-export verify DIR --gguf F [--gguf F2] [--base-gguf B --lora L]

Every option is generated from the step's config dataclass (quantize/config.py: option name,
default, help); a command parses it into that config (checked on construction: an
ExportError is a UserError, which the group prints as one `Error:` line with exit code 1),
makes one library call and prints the result.
"""

from __future__ import annotations

import sys

import click

from rmjudge import __version__
from rmjudge.cli.common import ExtrasGroup
from rmjudge.cli.options import settings_from, settings_options

from rmjudge.quantize.config import (ConvertConfig, LoraExportConfig, MergeConfig, QuantizeConfig,
                             UnpackConfig, VerifyConfig)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@click.group(cls=ExtrasGroup)
@click.version_option(__version__, prog_name="rmjudge-export")
def main() -> None:
    """Export a trained judge for `rmjudge score`: merge, convert to GGUF, quantize, verify."""


@main.command()
@settings_options(UnpackConfig)
def unpack(**kw) -> None:
    """Write a GGUF model (e.g. the embedded judge) as a Hugging Face folder."""
    from rmjudge.quantize.hfio import unpack_gguf

    out = unpack_gguf(settings_from(UnpackConfig, kw))
    click.echo(f"wrote {out}")


@main.command()
@settings_options(MergeConfig)
def merge(**kw) -> None:
    """Merge a (Q)LoRA adapter into its base; save a Hugging Face folder."""
    from rmjudge.quantize.merge import merge as run

    r = run(settings_from(MergeConfig, kw))
    click.echo(f"merged {r.modules} LoRA modules into {r.parameters:,} parameters ({r.dtype}) "
               f"-> {r.out_dir}")


@main.command()
@settings_options(ConvertConfig)
def convert(**kw) -> None:
    """Convert a Hugging Face llama/qwen2/qwen3 folder to GGUF."""
    from rmjudge.quantize.convert import convert as run

    r = run(settings_from(ConvertConfig, kw))
    types = ", ".join(f"{k} {v}" for k, v in sorted(r.type_counts.items()))
    click.echo(f"{r.path}: {r.architecture}, {r.tensors} tensors ({types}), {_mib(r.bytes)}, "
               f"pre-tokenizer {r.pre_tokenizer}, chat template "
               f"{'yes' if r.chat_template else 'no'}"
               + (f", {r.fallbacks} matrices kept in f16" if r.fallbacks else ""))


@main.command()
@settings_options(QuantizeConfig)
def quantize(**kw) -> None:
    """Quantize an f32/f16/bf16 GGUF with llama.cpp; report size, bpw and fallbacks."""
    from rmjudge.quantize.quant import quantize as run

    r = run(settings_from(QuantizeConfig, kw))
    types = ", ".join(f"{k} {v}" for k, v in sorted(r.out.type_counts.items()))
    own = "" if r.llama_fallbacks is None else f" (llama.cpp counts {r.llama_fallbacks})"
    click.echo(f"{r.qtype}: {_mib(r.src.file_bytes)} ({r.src.bpw:.2f} bpw) -> "
               f"{_mib(r.out.file_bytes)} ({r.out.bpw:.2f} bpw) in {r.seconds:.1f}s")
    click.echo(f"  tensor types: {types}")
    click.echo(f"  fallbacks: {r.fallbacks} of {r.matrices} matrices{own}")


@main.command()
@settings_options(LoraExportConfig, only=("adapter", "base"))  # --base listed before -o, as ever
@settings_options(LoraExportConfig, only=("out", "out_type", "overwrite"))
def lora(**kw) -> None:
    """Export a PEFT LoRA adapter as a llama.cpp GGUF LoRA (rmjudge score --lora)."""
    from rmjudge.quantize.lora import export_lora

    r = export_lora(settings_from(LoraExportConfig, kw))
    click.echo(f"{r.path}: {r.architecture} LoRA, {r.modules} matrices, rank {r.rank}, "
               f"alpha {r.alpha:g}, {_mib(r.bytes)}, prompt format "
               f"{r.prompt_format if r.prompt_format is not None else 'not recorded'}")


@main.command()
@settings_options(VerifyConfig)
def verify(**kw) -> None:
    """Compare next-token logits of HF_DIR with llama.cpp's; exit 1 when parity fails."""
    from rmjudge.quantize.verify import format_table
    from rmjudge.quantize.verify import verify as run

    rows = run(settings_from(VerifyConfig, kw))
    click.echo(format_table(rows))
    bad = [r for r in rows if not r.ok]
    if bad:
        click.echo(f"parity FAILED for {len(bad)} of {len(rows)} file(s)", err=True)
        sys.exit(1)
    click.echo(f"parity ok for {len(rows)} file(s)")


if __name__ == "__main__":  # pragma: no cover
    main()
