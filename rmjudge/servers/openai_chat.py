"""`--server-api openai-chat`: judging through an API that follows the OpenAI chat schema
strictly (hosted APIs, gateways), for engine/server.py.

Only documented chat-completions parameters are sent (`DOCUMENTED`): no `min_p`, `top_k`,
`repeat_penalty`, `cache_prompt`, no `/v1/completions` and no `continue_final_message`. So:

- **Samples** are a plain chat request of the judge's messages; the model writes its whole
  answer (a ReflectRM judge opens it with `<Analysis>`, which is cut so that stored texts
  look like the in-process engine's, whose generation starts after that prefix).
- **Forced verdicts** come from a *verdict-only* request: the judge's messages, the sample's
  text as the assistant's turn, and a user turn asking for the number of the better response
  only; the two choices' probabilities are read from the `top_logprobs` (at most 20, the
  schema's cap) of the first answer token. This is a follow-up question, not the paper's
  continuation of the same turn; the run records it (`ENCODING`).
"""

from __future__ import annotations

import math
from typing import Any

from rmjudge.prompts import RESULT_OPEN

API = "openai-chat"
APIS = ("auto", API)
TOP_LOGPROBS_MAX = 20  # the OpenAI schema's cap on top_logprobs
# The chat-completions request fields the OpenAI API reference documents (a subset is sent).
DOCUMENTED = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
    "logprobs", "top_logprobs", "stop", "n", "stream", "frequency_penalty", "presence_penalty",
    "logit_bias", "user", "response_format", "tools", "tool_choice", "parallel_tool_calls",
    "stream_options", "service_tier", "store", "metadata", "modalities", "audio",
    "prediction", "reasoning_effort",
})
ENCODING = ("OpenAI chat messages (strict schema, --server-api openai-chat; control-token "
            "strings in data broken with U+200B ZERO WIDTH SPACE); forced verdicts from a "
            "verdict-only follow-up turn")


def body(model: str, messages: list[dict], max_tokens: int, temperature: float, top_p: float,
         seed: int, stop: tuple[str, ...], top_logprobs: int | None) -> dict[str, Any]:
    """A chat request with documented parameters only (`logprobs` always on)."""
    d: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens,
                         "temperature": temperature, "top_p": top_p, "seed": seed,
                         "logprobs": True}
    if top_logprobs is not None:
        d["top_logprobs"] = max(0, min(TOP_LOGPROBS_MAX, top_logprobs))
    if stop:
        d["stop"] = list(stop)[:4]  # the schema takes up to 4 stop sequences
    return d


def strip_prefix(text: str, assistant_prefix: str) -> str:
    """The answer after the assistant prefix the in-process engine would have prefilled."""
    if assistant_prefix and text.lstrip().startswith(assistant_prefix.strip()):
        return text.lstrip()[len(assistant_prefix.strip()):].lstrip("\n")
    return text


def verdict_messages(messages: list[dict], assistant_prefix: str, text: str,
                     continuation: str) -> list[dict]:
    """The verdict-only request's messages: the judge's prompt, the sample's analysis as the
    assistant's turn, and a question whose answer's first token is the verdict."""
    noun = continuation.rsplit(RESULT_OPEN, 1)[-1].strip() or "Response"
    return [*messages, {"role": "assistant", "content": assistant_prefix + text},
            {"role": "user", "content": f"Which {noun.lower()} is better? Answer with its number "
                                        "only: 1 or 2."}]


def choice_logprobs(top: dict[str, float], choices: tuple[str, str]
                    ) -> tuple[float, float] | None:
    """Log-probabilities of the two choices among a position's top alternatives, each choice
    spelled with or without its leading space (summed); a choice missing from them gets the
    smallest listed log-probability (an upper bound); None when neither is listed."""
    found = []
    for c in choices:
        spellings = {c, c.strip(), " " + c.strip()}
        lps = [top[s] for s in spellings if s in top]
        found.append(_logsumexp(lps) if lps else None)
    if found[0] is None and found[1] is None:
        return None
    floor = min(top.values())
    return (found[0] if found[0] is not None else floor,
            found[1] if found[1] is not None else floor)


def _logsumexp(xs: list[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))
