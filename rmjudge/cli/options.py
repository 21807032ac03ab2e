"""Reusable Click option bundles (model/engine options, judging options)."""

from __future__ import annotations

from typing import Callable

import click


def combine_options(options: list[Callable]) -> Callable:
    def deco(f: Callable) -> Callable:
        for opt in reversed(options):
            f = opt(f)
        return f

    return deco


engine_options = combine_options([
    click.option("--model", envvar="RMJUDGE_MODEL", default=None, metavar="PATH.gguf",
                 help="GGUF judge model. Default: $RMJUDGE_MODEL, else the embedded SmolLM2-135M."),
    click.option("--lora", default=None, metavar="ADAPTER.gguf",
                 help="A GGUF LoRA adapter applied to the model at run time."),
    click.option("--lora-scale", default=1.0, show_default=True, type=float),
    click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
                 show_default=True, help="auto: CUDA when llama.cpp was built with it."),
    click.option("--n-gpu-layers", type=int, default=None,
                 help="Layers to offload (default: all on CUDA, none on CPU)."),
    click.option("--threads", type=int, default=None, help="CPU threads (default: the usable CPUs less one)."),
    click.option("--parallel", type=int, default=None,
                 help="Sequences decoded together (default: 16 on CPU, 64 on CUDA)."),
    click.option("--batch-size", type=int, default=512, show_default=True,
                 help="Max tokens per llama.cpp decode call."),
    click.option("--ctx-size", "n_ctx", type=int, default=None,
                 help="Per-sequence context limit (default: the model's training context)."),
    click.option("--engine", "engine_kind", type=click.Choice(["batched", "naive"]),
                 default="batched", show_default=True,
                 help="naive: one sequence at a time through llama-cpp-python's Llama (slow; "
                 "a baseline)."),
])


def engine_settings(kw: dict):
    from rmjudge.settings import EngineSettings

    return EngineSettings(
        model=kw.pop("model"), lora=kw.pop("lora"), lora_scale=kw.pop("lora_scale"),
        device=kw.pop("device"), n_gpu_layers=kw.pop("n_gpu_layers"), threads=kw.pop("threads"),
        parallel=kw.pop("parallel"), batch_size=kw.pop("batch_size"), n_ctx=kw.pop("n_ctx"),
    )


def settings_options(cls) -> Callable:
    """One click option per field of a settings dataclass, from the field's metadata (its
    help, and `flag`, `short`, `metavar`, `choices`, `cli`): the dataclass is the one place a
    setting, its default and its help are declared."""
    from dataclasses import MISSING, fields

    opts = []
    for f in fields(cls):
        meta = f.metadata
        if meta.get("cli", True) is False:
            continue
        if "flag" in meta:  # a switch that turns a default-True field off
            opts.append(click.option(meta["flag"], f"no_{f.name}", is_flag=True,
                                     help=meta["help"]))
            continue
        names = [f"--{f.name.replace('_', '-')}"] + ([meta["short"]] if "short" in meta else [])
        kw: dict = {"default": None if f.default is MISSING else f.default, "help": meta["help"],
                    "show_default": f.default is not None}
        if "choices" in meta:
            kw["type"] = click.Choice(list(meta["choices"]))
        elif f.default is not None and f.default is not MISSING:
            kw["type"] = type(f.default)
        if "metavar" in meta:
            kw["metavar"] = meta["metavar"]
        opts.append(click.option(*names, f.name, **kw))
    return combine_options(opts)


def settings_from(cls, kw: dict):
    """The settings dataclass from the options `settings_options(cls)` added (popped from kw)."""
    from dataclasses import fields

    values = {}
    for f in fields(cls):
        if f.metadata.get("cli", True) is False:
            continue
        if "flag" in f.metadata:
            values[f.name] = not kw.pop(f"no_{f.name}")
        else:
            values[f.name] = kw.pop(f.name)
    return cls(**values)


def _judge_options():
    from rmjudge.settings import JudgeSettings

    return settings_options(JudgeSettings)


judge_options = _judge_options()


def judge_settings(kw: dict):
    from rmjudge.settings import JudgeSettings

    return settings_from(JudgeSettings, kw)
