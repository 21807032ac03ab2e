"""Judging through an OpenAI-compatible server (llama-server, vLLM, SGLang, llama-cpp-python).

The server engine sits behind the same `Engine` seam as the in-process llama.cpp engine. This
module is its judge logic; the HTTP side (connection, retries, response caps, counting, discovery
of the served model) is `ServerClient` (engine/server_client.py), and the template is found by
engine/served_template.py.

- **Prompts are rendered here**, with the judge's chat template (`ChatTemplate`, the class the
  in-process engine uses), and sent to `/v1/completions` as token ids where the server takes
  them and rmjudge can tokenize for its model (data pieces without special-token parsing, as
  in-process), else as text with the data's control-token strings broken
  (engine/control_text.py); `ServerEngine.prompt_encoding` says which, and the run records it.
  The template comes from the server where it exposes one (llama-server's `/props`), else a
  `--chat-template` file, else the GGUF given with `--model`, else the served model's name
  when it is a local GGUF path (llama-cpp-python's server), else the Hugging Face tokenizer of
  that name when it is a Hub repository id (`tokenizer_config.json`). Only when the server
  offers no text completions does the engine fall back to `/v1/chat/completions` (the server
  renders the template then, and the assistant prefix is sent as a final assistant message to
  continue); `ServerEngine.endpoint` says which is used.
- **Responses** are read under a cap derived from `max_tokens`; a body over it, or one outside
  the protocol (a log-probability that is not a number), stops the run with one `ServerError`
  line, the store resumable.
- **One HTTP request per sample**, with its own seed derived from (request seed, sample index),
  as the in-process engine derives each sample's generator; `logprobs` returns the sampled
  tokens' log-probabilities, from which the rollout confidences are computed.
- **Forced verdicts**: when a generation does not parse, a one-token request with the top
  log-probabilities is sent for prompt + text + `force.continuation(text)`, and the two
  choices' probabilities are read from it.
- **Prefix reuse**: the samples of one request, and the requests sharing a `share_key`, are a
  group. On llama-server, whose KV cache is per slot (`-np`), a group's requests (each sample
  and its forced verdicts, then the next sample) run one after another, and as many groups run
  side by side as the server has slots (`/props` `total_slots`): each request then finds its
  prefix in the slot the group's previous request used (the server picks the slot by prompt
  similarity) or in the host-memory prompt cache that slot was saved to (`--cache-ram`, on by
  default; with `--kv-unified` idle slots are moved there), so the server evaluates a shared
  prompt about once, as the in-process engine does; N samples sent at once would land on N
  slots and each evaluate it (docs/speed.md). Elsewhere, when a group has several members, one
  one-token request for their common prompt prefix goes first ("priming" the server's prefix
  cache), then the members run concurrently and are admitted in group order, so a server with
  a prefix cache shared by all sequences (vLLM `--enable-prefix-caching`, SGLang's radix cache)
  evaluates the shared prefix once.

`ModelInfo.path` is the server URL without credentials, `name` the served model's name,
`sha256` is empty (no common server exposes the model file's hash).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
from typing import Any

from rmjudge.engine import openai_chat
from rmjudge.engine import server_responses as wire
from rmjudge.engine.base import ModelInfo
from rmjudge.prompts.sandbox import TemplateError
from rmjudge.engine.control_text import Neutralizer, looks_like_control, template_strings
from rmjudge.engine.forcing import forced_probs
from rmjudge.engine.served_template import find_template
from rmjudge.engine.server_client import (
    API_KEY_ENV,
    HTTPStatus,
    ServerClient,
    ServerError,
    ServerSettings,
    Unreachable,
    public_url,
)
from rmjudge.engine.vocab import common_prefix
from rmjudge.core.extras import install_hint
from rmjudge.engine.models import ModelError
from rmjudge.prompts import suffix_for_model
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import Generation, GenRequest

__all__ = ["API_KEY_ENV", "ServerEngine", "ServerError", "ServerSettings", "public_url",
           "sample_seed"]

# Flavors whose /v1/completions take a prompt as a list of token ids (the OpenAI schema's
# "array of tokens"); llama-cpp-python's server takes text only.
TOKEN_ID_FLAVORS = ("llama-server", "vllm", "sglang")
ENCODING_IDS = "token ids (data tokenized as text, never as control tokens)"
ENCODING_TEXT = ("text; control-token strings in the data broken with U+200B ZERO WIDTH SPACE "
                 "(the server parses control tokens in text prompts)")

# Server flags that turn log-probabilities on, named in the error when a server returns none.
LOGPROB_FLAGS = (
    "llama-cpp-python: python -m llama_cpp.server --logits_all true; "
    "vLLM: --max-logprobs 20 (or more); SGLang and llama-server return them by default"
)


def sample_seed(seed: int, index: int) -> int:
    """The server seed of sample `index` of a request: 31 bits (every server accepts them)."""
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") & 0x7FFFFFFF


def _common_prefix(texts: list[str]) -> str:
    if not texts:
        return ""
    return os.path.commonprefix(texts)


class ServerEngine:
    """The Engine seam over an OpenAI-compatible HTTP server (see module docstring)."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.client = ServerClient(settings)
        self.url = self.client.url
        self.strict = self.client.strict
        self._generated = 0
        self._tokenizer = None  # a local llama.cpp tokenizer when a GGUF was given
        self._head_alone: dict[tuple[str, str, str], bool] = {}  # see `_choice_head_alone`
        self.template = None
        # breaks control strings in data sent as text; completed once the template is known
        self.neutralize = Neutralizer(())
        try:
            served = self.client.run(self.client.discover())
            self.flavor, self.model = served.flavor, served.model
            found = find_template(settings, self.model, served.props, self.client.root,
                                  self.strict)
            self.template, self.template_source = found.template, found.source
            self._tokenizer = found.tokenizer
            self.endpoint = self.client.run(self._probe())
            self.prompt_encoding = self.client.run(self._choose_encoding())
        except Unreachable as exc:
            self.close()
            raise ServerError(f"the server at {self.url} stopped answering while being checked "
                              f"({exc.reason}); check it and retry") from None
        except wire.ProtocolError as exc:
            self.close()
            raise ServerError(f"the server at {self.url} {exc}") from None
        except BaseException:
            self.close()
            raise
        # llama-server's slots each keep their own KV cache: N samples sent as N requests each
        # evaluate the prompt; one request with n: N evaluates it once (docs/speed.md)
        self.share_prompt = (settings.share_prompt and self.flavor == "llama-server"
                             and self.endpoint == "completions")
        # otherwise a group's requests run one after another, one group per slot (docstring)
        slots = served.props.get("total_slots")
        self.slot_groups = (min(slots, settings.concurrency)
                            if (settings.slot_groups and not self.share_prompt
                                and self.flavor == "llama-server"
                                and self.endpoint == "completions"
                                and isinstance(slots, int) and not isinstance(slots, bool)
                                and slots > 0) else 0)
        self._groups_running: asyncio.Semaphore | None = None
        if self.endpoint == "chat":
            self.template_source = "the server (chat completions)"
        self.info = ModelInfo(
            path=self.url, sha256="", architecture=found.architecture, name=self.model,
            n_ctx_train=served.n_ctx,
            chat_template=None if self.template is None else self.template.source,
            prompt_suffix=suffix_for_model(found.architecture, self.model),
            prompt_encoding=self.prompt_encoding,
        )

    def describe(self) -> str:
        """One line for the user: which server, model, endpoint and template source."""
        where = ("/v1/completions, chat template from " + self.template_source
                 if self.endpoint == "completions" else
                 "/v1/chat/completions, documented OpenAI parameters only" if self.strict else
                 "/v1/chat/completions (no text completions; the server renders the template)")
        sent = ("prompts as token ids" if self.prompt_encoding == ENCODING_IDS else
                "forced verdicts from verdict-only requests" if self.strict else
                "prompts as text with control strings in data broken")
        shared = (", a request's samples as one request (n: N)" if self.share_prompt else
                  f", a shared prompt's requests in turn, {self.slot_groups} side by side"
                  if self.slot_groups else "")
        return (f"judging through {self.flavor} at {self.url}: model {self.model}, {where}, "
                f"{sent}{shared}, {self.settings.concurrency} requests in flight")

    # -- counts (the transport keeps them) ---------------------------------------------------
    @property
    def requests_sent(self) -> int:
        return self.client.requests_sent

    @property
    def tokens_sent(self) -> int:
        """Prompt tokens sent over every answered request (the run's cost)."""
        return self.client.tokens_sent

    @property
    def tokens_received(self) -> int:
        return self.client.tokens_received

    @property
    def in_flight(self) -> int:
        return self.client.in_flight

    @property
    def peak_in_flight(self) -> int:
        return self.client.peak_in_flight

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Close the HTTP client and its thread (also done at interpreter exit)."""
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- start-up checks -----------------------------------------------------------------------
    async def _probe(self) -> str:
        """Check that completions (else chat completions) answer with log-probabilities."""
        if self.strict:
            return await self._probe_chat()
        body = self._completion_body("Hello", 1, 0.0, 1.0, 0, (), self.settings.top_logprobs)
        try:
            out = await self.client.post("/completions", body)
        except HTTPStatus as exc:
            if exc.status in (404, 405, 501):
                return await self._probe_chat()
            raise self._probe_error(exc) from None
        ch = wire.first_choice(out) or {}
        lp = ch.get("logprobs")
        if not wire.token_logprobs(lp) or len(wire.top_at(lp, 0)) < 2:
            raise ServerError(f"the server at {self.url} returns no log-probabilities, which "
                              f"rmjudge needs for confidences and forced verdicts; enable them "
                              f"({LOGPROB_FLAGS})")
        if self.template is None:
            raise ServerError(
                f"no chat template for {self.model!r}: the server does not expose one; pass "
                f"--chat-template FILE, or --model the GGUF it serves ({install_hint('hub')} "
                "to read the template of a Hub model name)")
        return "completions"

    async def _probe_chat(self) -> str:
        body = self._chat_body([{"role": "user", "content": "Hello"}], "", 1, 0.0, 1.0, 0, (),
                               self.settings.top_logprobs)
        try:
            out = await self.client.post("/chat/completions", body)
        except HTTPStatus as exc:
            if exc.status in (404, 405, 501):
                raise ServerError(f"the server at {self.url} offers neither /v1/completions nor "
                                  "/v1/chat/completions; check --server") from None
            raise self._probe_error(exc) from None
        ch = wire.first_choice(out) or {}
        if not wire.token_logprobs(ch.get("logprobs")):
            raise ServerError(f"the server at {self.url} returns no log-probabilities, which "
                              f"rmjudge needs; enable them ({LOGPROB_FLAGS})")
        return "chat"

    def _probe_error(self, exc: HTTPStatus) -> ServerError:
        if exc.status in (401, 403):
            return ServerError(f"the server at {self.url} refused the request (HTTP "
                               f"{exc.status}); set {API_KEY_ENV} to its API key")
        if "logprob" in exc.message.lower() or "logits_all" in exc.message:
            return ServerError(f"the server at {self.url} does not give log-probabilities "
                               f"({exc.message}); enable them ({LOGPROB_FLAGS})")
        return ServerError(f"the server at {self.url} rejected a test request (HTTP "
                           f"{exc.status}: {exc.message})")

    # -- prompts ---------------------------------------------------------------------------
    async def _choose_encoding(self) -> str:
        """How prompts go to the server: token ids where it takes them and rmjudge can
        tokenize as its model does (the served GGUF's vocabulary, or llama-server's /tokenize
        with special-token parsing off for data), so that control-token strings inside the data
        stay text as in the in-process engine; else text with those strings broken
        (engine/control_text.py)."""
        tmpl = self.template
        strings = template_strings(tmpl.source if tmpl else None, tmpl.bos if tmpl else "",
                                   tmpl.eos if tmpl else "")
        tok = self._tokenizer
        if tok is not None:
            strings |= {t for t in (tok.piece(i, special=True) for i in tok.special_tokens())
                        if looks_like_control(t)}
        self.neutralize = Neutralizer(strings)
        if self.strict:
            return openai_chat.ENCODING
        if self.endpoint != "completions" or self.flavor not in TOKEN_ID_FLAVORS:
            return ENCODING_TEXT
        if tok is not None:
            return ENCODING_IDS
        if self.flavor == "llama-server" and await self._tokenize_keeps_data_apart(strings):
            return ENCODING_IDS
        return ENCODING_TEXT

    async def _tokenize_keeps_data_apart(self, strings: set[str]) -> bool:
        """Whether llama-server's /tokenize honours parse_special (older ones ignore it)."""
        probe = next(iter(sorted(strings, key=len, reverse=True)), None)
        if probe is None:
            return False
        try:
            special = await self.client.server_tokens(probe, special=True, add_bos=False)
            plain = await self.client.server_tokens(probe, special=False, add_bos=False)
        except (HTTPStatus, wire.ProtocolError):
            return False
        return len(special) == 1 and len(plain) > 1

    async def _tokens(self, text: str, special: bool, add_bos: bool) -> list[int]:
        if self._tokenizer is not None:
            return self._tokenizer.tokenize(text, add_bos=add_bos, special=special)
        return await self.client.server_tokens(text, special, add_bos)

    async def _prompt(self, req: GenRequest) -> str | list[int]:
        """What /v1/completions is sent for a request (see `_choose_encoding`)."""
        try:
            pieces = self.template.segments(req.messages, req.assistant_prefix)  # type: ignore
        except TemplateError as exc:
            raise ModelError(str(exc)) from None
        if self.prompt_encoding != ENCODING_IDS:
            return "".join(t if is_template else self.neutralize(t) for t, is_template in pieces)
        tok, tmpl = self._tokenizer, self.template
        bos = tok.bos if tok is not None else tmpl.bos  # type: ignore[union-attr]
        ids: list[int] = []
        for i, (text, is_template) in enumerate(pieces):
            add_bos = i == 0 and not (bos and text.startswith(bos))
            ids += await self._tokens(text, special=is_template, add_bos=add_bos)
        return ids

    async def _extend(self, prompt: str | list[int], tail: str) -> str | list[int]:
        """The prompt followed by generated text (data: never control tokens)."""
        if isinstance(prompt, list):
            return prompt + await self._tokens(tail, special=False, add_bos=False)
        return prompt + self.neutralize(tail)

    # -- request bodies ------------------------------------------------------------------------
    def _sampling(self, temperature: float, top_p: float, seed: int) -> dict:
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

    def _completion_body(self, prompt: str | list[int], max_tokens: int, temperature: float,
                         top_p: float, seed: int, stop: tuple[str, ...],
                         logprobs: int | None) -> dict:
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "n": 1, "stream": False, **self._sampling(temperature, top_p, seed)}
        if stop:
            body["stop"] = list(stop)
            if self.flavor == "vllm":
                body["include_stop_str_in_output"] = True
            elif self.flavor == "sglang":
                body["no_stop_trim"] = True
        if logprobs is not None:
            body["logprobs"] = logprobs
        tmpl = getattr(self, "template", None)
        if isinstance(prompt, list):
            return body  # token ids: the BOS is in them, nothing is tokenized on the server
        if tmpl is not None and tmpl.bos and prompt.startswith(tmpl.bos):
            if self.flavor in ("llama-server", "llama-cpp-python"):
                # llama.cpp adds the model's BOS itself: one BOS, not two
                body["prompt"] = prompt[len(tmpl.bos):]
            else:
                body["add_special_tokens"] = False
        return body

    def _chat_body(self, messages: list, assistant: str, max_tokens: int, temperature: float,
                   top_p: float, seed: int, stop: tuple[str, ...], top: int) -> dict:
        # the server renders and tokenizes these with special-token parsing: break control
        # strings in them (they are all the data's text)
        msgs = [{**m, "content": self.neutralize(m["content"])} for m in messages]
        assistant = self.neutralize(assistant)
        if self.strict:  # the model writes its whole answer: no prefill of the assistant turn
            return openai_chat.body(self.model, msgs, max_tokens, temperature, top_p, seed, stop,
                                    top if top > 1 else None)
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "n": 1,
                                "stream": False, "logprobs": True, "top_logprobs": top,
                                **self._sampling(temperature, top_p, seed)}
        if assistant:
            msgs.append({"role": "assistant", "content": assistant})
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        body["messages"] = msgs
        if stop:
            body["stop"] = list(stop)
        return body

    # -- Engine protocol -----------------------------------------------------------------------
    @property
    def generated_tokens(self) -> int:
        return self._generated

    def preferred_pairs_in_flight(self, settings: JudgeSettings) -> int:
        if self.slot_groups:  # a pair and order runs on one slot: fill every slot
            return max(2, math.ceil(2 * self.slot_groups / len(settings.order_list)))
        per_pair = settings.samples * len(settings.order_list)
        return max(2, math.ceil(2 * self.settings.concurrency / per_pair))

    def payload(self, req: GenRequest) -> str | list[int]:
        """What /v1/completions is sent for `req`: token ids, or text with the data's control
        strings broken (`prompt_encoding` says which)."""
        return self.client.run(self._prompt(req))

    def render(self, req: GenRequest) -> str:
        """The rendered prompt text (what the in-process engine tokenizes); `payload` is what
        is sent."""
        if self.template is None:
            raise ServerError("the chat endpoint renders prompts on the server")
        try:
            return self.template.render(req.messages, req.assistant_prefix)
        except TemplateError as exc:
            raise ModelError(str(exc)) from None

    def count_tokens(self, requests: list[GenRequest]) -> list[int]:
        if self._tokenizer is None:
            raise ServerError("counting tokens for --server needs the served GGUF: pass "
                              "--model FILE.gguf")
        return [len(self._tokenizer.prompt_tokens(r)) for r in requests]

    def generate(self, requests: list[GenRequest]) -> list[list[Generation]]:
        try:
            out = self.client.run(self._generate(requests))
        except Unreachable as exc:
            raise ServerError(
                f"the server at {self.url} stopped answering ({exc.reason}) after {exc.attempts} "
                "attempts; the pairs judged so far are saved: check the server and rerun the same "
                "command to resume") from None
        except wire.ProtocolError as exc:
            raise ServerError(
                f"the server at {self.url} {exc}: it does not follow the OpenAI completions "
                "protocol; the pairs judged so far are saved: fix the server and rerun the same "
                "command to resume") from None
        self._generated += sum(g.n_tokens for gens in out for g in gens)
        return out

    async def _generate(self, requests: list[GenRequest]) -> list[list[Generation]]:
        out: list[list[Generation | None]] = [[None] * r.n for r in requests]
        groups: dict[Any, list[tuple[int, int, str | list[int] | None]]] = {}
        for i, req in enumerate(requests):
            prompt = await self._prompt(req) if self.endpoint == "completions" else None
            key = req.share_key if req.share_key is not None else ("__req", i)
            groups.setdefault(key, []).extend((i, s, prompt) for s in range(req.n))

        async def one(i: int, s: int, prompt: str | list[int] | None) -> None:
            out[i][s] = await self._sample(requests[i], s, prompt)

        async def shared(i: int, prompt: str | list[int]) -> None:
            out[i] = await self._samples(requests[i], requests[i].n, prompt)  # type: ignore

        async def in_turn(members: list[tuple[int, int, str | list[int] | None]]) -> None:
            # llama-server: one slot's worth of work at a time, so the slot (or the prompt
            # cache it is saved to) holds the shared prompt for the group's next request
            if self._groups_running is None:
                self._groups_running = asyncio.Semaphore(self.slot_groups)
            async with self._groups_running:
                for m in members:
                    await one(*m)

        async def group(members: list[tuple[int, int, str | list[int] | None]]) -> None:
            if self.slot_groups:
                await in_turn(members)
                return
            if self.share_prompt:  # one request of n samples per prompt: no priming needed
                firsts = [(i, p) for i, s, p in members if s == 0]
                await asyncio.gather(*(shared(i, p) if requests[i].n > 1 else one(i, 0, p)
                                       for i, p in firsts))  # type: ignore[arg-type]
                return
            if self.settings.prime and len(members) > 1 and self.endpoint == "completions":
                prefix = _common_prefix([p for _, _, p in members])  # type: ignore[misc]
                if prefix:
                    await self._prime(prefix)
            await asyncio.gather(*(one(*m) for m in members))

        tasks = [asyncio.ensure_future(group(m)) for m in groups.values()]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return out  # type: ignore[return-value]

    async def _prime(self, prefix: str | list[int]) -> None:
        body = self._completion_body(prefix, 1, 0.0, 1.0, 0, (), None)
        try:
            await self.client.post("/completions", body)
        except HTTPStatus:
            pass  # the members' own requests report what is wrong with the prompt

    async def _sample(self, req: GenRequest, s: int, prompt: str | list[int] | None) -> Generation:
        seed = sample_seed(req.seed, s)
        try:
            if prompt is not None:
                body = self._completion_body(prompt, req.max_tokens, req.temperature, req.top_p,
                                             seed, req.stop, 1)
                out = await self.client.post("/completions", body)
            else:
                body = self._chat_body(list(req.messages), req.assistant_prefix, req.max_tokens,
                                       req.temperature, req.top_p, seed, req.stop, 1)
                out = await self.client.post("/chat/completions", body)
        except HTTPStatus as exc:
            return self._request_failed(exc)
        ch = wire.first_choice(out)
        if ch is None:
            raise ServerError(f"the server at {self.url} answered without choices: "
                              f"{str(out)[:200]}")
        return await self._read_choice(req, ch, prompt)

    async def _samples(self, req: GenRequest, n: int, prompt: str | list[int]) -> list[Generation]:
        """`n` samples of one prompt in one request (`n: N`, --server-share-prompt): the
        server evaluates the prompt once for all of them; seeded by sample 0's seed."""
        body = self._completion_body(prompt, req.max_tokens, req.temperature, req.top_p,
                                     sample_seed(req.seed, 0), req.stop, 1)
        body["n"] = n
        try:
            out = await self.client.post("/completions", body)
        except HTTPStatus as exc:
            return [self._request_failed(exc) for _ in range(n)]
        choices = out.get("choices")
        if not isinstance(choices, list) or len(choices) != n or not all(
                isinstance(c, dict) for c in choices):
            raise wire.ProtocolError(f"answered a request for n={n} samples with "
                                     f"{len(choices) if isinstance(choices, list) else 'no'} "
                                     "choices")
        choices = sorted(choices, key=lambda c: c.get("index") if isinstance(
            c.get("index"), int) else 0)
        return list(await asyncio.gather(*(self._read_choice(req, ch, prompt)
                                           for ch in choices)))

    async def _read_choice(self, req: GenRequest, ch: dict,
                           prompt: str | list[int] | None) -> Generation:
        """A Generation from one choice of a response (forced verdict included)."""
        message = ch.get("message") if prompt is None else None
        text = ch.get("text") if prompt is not None else (
            message.get("content") if isinstance(message, dict) else None)
        text = text or ""
        if not isinstance(text, str):
            raise wire.ProtocolError(f"answered with a generated text that is not a string: "
                                     f"{str(text)[:80]}")
        if self.strict:
            text = openai_chat.strip_prefix(text, req.assistant_prefix)
        finish = "length" if ch.get("finish_reason") == "length" else "stop"
        text = wire.restore_stop(text, finish, req.stop, ch)
        lps = wire.token_logprobs(ch.get("logprobs"))
        if lps is None:
            raise ServerError(f"the server at {self.url} returned no log-probabilities for a "
                              f"generation; enable them ({LOGPROB_FLAGS})")
        gen = Generation(text=text, token_logprobs=[wire.logprob(x) for x in lps if x is not None],
                         finish_reason=finish)
        if req.force is not None:
            cont = req.force.continuation(text)
            if cont is not None:
                await self._force(req, prompt, text, cont, gen)
        return gen

    def _request_failed(self, exc: HTTPStatus) -> Generation:
        if exc.status in (401, 403):
            raise ServerError(f"the server at {self.url} refused the request (HTTP {exc.status});"
                              f" set {API_KEY_ENV} to its API key")
        if exc.status == 404:
            raise ServerError(f"the server at {self.url} answered 404 ({exc.message}); was it "
                              "restarted with another model? fix --server-model")
        # a request the server will not run (too long for its context, ...): this pair fails
        return Generation("", [], "error", error=f"the server rejected the request (HTTP "
                          f"{exc.status}: {exc.message})")

    async def _force(self, req: GenRequest, prompt: str | list[int] | None, text: str, cont: str,
                     gen: Generation) -> None:
        """Probabilities of the two choices as the next token after prompt + text + cont."""
        c1, c2 = req.force.choices  # type: ignore[union-attr]
        if self.strict:
            msgs = openai_chat.verdict_messages(list(req.messages), req.assistant_prefix, text,
                                                cont)
            found = openai_chat.choice_logprobs(await self._next_token(req, None, "", msgs),
                                                (c1, c2))
            if found is not None:
                self._set_forced(gen, *found)
            return
        head = os.path.commonprefix([c1, c2])
        # the choices' shared start (" " of " 1"/" 2") may be a token of its own: then the
        # verdict is read one token later. With token-id prompts the tokenizer says which, so
        # the likely read goes first and the other is only a fallback.
        reads = [("", c1, c2)] + ([(head, c1[len(head):], c2[len(head):])] if head else [])
        if head and await self._choice_head_alone(prompt, cont, c1, c2, head):
            reads.reverse()
        for extra, a, b in reads:
            found = wire.choice_logprobs(await self._next_token(req, prompt, text + cont + extra),
                                         a, b)
            if found is not None:
                self._set_forced(gen, *found)
                return

    async def _choice_head_alone(self, prompt: str | list[int] | None, cont: str, c1: str,
                                 c2: str, head: str) -> bool:
        """Whether, after `cont`, the choices' shared start `head` is a token of its own (the
        tokens of cont + c1 and cont + c2 part after those of cont + head), as
        `engine.forcing.force_plan` decides in-process; asked once per continuation, and only
        when prompts go as token ids (a tokenizer is at hand)."""
        if not isinstance(prompt, list):
            return False
        key = (cont, c1, c2)
        if key not in self._head_alone:
            try:
                t1, t2, th = [await self._tokens(cont + t, special=False, add_bos=False)
                              for t in (c1, c2, head)]
            except (HTTPStatus, wire.ProtocolError):
                return False
            self._head_alone[key] = common_prefix([t1, t2]) == len(th) and t1[:len(th)] == th
        return self._head_alone[key]

    @staticmethod
    def _set_forced(gen: Generation, a: float, b: float) -> None:
        gen.forced_probs, gen.forced_logprob = forced_probs(a, b)

    async def _next_token(self, req: GenRequest, prompt: str | list[int] | None,
                          tail: str, messages: list | None = None) -> dict[str, float]:
        k = self.settings.top_logprobs
        try:
            if messages is not None:  # a verdict-only chat request (openai-chat)
                body = self._chat_body(messages, "", 1, 0.0, 1.0, 0, (), k)
                out = await self.client.post("/chat/completions", body)
            elif prompt is not None:
                body = self._completion_body(await self._extend(prompt, tail), 1, 0.0, 1.0, 0,
                                             (), k)
                out = await self.client.post("/completions", body)
            else:
                body = self._chat_body(list(req.messages), req.assistant_prefix + tail, 1, 0.0,
                                       1.0, 0, (), k)
                out = await self.client.post("/chat/completions", body)
        except HTTPStatus:
            return {}  # no forced verdict for this sample; the sample stays unparsed
        ch = wire.first_choice(out) or {}
        return wire.top_at(ch.get("logprobs"), 0)
