"""Frozen, self-validating settings for judging (`JudgeSettings`) and for engines (`EngineSettings`)."""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Literal

from rmjudge.core.errors import UserError

Orders = Literal["both", "ab"]
Inconsistent = Literal["tie", "drop", "confident"]
Ablation = Literal["none", "random-anchor", "random-group"]
ABLATIONS = ("none", "random-anchor", "random-group")


# Seeds the run store records (as JSON, signed or unsigned 64-bit). `rmjudge.core.seeds.derive_seed`
# hashes any integer, so this is the whole range a run can use and record.
SEED_MIN = -(2**63)
SEED_MAX = 2**64 - 1


class SettingsError(UserError, ValueError):
    """A setting is out of range; the message names the option and the allowed values."""


def setting(default=MISSING, help: str | None = None, **cli):
    """A settings field with its command-line option, the one place a setting, its default and
    its help are declared; `rmjudge.cli.options.settings_options` builds the option. `cli` keys:
    `option` ("--ctx-size"; default from the field's name), `short` ("-n"), `dest` (the
    parameter's name, default the field's), `metavar`, `envvar`, `type` (int or float for an
    optional number), `choices` (a tuple, or a dict from option value to field value),
    `range` ((min, max) of a whole number, None for open), `multiple` (repeatable), `split`
    (a separator: "a,b" becomes a tuple), `parse` (a function of the option's value),
    `cli_default` (the option's default where the field has none or another), `show_default`,
    `flag` (a switch: "--no-reflect" sets a default-True field False, "--quiet" a default-False
    one True), `switch` ("--forced/--no-forced" for a field whose default None is resolved
    later, by the run spec), `argument` (a positional argument; `nargs`, `required`), `hidden`
    and `cli=False` for a field without an option."""
    meta = {"help": help, **cli} if help is not None else dict(cli)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class JudgeSettings:
    """How pairs are judged. Every field is a `score`/`eval` option (see `setting`)."""

    samples: int = setting(8, "Rollouts per order (N).", short="-n")
    max_tokens: int | None = setting(None, "Token limit of every generation (default: resolved by "
                                  "the run spec: 1024, the paper's; 256 for the embedded demo "
                                  "judge).", type=int)
    temperature: float = setting(1.0, "Rollout temperature.")
    top_p: float = setting(1.0, "Nucleus sampling threshold of the rollouts.")
    orders: Orders = setting("both", "Judge (A,B) and (B,A), or (A,B) only.",
                             choices=("both", "ab"))
    on_inconsistent: Inconsistent = setting("tie", "Verdict when the two orders disagree.",
                                         choices=("tie", "drop", "confident"))
    reflect: bool | None = setting(
        None, "Self-reflection: compare the other rollouts' analyses with the anchor's "
        "(default: resolved by the run spec: on for a judge format with a critique-comparison "
        "prompt, as ReflectRM's; off for the others, which vote over their rollouts; --reflect "
        "gives those ReflectRM's comparison prompt, an ablation).", switch="--reflect/--no-reflect")
    shortcut: bool = setting(True, "Run self-reflection even when all rollouts agree.",
                          flag="--no-shortcut")
    forced: bool | None = setting(
        None, "Read a verdict from the logits when no rollout of an order parses (default: "
        "resolved by the run spec: off, on only for the embedded demo judge).",
        switch="--forced/--no-forced")
    adaptive: int = setting(0, "Start with K rollouts per order; go on to N only when they "
                         "disagree (0: off).", metavar="K")
    seed: int = setting(0, "Run seed (per-pair seeds derive from it).")
    prompt_suffix: str | None = setting(None, "Text appended to every prompt (default: per model "
                                     "family, e.g. Qwen3 /no_think).")
    ablation: Ablation = setting("none", "A paper ablation: random-anchor (a parsed rollout drawn "
                              "at random instead of the most confident), random-group (a random "
                              "winner group of the size self-reflection chose).",
                              choices=ABLATIONS)
    criteria: str | None = setting(None, "Judging criteria put into both prompts: a built-in "
                                "(helpful, harmless, honest, instruction-following), @FILE or "
                                "the text (default: none; harmless with --label safer).",
                                metavar="NAME|@FILE|TEXT")
    prompt_template: str | None = setting(None, "A Jinja2 file worded as both prompts (task: "
                                       "pref|refl); checked before the model loads. See "
                                       "docs/scoring.md.", metavar="FILE")
    judge_format: str = setting("reflectrm", "How the judge is prompted and its verdict read: "
                                "reflectrm, a built-in judge's own format (mt-bench, prometheus2, "
                                "skywork-critic, pandalm, judgelm, selene, auto-j: `rmjudge "
                                "formats`) or a format file (.toml). See docs/judges.md.",
                                metavar="NAME|FILE")
    confidence_fraction: float = setting(0.1, "Share of the lowest token log-probs averaged into a "
                                      "rollout's confidence.", cli=False)

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise SettingsError("--samples must be at least 1")
        if not 0.0 <= self.temperature <= 5.0:
            raise SettingsError("--temperature must be between 0 and 5")
        if not 0.0 < self.top_p <= 1.0:
            raise SettingsError("--top-p must be in (0, 1]")
        if self.max_tokens is not None and self.max_tokens < 8:
            raise SettingsError("--max-tokens must be at least 8")
        if self.orders not in ("both", "ab"):
            raise SettingsError("--orders must be 'both' or 'ab'")
        if self.on_inconsistent not in ("tie", "drop", "confident"):
            raise SettingsError("--on-inconsistent must be one of tie, drop, confident")
        if self.ablation not in ABLATIONS:
            raise SettingsError(f"--ablation must be one of {', '.join(ABLATIONS)}")
        if not 0.0 < self.confidence_fraction <= 1.0:
            raise SettingsError("confidence fraction must be in (0, 1]")
        if self.adaptive < 0 or (self.adaptive and self.adaptive >= self.samples):
            raise SettingsError("--adaptive K needs 1 <= K < --samples")
        if self.judge_format is None:  # the Python API's judge_format=None: the default
            object.__setattr__(self, "judge_format", "reflectrm")
        if not isinstance(self.judge_format, str) or not self.judge_format.strip():
            raise SettingsError("--judge-format must name a format (reflectrm, a built-in of "
                                "`rmjudge formats`) or a format file, not an empty value")
        if not SEED_MIN <= self.seed <= SEED_MAX:
            raise SettingsError(f"--seed must be a whole number from {SEED_MIN} to {SEED_MAX} "
                                f"(a 64-bit integer), got {self.seed}")

    @property
    def order_list(self) -> tuple[str, ...]:
        return ("ab", "ba") if self.orders == "both" else ("ab",)

    def as_dict(self) -> dict:
        d = asdict(self)
        if d["ablation"] == "none":  # recorded only when chosen: earlier stores still resume
            del d["ablation"]
        if d["judge_format"] == "reflectrm":  # likewise
            del d["judge_format"]
        for key in ("criteria", "prompt_template"):  # likewise
            if d[key] is None:
                del d[key]
        return d

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


