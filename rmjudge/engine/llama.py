"""The batched llama.cpp engine, on llama-cpp-python's low-level API.

One context, many sequences, each in its own KV stream (`kv_unified=False`). Every step runs
one `llama_decode` with the next token of each decoding sequence, then the prompt chunks of
sequences that are prefilling. `LlamaEngine` is the `Engine` made of these parts:

- `rmjudge.engine.planner`: requests tokenized, split into their samples and grouped by shared
  prompt prefix (the N samples of a request, the requests with the same `share_key`);
- `rmjudge.engine.scheduler`: continuous batching: a group's prefix evaluated once and copied
  to its sequences, restored from the prefix cache or copied from a group evaluating the same
  opening, finished sequences freeing their slots for the next group;
- `rmjudge.engine.kv_context`: the context, its KV streams, the decode call and the prefix
  cache;
- `rmjudge.engine.sampler`: sampling on the logits buffer, forced verdicts, `Generation`s;
- `rmjudge.engine.sequences`: the structures they share.

A sequence's numbers depend on its own tokens only, never on what shares its decode calls,
so samples are reproducible across `--parallel`, `--batch-size`, `--threads`, shards and
resumes (docs/engine.md explains how). Model loading, metadata and the tokenizer live in
`rmjudge.engine.vocab`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator

from rmjudge.engine.base import Engine, RequestSource
from rmjudge.engine.kv_context import KVContext
from rmjudge.engine.planner import Planner
from rmjudge.engine.sampler import Sampler
from rmjudge.engine.scheduler import Scheduler
from rmjudge.engine.sequences import Group, ListSource, Seq
from rmjudge.engine.vocab import (Tokenizer, context_limit, count_tokens, device_name,
                                  load_model, model_info, read_model_info, uses_gpu,
                                  width_dependent_types)
from rmjudge.models.llamacpp import llama_backend
from rmjudge.models.checks import check_gguf
from rmjudge.models.resolve import local_model
from rmjudge.engine.budget import FORCE_MARGIN  # noqa: F401 - the KV margin of every sequence
from rmjudge.core.settings import EngineSettings, JudgeSettings
from rmjudge.core.types import Generation, GenRequest

__all__ = ["LlamaEngine", "device_name", "read_model_info"]  # the last two: from vocab


class _Kept:
    """An engine attribute that one of its parts keeps under the same name: read and set
    there (`prompt_tokens_evaluated = _Kept("scheduler")`)."""

    def __init__(self, part: str):
        self.part = part

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, engine, owner=None):
        return self if engine is None else getattr(getattr(engine, self.part), self.name)

    def __set__(self, engine, value) -> None:
        setattr(getattr(engine, self.part), self.name, value)


class LlamaEngine(Engine):
    """Batched multi-sequence engine (see module docstring)."""

    # What callers, profiles and benchmarks read (and `share_prefill`, `pack`, set) on the engine:
    # the scheduler's counters and switch ...
    prompt_tokens_evaluated = _Kept("scheduler")  # prefill work
    prompt_tokens_copied = _Kept("scheduler")  # copied from a group evaluating them instead
    share_prefill = _Kept("scheduler")  # False: an opening in flight is evaluated twice
    decode_steps = _Kept("scheduler")  # decode calls, and the sequences they carried
    decode_rows = _Kept("scheduler")
    decode_widths = _Kept("scheduler")  # decode calls by the sequences they carried
    decode_spans = _Kept("scheduler")  # and by the KV cells they attended
    decode_pieces = _Kept("scheduler")  # the pieces llama.cpp cut them into (slot-id gaps + 1)
    pack = _Kept("scheduler")  # False: decoding sequences stay in their slots, gaps and all
    sequences_packed = _Kept("scheduler")  # moved into free slots to close such gaps
    # ... and the context's
    prompt_tokens_reused = _Kept("kv")  # prompt tokens restored from the prefix cache
    prefix_cache = _Kept("kv")
    contexts_made = _Kept("kv")  # contexts made, and sequences moved into a larger one running
    sequences_moved = _Kept("kv")
    threads = _Kept("kv")  # the thread count now (the load follower changes it)
    thread_counts = _Kept("kv")  # every count the run decoded with
    load_follower = _Kept("kv")
    ctx = _Kept("kv")
    stream_size = _Kept("kv")  # KV cells of each sequence's stream in the current context
    streams = _Kept("kv")  # and its streams (slots the work at hand fills, up to --parallel)

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        path = local_model(settings)
        llama_cpp = llama_backend()
        self.on_gpu = uses_gpu(settings)
        ngl = settings.n_gpu_layers if settings.n_gpu_layers is not None else (
            999 if self.on_gpu else 0)
        if settings.lora:
            check_gguf(settings.lora, what="LoRA adapter")
        self.model = load_model(path, vocab_only=False, n_gpu_layers=ngl)
        self.info = model_info(self.model, path, settings.lora, settings.lora_scale)
        if not self.on_gpu:
            self.info = dataclasses.replace(self.info,
                                            width_dependent=width_dependent_types(path))
        self.tok = Tokenizer(llama_cpp, self.model, self.info)
        self.parallel = settings.parallel or (64 if self.on_gpu else 16)
        self.n_seq_ctx = context_limit(settings, self.info)
        self.kv = KVContext(llama_cpp, self.model, settings, self.parallel, self.on_gpu,
                            self.tok.n_vocab)
        self.sampler = Sampler(self.tok)
        self.planner = Planner(self.tok, self.n_seq_ctx, self.parallel)
        self.scheduler = Scheduler(self.kv, self.planner, self.sampler, self.parallel,
                                   self.n_seq_ctx, settings.batch_size)

    # -- Engine protocol -----------------------------------------------------------------
    @property
    def generated_tokens(self) -> int:
        return self.sampler.generated

    @property
    def throughput_device(self) -> str | None:
        """`cpuN` or `cuda`; None once the load follower changed the thread count (the run's
        figure then belongs to no one count)."""
        return None if len(self.thread_counts) > 1 else device_name(self)

    def preferred_pairs_in_flight(self, settings: JudgeSettings) -> int:
        per_pair = settings.samples * len(settings.order_list)
        return max(2, math.ceil(2 * self.parallel / per_pair))

    def count_tokens(self, requests: list[GenRequest]) -> list[int]:
        return count_tokens(self.tok, requests, self.n_seq_ctx)

    def generate(self, requests: list[GenRequest]) -> list[list[Generation]]:
        results: list[list[Generation] | None] = [None] * len(requests)
        for _ in self.steps(ListSource(requests, results)):
            pass
        return results  # type: ignore[return-value]

    def steps(self, source: RequestSource) -> Iterator[None]:
        """Serve `source` continuously (`Scheduler.steps`): a pair's next stage joins the
        running batch the moment its previous one is done."""
        return self.scheduler.steps(source)

    def _plan(self, requests: list[GenRequest]) -> tuple[list[Group], list[list[Seq]]]:
        """The groups and per-request sequences `requests` make (`Planner.plan`)."""
        return self.planner.plan(requests)
