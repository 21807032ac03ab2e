"""The token budget of one sequence, the rule every engine and the run spec share: how many
tokens a sequence may hold (`context_limit`), the KV cells kept beyond the prompt and
`max_tokens` for a forced verdict (`FORCE_MARGIN`), and the one "too long" message
(`too_long_reason`), and the one sum of a sequence's budget (`tokens_needed`,
`prompt_room`). The run spec (rmjudge.judging.runspec) builds a run's budget from these;
the engines plan their KV cache with them."""

from __future__ import annotations

# Tokens a sequence may need beyond its prompt and `max_tokens`: the forced-verdict
# continuation fed after a generation that does not parse.
FORCE_MARGIN = 24


def context_limit(n_ctx: int | None, n_ctx_train: int) -> int:
    """Tokens one sequence may hold: `n_ctx` (`--ctx-size`) when given, at most the model's
    training context (when the model reports one)."""
    return n_ctx_train if not n_ctx else min(n_ctx, n_ctx_train or n_ctx)


def tokens_needed(prompt_tokens: int, max_tokens: int) -> int:
    """The context budget of one sequence: its prompt, `max_tokens` to generate and the
    forced-verdict margin (the one place that adds them up: the run spec, the dry run and the
    llama.cpp engine's KV planning all use it)."""
    return prompt_tokens + max_tokens + FORCE_MARGIN


def prompt_room(context: int, max_tokens: int) -> int:
    """The most prompt tokens a sequence of `context` tokens leaves room for
    (`tokens_needed(prompt_room(c, m), m) == c`)."""
    return context - max_tokens - FORCE_MARGIN


def too_long_reason(prompt_tokens: int | str, max_tokens: int, context: int) -> str:
    """Why a pair cannot be judged: its prompt (`prompt_tokens`, a count or words such as "at
    least N") and `max_tokens` do not fit a sequence's `context`."""
    return (f"the pair needs {prompt_tokens} prompt tokens + {max_tokens} to generate, more "
            f"than the model's context of {context}; shorten the responses or lower "
            "--max-tokens")
