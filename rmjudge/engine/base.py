"""The Engine seam: the protocol states `GenRequest`s, an engine returns `Generation`s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Protocol

from rmjudge.core.types import Generation, GenRequest

if TYPE_CHECKING:
    from rmjudge.core.settings import JudgeSettings


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
    lora_scale: float | None = None  # the adapter's `--lora-scale` (None without an adapter)
    prompt_encoding: str | None = None  # a served model: how prompts reach it (engine/server.py)


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


class RequestSource(Protocol):
    """Where a streaming engine takes its work from, and where it reports it done.

    `take` returns the next requests to schedule (typically one stage of one pair; requests
    with the same `share_key` come in the same list), or [] when none is ready now. `done`
    receives a request (the same object) with its `n` generations as soon as they are all
    finished, which may make the source ready to give more."""

    def take(self) -> list[GenRequest]:
        ...

    def done(self, request: GenRequest, generations: list[Generation]) -> None:
        ...


def serve_in_calls(engine: Engine, source: RequestSource) -> Iterator[None]:
    """Serve `source` with an engine that only has `generate`: every request ready is sent in
    one call, its results reported, and so on until the source has nothing left. Yields after
    each call. (Engines with a `steps(source)` method serve it continuously instead.)"""
    while True:
        requests: list[GenRequest] = []
        while more := source.take():
            requests += more
        if not requests:
            return
        for req, gens in zip(requests, engine.generate(requests), strict=True):
            source.done(req, gens)
        yield
