"""The Engine seam: the protocol states `GenRequest`s, an engine returns `Generation`s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rmjudge.types import Generation, GenRequest

if TYPE_CHECKING:
    from rmjudge.settings import JudgeSettings


@dataclass(frozen=True)
class ModelInfo:
    """What the run store records about the model and what prompts need from it."""

    path: str
    sha256: str
    architecture: str
    name: str
    n_ctx_train: int
    chat_template: str | None
    prompt_suffix: str
    lora: str | None = None
    lora_sha256: str | None = None


class Engine(Protocol):
    info: ModelInfo

    def generate(self, requests: list[GenRequest]) -> list[list[Generation]]:
        """For each request, its `n` generations (in sample order)."""
        ...

    def preferred_pairs_in_flight(self, settings: JudgeSettings) -> int:
        """How many pairs the driver should keep active to fill this engine's batch."""
        ...

    def count_tokens(self, requests: list[GenRequest]) -> list[int]:
        """Prompt tokens of each request (for --dry-run and sizing)."""
        ...

    @property
    def generated_tokens(self) -> int:
        """Total tokens generated so far (for throughput reports)."""
        ...
