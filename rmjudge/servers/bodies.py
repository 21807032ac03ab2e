"""The request bodies `--server` sends, per server flavour (engine/server.py is the engine).

Sampling is plain sampling from the model's distribution, as in-process: no top-k, no min-p, no
repetition penalty, each switched off in the flavour's own terms (llama.cpp servers: `top_k` 0,
`repeat_penalty` 1; vLLM and SGLang: `top_k` -1); llama-server keeps the prompt cached
(`cache_prompt`). Stop strings stay in the text where the flavour can be told so (vLLM
`include_stop_str_in_output`, SGLang `no_stop_trim`). A text prompt that starts with the
template's BOS loses it on llama.cpp servers (they add the model's own) and is sent with
`add_special_tokens: false` elsewhere; token-id prompts go as they are. Chat bodies carry
the data with its control strings broken (the server parses them), continue a final
assistant message for the assistant prefix, and under `--server-api openai-chat` keep to the
documented OpenAI parameters (servers/openai_chat.py).
"""

from __future__ import annotations

from typing import Any, Callable

from rmjudge.servers import openai_chat


class RequestBodies:
    """The bodies of one served model: `flavor` (llama-server, llama-cpp-python, vllm,
    sglang, openai-compatible), `model` (its served name), `strict` (`--server-api
    openai-chat`), `template` (the judge's chat template, for its BOS; None when the server
    renders) and `neutralize` (breaks control strings in data text)."""

    def __init__(self, flavor: str, model: str, strict: bool, template,
                 neutralize: Callable[[str], str]):
        self.flavor = flavor
        self.model = model
        self.strict = strict
        self.template = template
        self.neutralize = neutralize

    def sampling(self, temperature: float, top_p: float, seed: int) -> dict:
        """Plain sampling from the model's distribution, as the in-process engine does: no
        top-k, no min-p, no repetition penalty (llama.cpp servers default to all three)."""
        d: dict[str, Any] = {"temperature": temperature, "top_p": top_p, "seed": seed,
                             "min_p": 0.0}
        if self.flavor in ("llama-server", "llama-cpp-python", "openai-compatible"):
            d["top_k"] = 0  # llama.cpp: 0 is off (llama-cpp-python refuses -1)
            d["repeat_penalty"] = 1.0
        else:
            d["top_k"] = -1  # vLLM, SGLang: -1 is off
        if self.flavor == "llama-server":
            d["cache_prompt"] = True
        return d

    def completion(self, prompt: str | list[int], max_tokens: int, temperature: float,
                   top_p: float, seed: int, stop: tuple[str, ...], logprobs: int | None) -> dict:
        """A `/v1/completions` body."""
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "n": 1, "stream": False, **self.sampling(temperature, top_p, seed)}
        if stop:
            body["stop"] = list(stop)
            if self.flavor == "vllm":
                body["include_stop_str_in_output"] = True
            elif self.flavor == "sglang":
                body["no_stop_trim"] = True
        if logprobs is not None:
            body["logprobs"] = logprobs
        tmpl = self.template
        if isinstance(prompt, list):
            return body  # token ids: the BOS is in them, nothing is tokenized on the server
        if tmpl is not None and tmpl.bos and prompt.startswith(tmpl.bos):
            if self.flavor in ("llama-server", "llama-cpp-python"):
                # llama.cpp adds the model's BOS itself: one BOS, not two
                body["prompt"] = prompt[len(tmpl.bos):]
            else:
                body["add_special_tokens"] = False
        return body

    def native_completion(self, prompt: str | list[int], max_tokens: int, temperature: float,
                          top_p: float, seed: int, stop: tuple[str, ...],
                          logprobs: int) -> dict:
        """A body for llama-server's own `/completion`: the `/v1/completions` body, its top
        log-probabilities as `n_probs`, and the ids of every generated token asked for
        (`return_tokens`); one sample (the endpoint has no `n`)."""
        body = self.completion(prompt, max_tokens, temperature, top_p, seed, stop, None)
        del body["n"]
        body["n_probs"] = logprobs
        body["return_tokens"] = True
        return body

    def chat(self, messages: list, assistant: str, max_tokens: int, temperature: float,
             top_p: float, seed: int, stop: tuple[str, ...], top: int) -> dict:
        """A `/v1/chat/completions` body; `assistant`: the text the answer continues."""
        # the server renders and tokenizes these with special-token parsing: break control
        # strings in them (they are all the data's text)
        msgs = [{**m, "content": self.neutralize(m["content"])} for m in messages]
        assistant = self.neutralize(assistant)
        if self.strict:  # the model writes its whole answer: no prefill of the assistant turn
            return openai_chat.body(self.model, msgs, max_tokens, temperature, top_p, seed, stop,
                                    top if top > 1 else None)
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "n": 1,
                                "stream": False, "logprobs": True, "top_logprobs": top,
                                **self.sampling(temperature, top_p, seed)}
        if assistant:
            msgs.append({"role": "assistant", "content": assistant})
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        body["messages"] = msgs
        if stop:
            body["stop"] = list(stop)
        return body
