"""Frozen, self-validating settings for judging (`JudgeSettings`) and for engines (`EngineSettings`)."""

from __future__ import annotations

from rmjudge.errors import UserError

from dataclasses import asdict, dataclass, fields
from typing import Literal

Orders = Literal["both", "ab"]
Inconsistent = Literal["tie", "drop", "confident"]


class SettingsError(UserError, ValueError):
    """A setting is out of range; the message names the option and the allowed values."""


@dataclass(frozen=True)
class JudgeSettings:
    samples: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    orders: Orders = "both"
    reflect: bool = True
    shortcut: bool = True
    forced: bool = True
    on_inconsistent: Inconsistent = "tie"
    seed: int = 0
    confidence_fraction: float = 0.1
    prompt_suffix: str | None = None  # None: chosen from the model family
    adaptive: int = 0  # 0: off; else the number of rollouts per order to start with

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise SettingsError("--samples must be at least 1")
        if not 0.0 <= self.temperature <= 5.0:
            raise SettingsError("--temperature must be between 0 and 5")
        if not 0.0 < self.top_p <= 1.0:
            raise SettingsError("--top-p must be in (0, 1]")
        if self.max_tokens < 8:
            raise SettingsError("--max-tokens must be at least 8")
        if self.orders not in ("both", "ab"):
            raise SettingsError("--orders must be 'both' or 'ab'")
        if self.on_inconsistent not in ("tie", "drop", "confident"):
            raise SettingsError("--on-inconsistent must be one of tie, drop, confident")
        if not 0.0 < self.confidence_fraction <= 1.0:
            raise SettingsError("confidence fraction must be in (0, 1]")
        if self.adaptive < 0 or (self.adaptive and self.adaptive >= self.samples):
            raise SettingsError("--adaptive K needs 1 <= K < --samples")

    @property
    def order_list(self) -> tuple[str, ...]:
        return ("ab", "ba") if self.orders == "both" else ("ab",)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@dataclass(frozen=True)
class EngineSettings:
    model: str | None = None  # None: RMJUDGE_MODEL or the embedded default
    lora: str | None = None
    lora_scale: float = 1.0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    n_gpu_layers: int | None = None  # None: all layers when a GPU build is used, else 0
    threads: int | None = None
    parallel: int | None = None  # live sequences per batch; None: 16 on CPU, 64 on CUDA
    batch_size: int = 512  # max tokens per llama_decode call
    n_ctx: int | None = None  # None: derived from the requests and the model's training context
    truncate: bool = False  # pairs too long for the context: error row (False) or truncate

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda"):
            raise SettingsError("--device must be auto, cpu or cuda")
        if self.parallel is not None and self.parallel < 1:
            raise SettingsError("--parallel must be at least 1")
        if self.batch_size < 8:
            raise SettingsError("--batch-size must be at least 8")
        if self.threads is not None and self.threads < 1:
            raise SettingsError("--threads must be at least 1")
