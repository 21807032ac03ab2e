"""Reusable Click option bundles (model/engine options, judging options)."""

from __future__ import annotations

from typing import Callable

import click


def _apply(options: list[Callable]) -> Callable:
    def deco(f: Callable) -> Callable:
        for opt in reversed(options):
            f = opt(f)
        return f

    return deco


engine_options = _apply([
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


judge_options = _apply([
    click.option("--samples", "-n", default=8, show_default=True,
                 help="Rollouts per order (N)."),
    click.option("--max-tokens", default=256, show_default=True,
                 help="Token limit of every generation."),
    click.option("--temperature", default=1.0, show_default=True, help="Rollout temperature."),
    click.option("--top-p", default=1.0, show_default=True),
    click.option("--orders", type=click.Choice(["both", "ab"]), default="both", show_default=True,
                 help="Judge (A,B) and (B,A), or (A,B) only."),
    click.option("--on-inconsistent", type=click.Choice(["tie", "drop", "confident"]),
                 default="tie", show_default=True,
                 help="Verdict when the two orders disagree."),
    click.option("--no-reflect", is_flag=True, help="Plain majority vote (no self-reflection)."),
    click.option("--no-shortcut", is_flag=True,
                 help="Run self-reflection even when all rollouts agree."),
    click.option("--no-forced", is_flag=True,
                 help="Do not force a verdict from the logits when a generation does not parse."),
    click.option("--adaptive", default=0, metavar="K",
                 help="Start with K rollouts per order; go on to N only when they disagree."),
    click.option("--seed", default=0, show_default=True, help="Run seed (per-pair seeds derive from it)."),
    click.option("--prompt-suffix", default=None,
                 help="Text appended to every prompt (default: per model family, e.g. Qwen3 /no_think)."),
])


def judge_settings(kw: dict):
    from rmjudge.settings import JudgeSettings

    return JudgeSettings(
        samples=kw.pop("samples"), max_tokens=kw.pop("max_tokens"),
        temperature=kw.pop("temperature"), top_p=kw.pop("top_p"), orders=kw.pop("orders"),
        on_inconsistent=kw.pop("on_inconsistent"), reflect=not kw.pop("no_reflect"),
        shortcut=not kw.pop("no_shortcut"), forced=not kw.pop("no_forced"),
        adaptive=kw.pop("adaptive"), seed=kw.pop("seed"), prompt_suffix=kw.pop("prompt_suffix"),
    )
