"""Rollout sources: N response-preference samples per item from the base model.

- `EngineRollouts`: any rmjudge engine (the batched llama.cpp engine on a GGUF of the base, or
  the scripted fake in tests). Many items go to the engine in one `generate` call so it fills
  its batch; each item's samples are seeded from (seed, item id), so a rerun or a resumed run
  draws the same rollouts whatever the chunking.
- `TransformersRollouts`: `model.generate` of a transformers model, when no GGUF is given.

Both prompt exactly as `rmjudge score` does: `pref_messages` with the model family's suffix,
generation starting after `ASSISTANT_PREFIX`, stopping at `</Result>`, and with the judging
criteria (`--criteria`, `SamplingSettings.criteria`) when given. The fingerprint names the
criteria (when given) and the prompt format, so a cache of rollouts prompted in another format is refused. No forced verdicts: a
rollout that does not parse stays a parse failure (it counts as incorrect downstream).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rmjudge.prompts import ASSISTANT_PREFIX, PROMPT_FORMAT, STOP, PromptStyle, pref_messages
from rmjudge.judging.runspec import prompt_suffix
from rmjudge.core.seeds import derive_seed
from rmjudge.core.types import GenRequest, Message

from rmjudge.training.cache import CachedRollouts


@dataclass(frozen=True)
class Item:
    """One labelled preference item with its responses in training slot order."""

    id: str
    conversation: tuple[Message, ...]
    r1: str
    r2: str
    label: int  # slot (1|2) of the preferred response


class RolloutSource(Protocol):
    suffix: str

    def fingerprint(self) -> dict[str, Any]:
        """What determines the rollouts (recorded in the cache)."""
        ...

    def rollouts(self, items: list[Item]) -> list[CachedRollouts]:
        """N rollouts for each item, in item order."""
        ...


@dataclass
class SamplingSettings:
    samples: int = 8
    temperature: float = 1.0
    max_tokens: int = 1024
    seed: int = 0
    criteria: str | None = None  # the rubric text (rmjudge.prompts.criteria.resolve_criteria)

    def fingerprint(self) -> dict[str, Any]:
        """The criteria, when given (caches made without them have no such key)."""
        return {"criteria": self.criteria} if self.criteria else {}


class EngineRollouts:
    def __init__(self, engine, sampling: SamplingSettings, suffix: str | None = None):
        self.engine = engine
        self.s = sampling
        self.suffix = prompt_suffix(engine.info, suffix)

    def fingerprint(self) -> dict[str, Any]:
        info = self.engine.info
        return {"model_sha256": info.sha256, "model": info.name, "samples": self.s.samples,
                "temperature": self.s.temperature, "max_tokens": self.s.max_tokens,
                "seed": self.s.seed, "suffix": self.suffix, "backend": "llama.cpp",
                "prompt_format": PROMPT_FORMAT, **self._lora(), **self.s.fingerprint()}

    @property
    def criteria(self) -> str | None:
        return self.s.criteria

    def _lora(self) -> dict[str, Any]:
        """The LoRA adapter, when one is applied (older caches have no such key)."""
        info = self.engine.info
        if not info.lora_sha256:
            return {}
        return {"lora_sha256": info.lora_sha256, "lora_scale": info.lora_scale}

    def request(self, item: Item) -> GenRequest:
        return GenRequest(
            messages=pref_messages(item.conversation, item.r1, item.r2, self.suffix,
                                   PromptStyle(self.s.criteria)),
            n=self.s.samples, assistant_prefix=ASSISTANT_PREFIX, temperature=self.s.temperature,
            seed=derive_seed(self.s.seed, item.id, "train-rollout"), max_tokens=self.s.max_tokens,
            stop=STOP,
        )

    def rollouts(self, items: list[Item]) -> list[CachedRollouts]:
        gens = self.engine.generate([self.request(it) for it in items])
        out = []
        for per_item in gens:
            err = next((g.error or "generation failed" for g in per_item
                        if g.finish_reason == "error"), None)
            if err:
                out.append(CachedRollouts([], [], err))
            else:
                out.append(CachedRollouts([g.text for g in per_item],
                                          [g.finish_reason for g in per_item]))
        return out


class TransformersRollouts:
    """Sampling with transformers (CPU or CUDA), for a base model given as an HF directory."""

    def __init__(self, model, tokenizer, sampling: SamplingSettings, suffix: str,
                 model_id: str, batch_items: int = 4):
        self.model = model
        self.tok = tokenizer
        self.s = sampling
        self.suffix = suffix
        self.model_id = model_id
        self.batch_items = batch_items

    def fingerprint(self) -> dict[str, Any]:
        return {"model_sha256": None, "model": self.model_id, "samples": self.s.samples,
                "temperature": self.s.temperature, "max_tokens": self.s.max_tokens,
                "seed": self.s.seed, "suffix": self.suffix, "backend": "transformers",
                "prompt_format": PROMPT_FORMAT, **self.s.fingerprint()}

    @property
    def criteria(self) -> str | None:
        return self.s.criteria

    def rollouts(self, items: list[Item]) -> list[CachedRollouts]:
        from rmjudge.training.hf import sample_completions

        out: list[CachedRollouts] = []
        for start in range(0, len(items), self.batch_items):
            chunk = items[start:start + self.batch_items]
            prompts = [pref_messages(it.conversation, it.r1, it.r2, self.suffix,
                                     PromptStyle(self.s.criteria)) for it in chunk]
            seed = derive_seed(self.s.seed, chunk[0].id, "train-rollout") % (2**31)
            texts, finish = sample_completions(
                self.model, self.tok, prompts, n=self.s.samples, temperature=self.s.temperature,
                max_tokens=self.s.max_tokens, seed=seed)
            out.extend(CachedRollouts(t, f) for t, f in zip(texts, finish))
        return out