# The in-process engines `--engine` chooses from, named once for the option, its check and
# the registry that loads each (rmjudge.engine.ENGINES, which adds "server", chosen by --server).
ENGINE_KINDS = ("batched", "naive")


@dataclass(frozen=True)
class EngineSettings:
    """How the judge model runs. Every field but `resolved` is an option of the judging
    commands."""

    model: str | None = setting(None, "GGUF judge model (a path, hf:org/repo/file.gguf or "
                             "org/repo:QUANT). Default: $RMJUDGE_MODEL, else the embedded "
                             "SmolLM2-135M.", metavar="PATH.gguf", envvar="RMJUDGE_MODEL")
    lora: str | None = setting(None, "A GGUF LoRA adapter applied to the model at run time.",
                            metavar="ADAPTER.gguf")
    lora_scale: float = setting(1.0, "Scale of the LoRA adapter.")
    demo_adapter: bool = setting(True, "Judge with the embedded model alone, without the format "
                              "adapter rmjudge ships for it (used only when neither --model "
                              "nor --lora is given).", flag="--no-demo-adapter")
    device: Literal["auto", "cpu", "cuda"] = setting(
        "auto", "auto: CUDA when llama.cpp was built with it.", choices=("auto", "cpu", "cuda"))
    n_gpu_layers: int | None = setting(
        None, "Layers to offload (default: all on CUDA, none on CPU).", type=int)
    threads: int | None = setting(None, "CPU threads (default: every usable core when the machine "
                               "is quiet, one fewer per busy core).", type=int)
    parallel: int | None = setting(None, "Sequences decoded together (default: 16 on CPU, 64 on "
                                "CUDA).", type=int)
    batch_size: int = setting(512, "Max tokens per llama.cpp decode call.")
    prefix_cache_mb: int = setting(256, "Memory for evaluated prompt prefixes kept across stages "
                                "(a pair's reflections reuse its rollout prompt); 0: off.",
                                metavar="MB")
    n_ctx: int | None = setting(None, "Per-sequence context limit (default: the model's training "
                             "context).", type=int, option="--ctx-size")
    kind: str = setting(
        "batched", "naive: one sequence at a time through llama-cpp-python's Llama (slow; a "
        "baseline).", choices=ENGINE_KINDS, option="--engine")
    # True once `rmjudge.models.resolve.resolve_judge` made `model` the local file the run
    # judges with (and `lora` the demo adapter where the run applies it): engines then take
    # them as they are. Not an option.
    resolved: bool = setting(False, cli=False)

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda"):
            raise SettingsError("--device must be auto, cpu or cuda")
        if self.parallel is not None and self.parallel < 1:
            raise SettingsError("--parallel must be at least 1")
        if self.batch_size < 8:
            raise SettingsError("--batch-size must be at least 8")
        if self.prefix_cache_mb < 0:
            raise SettingsError("--prefix-cache-mb must be 0 or more")
        if self.threads is not None and self.threads < 1:
            raise SettingsError("--threads must be at least 1")
        if self.kind not in ENGINE_KINDS:
            raise SettingsError(f"--engine must be {' or '.join(ENGINE_KINDS)}")
        if self.n_ctx is not None and self.n_ctx < 0:  # 0: the training context, as llama.cpp
            raise SettingsError("--ctx-size must be 0 (the model's training context) or more")
        if self.n_gpu_layers is not None and self.n_gpu_layers < 0:
            raise SettingsError("--n-gpu-layers must be 0 or more (leave it out to offload "
                                "every layer on CUDA)")
        if not math.isfinite(self.lora_scale):
            raise SettingsError("--lora-scale must be a finite number")
