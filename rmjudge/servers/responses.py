"""The wire side of `--server` (engine/server.py): reading a response body under a size cap,
and reading completions' text, log-probabilities and stop strings from any server's format
(legacy `token_logprobs`/`top_logprobs`, chat-style `logprobs.content`, llama-server's own
`/completion`, read as a one-choice completion by `from_native`), refusing what is outside the
protocol with `ProtocolError`."""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any


class ProtocolError(Exception):
    """The server answered outside the protocol (a body over the size cap, a log-probability
    that is not a number, ...): the message completes "the server at URL ..."."""


async def read_capped(resp, cap: int) -> bytes:
    """The response body, read as it streams in; `ProtocolError` past `cap` bytes (the rest is
    never read, so a runaway body costs at most the cap)."""
    length = resp.headers.get("content-length")
    if length and length.isdigit() and int(length) > cap:
        raise ProtocolError(f"announced a response of {int(length) / 1e6:.1f} MB, over the "
                            f"{cap / 1e6:.0f} MB rmjudge reads for one request")
    chunks: list[bytes] = []
    size = 0
    # closed here when the cap stops the read: left to the garbage collector, the body's async
    # generator would be closed by a task of its own, which a closing loop then destroys
    # pending ("Task was destroyed but it is pending!" below the error line)
    async with contextlib.aclosing(resp.aiter_bytes()) as body:
        async for chunk in body:
            size += len(chunk)
            if size > cap:
                raise ProtocolError(f"sent a response of more than {cap / 1e6:.0f} MB to one "
                                    "request, more than any generation of --max-tokens can need")
            chunks.append(chunk)
    return b"".join(chunks)


def error_text(data: bytes) -> str:
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return data[:500].decode("utf-8", errors="replace")
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        return str(err.get("message") or err.get("detail") or err)[:500]
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:500]
    return str(err)[:500]


def deterministic(status: int, data: bytes) -> bool:
    """A 500 whose message says retrying cannot help: llama-cpp-python answers 500 to a missing
    logits_all and to request validation errors."""
    if status != 500:
        return False
    text = error_text(data)
    return "logits_all" in text or "validation error" in text


