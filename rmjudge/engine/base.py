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
    # weight types the run's CPU multiplies with another llama.cpp kernel from 8 rows on (a
    # sample then depends on how many sequences share its decode call: `width_dependent_types`)
    width_dependent: tuple[str, ...] = ()


class Engine(Protocol):
    """What every engine implements in full (the llama.cpp engine, the naive one, the server
    engine, `ScriptedEngine`): the Judge, the run set-up, the progress display and the summary
    use these members and nothing else, never probing for one. An engine subclasses `Engine`
    and gets the defaults below for what it has no use for: `steps` serving a source in
    `generate` calls, `close` doing nothing, the counters it does not keep at 0 or None."""

    info: ModelInfo
    # prompt tokens evaluated so far (prefill work; 0 where the engine does not count them)
    prompt_tokens_evaluated: int = 0
    # tokens decoded so far, those of generations still running included (0: not counted)
    decode_rows: int = 0
    # tokens sent to and received from a server (None: the engine talks to no server)
    tokens_sent: int | None = None
    tokens_received: int | None = None
    # the device a finished run's throughput is recorded under for the dry run's estimate
    # ("cpuN", "cuda"); None where no figure is recorded (a server, a scripted engine, a CPU
    # run whose thread count changed while it ran)
    throughput_device: str | None = None

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

    def steps(self, source: RequestSource) -> Iterator[None]:
        """Serve `source` until it has nothing left, yielding now and then. By default every
        ready request goes in one `generate` call at a time (`serve_in_calls`); a streaming
        engine (llama.cpp) takes a pair's next stage the moment its previous one is done."""
        return serve_in_calls(self, source)

    def close(self) -> None:
        """Release what the engine holds (a server engine's connections); nothing by default."""


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
    """Serve `source` in `generate` calls: every request ready is sent in one call, its results
    reported, and so on until the source has nothing left. Yields after each call
    (`Engine.steps` by default; the llama.cpp engine serves a source continuously instead)."""
    while True:
        requests: list[GenRequest] = []
        while more := source.take():
            requests += more
        if not requests:
            return
        for req, gens in zip(requests, engine.generate(requests), strict=True):
            source.done(req, gens)
        yield
