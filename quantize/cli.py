"""`rmjudge-export` (also `python -m quantize`): thin click commands over the export steps.

    rmjudge-export unpack MODEL.gguf OUT_DIR            # a GGUF as a Hugging Face folder
    rmjudge-export merge --base B --adapter A -o DIR    # LoRA merged into a bf16 base
    rmjudge-export convert DIR -o model-f16.gguf        # Hugging Face -> GGUF
    rmjudge-export quantize model-f16.gguf -o model-Q4_K_M.gguf [--type Q4_K_M]
    rmjudge-export lora ADAPTER --base B -o adapter.gguf
    rmjudge-export verify DIR --gguf F [--gguf F2] [--base-gguf B --lora L]
"""

from __future__ import annotations

import sys
from typing import Callable, TypeVar

import click

from rmjudge import __version__
from rmjudge.cli.common import ExtrasGroup

from quantize.config import (DEFAULT_QUANT, LORA_OUT_TYPES, MERGE_DTYPES, OUT_TYPES,
                             QUANT_TYPES, ConvertConfig, ExportError, LoraExportConfig,
                             MergeConfig, QuantizeConfig, UnpackConfig, VerifyConfig)


C = TypeVar("C")
R = TypeVar("R")


def _run(step: Callable[[C], R], make_config: Callable[[], C]) -> R:
    """Build the step's config and run it (an ExportError is a UserError: the group prints it
    as one `Error:` line with exit code 1, as every rmjudge command does)."""
    return step(make_config())


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@click.group(cls=ExtrasGroup)
@click.version_option(__version__, prog_name="rmjudge-export")
def main() -> None:
    """Export a trained judge for `rmjudge score`: merge, convert to GGUF, quantize, verify."""


@main.command()
@click.argument("gguf_file", metavar="MODEL.gguf")
@click.argument("out_dir")
@click.option("--dtype", type=click.Choice(MERGE_DTYPES), default="float32", show_default=True)
@click.option("--overwrite", is_flag=True, help="Write into a folder that already holds "
              "files (files of the same name are replaced); an input is never replaced.")
def unpack(gguf_file: str, out_dir: str, dtype: str, overwrite: bool) -> None:
    """Write a GGUF model (e.g. the embedded judge) as a Hugging Face folder."""
    from quantize.hfio import unpack_gguf

    out = _run(unpack_gguf, lambda: UnpackConfig(gguf_file, out_dir, dtype, overwrite))
    click.echo(f"wrote {out}")


@main.command()
@click.option("--base", required=True, help="Base model: Hugging Face folder or GGUF file.")
@click.option("--adapter", required=True, help="PEFT LoRA adapter folder.")
@click.option("-o", "--out", "out_dir", required=True, help="Output folder.")
@click.option("--dtype", type=click.Choice(MERGE_DTYPES), default="bfloat16", show_default=True,
              help="Precision the base is reloaded and saved in (never 4-bit).")
@click.option("--overwrite", is_flag=True, help="Write into a folder that already holds "
              "files (files of the same name are replaced); an input is never replaced.")
def merge(base: str, adapter: str, out_dir: str, dtype: str, overwrite: bool) -> None:
    """Merge a (Q)LoRA adapter into its base; save a Hugging Face folder."""
    from quantize.merge import merge as run

    r = _run(run, lambda: MergeConfig(base, adapter, out_dir, dtype, overwrite))
    click.echo(f"merged {r.modules} LoRA modules into {r.parameters:,} parameters ({r.dtype}) "
               f"-> {r.out_dir}")


@main.command()
@click.argument("model_dir")
@click.option("-o", "--out", required=True, help="Output GGUF file.")
@click.option("--outtype", type=click.Choice(OUT_TYPES), default="f16", show_default=True)
@click.option("--pre-tokenizer", default=None,
              help="llama.cpp pre-tokenizer name (detected from tokenizer.json if omitted).")
@click.option("--name", default=None, help="general.name in the GGUF (default: folder name).")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file; an input "
              "is never replaced.")