def retry_after(resp) -> float | None:
    v = resp.headers.get("retry-after")
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _count(v: Any) -> int | None:
    """A token count from a response: a non-negative integer, else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def usage(out: dict) -> tuple[int | None, int | None]:
    """(prompt tokens, completion tokens) of a response's `usage` (llama-server's `/completion`:
    `tokens_evaluated`, `tokens_predicted`), None where absent."""
    u = out.get("usage")
    if not isinstance(u, dict):
        return _count(out.get("tokens_evaluated")), _count(out.get("tokens_predicted"))
    return _count(u.get("prompt_tokens")), _count(u.get("completion_tokens"))


def from_native(out: dict) -> dict:
    """llama-server's `/completion` response as a one-choice `/v1/completions` response. Its
    choice adds `tokens`, the ids of every generated token (`return_tokens`): the
    log-probabilities, there as in `/v1/completions`, leave out a token that ends inside a
    character."""
    text = out.get("content")
    if not isinstance(text, str):
        raise malformed("`content` of /completion is not a string", text)
    probs = out.get("completion_probabilities")
    choice: dict[str, Any] = {
        "text": text, "index": 0,
        "finish_reason": "length" if out.get("stop_type") == "limit" else "stop",
        "logprobs": {"content": probs} if probs is not None else None}
    if isinstance(out.get("stopping_word"), str) and out["stopping_word"]:
        choice["stopping_word"] = out["stopping_word"]
    if "tokens" in out:
        choice["tokens"] = out["tokens"]
    prompt, completion = usage(out)
    conv: dict[str, Any] = {"choices": [choice]}
    if prompt is not None and completion is not None:
        conv["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if isinstance(out.get("timings"), dict):
        conv["timings"] = out["timings"]
    return conv


def cached_tokens(out: dict) -> int | None:
    """How many of a response's prompt tokens the server found cached (`usage.
    prompt_tokens_details.cached_tokens`; else llama-server's `timings.cache_n`), None where it
    does not say."""
    u = out.get("usage")
    details = u.get("prompt_tokens_details") if isinstance(u, dict) else None
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    if cached is None:
        t = out.get("timings")
        cached = _count(t.get("cache_n")) if isinstance(t, dict) else None
    return cached


def first_choice(out: dict) -> dict | None:
    choices = out.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _shown(x: Any) -> str:
    """A received value as the user sees it in a message: JSON, clipped."""
    try:
        text = json.dumps(x, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(x)
    return text if len(text) <= 60 else text[:60] + "..."


def malformed(what: str, x: Any) -> ProtocolError:
    """The error for log-probabilities that are present but not as the protocol has them."""
    return ProtocolError(f"returned malformed log-probabilities ({what}: {_shown(x)})")


def logprob(x: Any) -> float:
    """A log-probability from a response: a finite JSON number, else `ProtocolError` (NaN and
    infinities are no JSON; a lenient parser reads `NaN`, `Infinity` or `1e999` as them)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise malformed("a log-probability that is not a number", x)
    return float(x)


def token_logprobs(lp: Any) -> list | None:
    """Sampled tokens' log-probabilities as received, from either logprobs format, or None when
    absent; not checked (for counting tokens; `sampled_logprobs` checks them)."""
    if not isinstance(lp, dict):
        return None
    if isinstance(lp.get("token_logprobs"), list):  # legacy completions (vLLM, llama-cpp-python)
        return lp["token_logprobs"]
    if isinstance(lp.get("content"), list):  # chat format (llama-server completions, chat)
        return [c.get("logprob") if isinstance(c, dict) else c for c in lp["content"]]
    return None


def sampled_ids(choice: dict) -> list[int] | None:
    """The sampled tokens' ids where a choice gives them: its `tokens` (llama-server's
    `/completion`, every token), else its `logprobs.content` entries' `id`s (llama-server; a
    token that ends inside a character is left out); None where neither lists ids."""
    tokens = choice.get("tokens")
    if isinstance(tokens, list):
        return _ids(tokens)
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list):
        return None
    return _ids([c.get("id") if isinstance(c, dict) else None for c in content])


def _ids(ids: list) -> list[int] | None:
    return ids if all(_count(t) is not None for t in ids) else None


def sampled_logprobs(lp: Any) -> list[float] | None:
    """The sampled tokens' log-probabilities of a choice's `logprobs`: None when the server sent
    none (no `logprobs`, or neither `token_logprobs` nor `content`: they are switched off),
    `ProtocolError` when it sent them in another shape (a string, nested lists, a value that is
    no finite number): a broken server or proxy, not a setting. A null entry (the first token
    of an echoed prompt) is skipped."""
    if lp is None:
        return None
    if not isinstance(lp, dict):
        raise malformed("`logprobs` is not an object", lp)
    legacy, content = lp.get("token_logprobs"), lp.get("content")
    if legacy is None and content is None:
        return None
    if legacy is not None:
        if not isinstance(legacy, list):
            raise malformed("`token_logprobs` is not a list", legacy)
        return [logprob(x) for x in legacy if x is not None]
    if not isinstance(content, list):
        raise malformed("`content` is not a list", content)
    out = []
    for c in content:
        if not isinstance(c, dict):
            raise malformed("a `content` entry is not an object", c)
        if c.get("logprob") is not None:
            out.append(logprob(c["logprob"]))
    return out


def top_at(lp: Any, i: int) -> dict[str, float]:
    """token -> log-probability of the alternatives at generated position i ({} when the
    server sent none there); `ProtocolError` when they are not in the protocol's shape."""
    if lp is None:
        return {}
    if not isinstance(lp, dict):
        raise malformed("`logprobs` is not an object", lp)
    top = lp.get("top_logprobs")
    if top is not None:
        if not isinstance(top, list):
            raise malformed("`top_logprobs` is not a list", top)
        if len(top) <= i or top[i] is None:
            return {}
        if not isinstance(top[i], dict):
            raise malformed("a `top_logprobs` entry is not an object", top[i])
        return {str(k): logprob(v) for k, v in top[i].items() if v is not None}
    content = lp.get("content")
    if content is None:
        return {}
    if not isinstance(content, list):
        raise malformed("`content` is not a list", content)
    if len(content) <= i:
        return {}
    if not isinstance(content[i], dict):
        raise malformed("a `content` entry is not an object", content[i])
    alts = content[i].get("top_logprobs")
    if alts is None:
        return {}
    if not isinstance(alts, list):
        raise malformed("`top_logprobs` is not a list", alts)
    out = {}
    for a in alts:
        if not isinstance(a, dict):
            raise malformed("a `top_logprobs` entry is not a {token, logprob} object", a)
        if "token" in a and a.get("logprob") is not None:  # as before: an entry without a
            out[str(a["token"])] = logprob(a["logprob"])    # token names no choice
    return out


def choice_logprobs(top: dict[str, float], c1: str, c2: str) -> tuple[float, float] | None:
    """Log-probabilities of the two choices among the top alternatives. A choice missing from
    them is given the smallest listed log-probability (an upper bound on its own); None when
    neither is listed."""
    a, b = top.get(c1), top.get(c2)
    if a is None and b is None:
        return None
    floor = min(top.values())
    return (a if a is not None else floor), (b if b is not None else floor)


def restore_stop(text: str, finish: str, stops: tuple[str, ...], choice: dict) -> str:
    """Servers cut a matched stop string from the text; the in-process engine keeps it.

    Put it back when the server says which one matched (vLLM `stop_reason`, SGLang
    `matched_stop`) or, for closing tags such as `</Result>`, when its opening tag is open."""
    if finish != "stop" or not stops or any(text.endswith(s) for s in stops):
        return text
    for key in ("stop_reason", "matched_stop", "stopping_word"):
        v = choice.get(key)
        if isinstance(v, str) and v in stops:
            return text + v
    for s in stops:
        if s.startswith("</") and s.endswith(">"):
            opener = "<" + s[2:]
            if text.rfind(opener) >= 0 and text.rfind(opener) >= text.rfind(s):
                return text + s
    return text
