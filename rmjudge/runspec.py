"""A run's model-specific spec, resolved once from the judge settings and the model: the
prompt suffix, the per-sequence token budget, and the settings that decide verdicts.

Scoring, dry run, the greedy baseline, Ray, merge and training all take the suffix and the
budget from here, so a pair that one of them judges is judged alike by the others, and a rerun
is checked against the same `verdict_settings`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from rmjudge.engine.base import ModelInfo
from rmjudge.prompts import PROMPT_FORMAT
from rmjudge.settings import JudgeSettings

# Tokens a sequence may need beyond its prompt and `max_tokens`: the forced-verdict
# continuation fed after a generation that does not parse.
FORCE_MARGIN = 24


@dataclass(frozen=True)
class RunSpec:
    settings: JudgeSettings
    model: ModelInfo
    suffix: str
    context: int  # tokens one sequence may use (prompt + generation + FORCE_MARGIN)

    def tokens_needed(self, prompt_tokens: int) -> int:
        return prompt_tokens + self.settings.max_tokens + FORCE_MARGIN

    def fits(self, prompt_tokens: int) -> bool:
        return self.tokens_needed(prompt_tokens) <= self.context

    def too_long_reason(self, prompt_tokens: int) -> str:
        return (f"the pair needs {prompt_tokens} prompt tokens + {self.settings.max_tokens} to "
                f"generate, more than the model's context of {self.context}; shorten the "
                "responses or lower --max-tokens")

    def verdict_settings(self) -> dict:
        """What decides verdicts: a rerun on the same output must match these exactly."""
        d = self.settings.as_dict()
        d["prompt_suffix"] = self.suffix
        d["prompt_format"] = PROMPT_FORMAT
        d["model_sha256"] = self.model.sha256
        d["lora_sha256"] = self.model.lora_sha256
        if not self.model.sha256:  # a served model (engine/server.py): no file hash to compare
            d["model_name"] = self.model.name
            d["chat_template_sha256"] = hashlib.sha256(
                (self.model.chat_template or "").encode()).hexdigest()
            if self.model.prompt_encoding:
                d["prompt_encoding"] = self.model.prompt_encoding
        return d


def resolve(settings: JudgeSettings, model: ModelInfo, n_ctx: int | None = None) -> RunSpec:
    """The spec for judging with `settings` on `model` (`n_ctx`: a per-sequence limit below the
    model's training context, as `--ctx-size` sets)."""
    suffix = model.prompt_suffix if settings.prompt_suffix is None else settings.prompt_suffix
    context = model.n_ctx_train if not n_ctx else min(n_ctx, model.n_ctx_train or n_ctx)
    return RunSpec(settings, model, suffix, context)