def convert(model_dir: str, out: str, outtype: str, pre_tokenizer: str | None,
            name: str | None, overwrite: bool) -> None:
    """Convert a Hugging Face llama/qwen2/qwen3 folder to GGUF."""
    from quantize.convert import convert as run

    r = _run(run, lambda: ConvertConfig(model_dir, out, outtype, pre_tokenizer, name,
                                                overwrite))
    types = ", ".join(f"{k} {v}" for k, v in sorted(r.type_counts.items()))
    click.echo(f"{r.path}: {r.architecture}, {r.tensors} tensors ({types}), {_mib(r.bytes)}, "
               f"pre-tokenizer {r.pre_tokenizer}, chat template "
               f"{'yes' if r.chat_template else 'no'}"
               + (f", {r.fallbacks} matrices kept in f16" if r.fallbacks else ""))


@main.command()
@click.argument("src", metavar="MODEL-f16.gguf")
@click.option("-o", "--out", required=True, help="Output GGUF file.")
@click.option("--type", "qtype", type=click.Choice(QUANT_TYPES, case_sensitive=False),
              default=DEFAULT_QUANT, show_default=True)
@click.option("--threads", type=int, default=0, help="Quantizer threads (0: all cores).")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file; an input "
              "is never replaced.")
def quantize(src: str, out: str, qtype: str, threads: int, overwrite: bool) -> None:
    """Quantize an f32/f16/bf16 GGUF with llama.cpp; report size, bpw and fallbacks."""
    from quantize.quant import quantize as run

    r = _run(run, lambda: QuantizeConfig(src, out, qtype, threads, overwrite))
    types = ", ".join(f"{k} {v}" for k, v in sorted(r.out.type_counts.items()))
    own = "" if r.llama_fallbacks is None else f" (llama.cpp counts {r.llama_fallbacks})"
    click.echo(f"{r.qtype}: {_mib(r.src.file_bytes)} ({r.src.bpw:.2f} bpw) -> "
               f"{_mib(r.out.file_bytes)} ({r.out.bpw:.2f} bpw) in {r.seconds:.1f}s")
    click.echo(f"  tensor types: {types}")
    click.echo(f"  fallbacks: {r.fallbacks} of {r.matrices} matrices{own}")


@main.command()
@click.argument("adapter")
@click.option("--base", default=None,
              help="Base model (Hugging Face folder or GGUF); default: the adapter's own.")
@click.option("-o", "--out", required=True, help="Output GGUF LoRA file.")
@click.option("--outtype", type=click.Choice(LORA_OUT_TYPES), default="f32",
              show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace an existing output file; an input "
              "is never replaced.")
def lora(adapter: str, base: str | None, out: str, outtype: str, overwrite: bool) -> None:
    """Export a PEFT LoRA adapter as a llama.cpp GGUF LoRA (rmjudge score --lora)."""
    from quantize.lora import export_lora

    r = _run(export_lora, lambda: LoraExportConfig(adapter, out, base, outtype, overwrite))
    click.echo(f"{r.path}: {r.architecture} LoRA, {r.modules} matrices, rank {r.rank}, "
               f"alpha {r.alpha:g}, {_mib(r.bytes)}, prompt format "
               f"{r.prompt_format if r.prompt_format is not None else 'not recorded'}")


@main.command()
@click.argument("hf_dir")
@click.option("--gguf", "ggufs", multiple=True, help="GGUF to compare (repeatable).")
@click.option("--base-gguf", default=None, help="Base GGUF for the run-time LoRA check.")
@click.option("--lora", default=None, help="GGUF LoRA applied to --base-gguf.")
@click.option("--lora-scale", type=float, default=1.0, show_default=True)
@click.option("--prompt", "prompts", multiple=True,
              help="User message to evaluate (repeatable; default: a fixed built-in set).")
@click.option("--threads", type=int, default=0, help="llama.cpp threads (0: all cores).")
def verify(hf_dir: str, ggufs: tuple[str, ...], base_gguf: str | None, lora: str | None,
           lora_scale: float, prompts: tuple[str, ...], threads: int) -> None:
    """Compare next-token logits of HF_DIR with llama.cpp's; exit 1 when parity fails."""
    from quantize.verify import format_table
    from quantize.verify import verify as run

    rows = _run(run, lambda: VerifyConfig(hf_dir, ggufs, base_gguf, lora, lora_scale, prompts,
                                          threads))
    click.echo(format_table(rows))
    bad = [r for r in rows if not r.ok]
    if bad:
        click.echo(f"parity FAILED for {len(bad)} of {len(rows)} file(s)", err=True)
        sys.exit(1)
    click.echo(f"parity ok for {len(rows)} file(s)")


if __name__ == "__main__":  # pragma: no cover
    main()
