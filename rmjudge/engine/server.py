"""Judging through an OpenAI-compatible server (llama-server, vLLM, SGLang, llama-cpp-python).

The server engine sits behind the same `Engine` seam as the in-process llama.cpp engine. This
module is its judge logic: start-up, scheduling of samples and groups, reading choices. Beside
it, each with one job: the HTTP side (connection, retries, response caps, counting, discovery
of the served model) is `ServerClient` (servers/client.py); the template is found by
engine/served_template.py; the start-up probe, the choice of prompt encoding and the prompts
are servers/prompts.py; the request bodies per server flavour servers/bodies.py;
forced verdicts engine/server_forcing.py.

- **Prompts are rendered here**, with the judge's chat template (`ChatTemplate`, the class the
  in-process engine uses), and sent to `/v1/completions` as token ids where the server takes
  them and rmjudge can tokenize for its model (data pieces without special-token parsing, as
  in-process), else as text with the data's control-token strings broken
  (servers/control_text.py); `ServerEngine.prompt_encoding` says which, and the run records it.
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
  choices' probabilities are read from it. With token-id prompts it continues the sample's own
  token ids, as in-process, where the response lists them all: on llama-server a sample goes
  to its own `/completion` with `return_tokens` (`ServerEngine.native`, probed at start-up),
  because `/v1/completions` leaves a token that ends inside a character out of its
  log-probabilities, and a verdict continuing the text would evaluate it again from there.
- **Prefix reuse**: the samples of one request, and the requests sharing a `share_key`, are a
  group. On llama-server, whose KV cache is per slot (`-np`), a group holds as many slots as it
  decodes side by side until it ends (engine/server_slots.py): with slot actions
  (`--slot-save-path`) its shared prompt is evaluated on one slot and copied to the others,
  every request pinned to its slot; else a request's N samples go as one request with `n: N`
  (the prompt evaluated once, copied to N slots) and requests sharing a prefix run one after
  another on one slot. So the server evaluates a shared prompt about once and decodes a
  request's samples side by side, as the in-process engine does (docs/speed.md). Elsewhere,
  when a group has several members, one one-token request for their common prompt prefix
  goes first ("priming" the server's prefix cache), then the members run concurrently and are
  admitted in group order, so a server with a prefix cache shared by all sequences (vLLM
  `--enable-prefix-caching`, SGLang's radix cache) evaluates the shared prefix once.

`ModelInfo.path` is the server URL without credentials, `name` the served model's name,
`sha256` is empty (no common server exposes the model file's hash).
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Any

from rmjudge.servers import openai_chat
from rmjudge.servers import responses as wire
from rmjudge.engine.base import Engine, ModelInfo
from rmjudge.prompts.sandbox import TemplateError
from rmjudge.engine.served_template import find_template
from rmjudge.servers.bodies import RequestBodies
from rmjudge.servers.slot_copies import server_tag, slot_copies_kept
from rmjudge.engine.server_slots import SlotGroups, gather_all
from rmjudge.servers.client import (
    API_KEY_ENV,
    HTTPStatus,
    ServerClient,
    ServerError,
    ServerSettings,
    Unreachable,
    public_url,
)
from rmjudge.engine.server_forcing import ServerForcing
from rmjudge.servers.prompts import (ENCODING_IDS, LOGPROB_FLAGS, ServedPrompts,
                                     probe_endpoint, probe_native)
from rmjudge.core.errors import ModelError
from rmjudge.prompts import suffix_for_model
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import Generation, GenRequest

__all__ = ["API_KEY_ENV", "ServerEngine", "ServerError", "ServerSettings", "public_url",
           "sample_seed"]


def sample_seed(seed: int, index: int) -> int:
    """The server seed of sample `index` of a request: 31 bits (every server accepts them)."""
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") & 0x7FFFFFFF


def sampled_continuation(prompt: str | list[int] | None, choice: dict, finish: str,
                         generated: int | None) -> list[int] | None:
    """A token-id prompt followed by the ids of the tokens sampled after it (what a forced
    verdict continues, as in-process: the sample's slot holds exactly those), where the choice
    gives the ids of all `generated` tokens of a one-sample request (`wire.sampled_ids`) and
    nothing was cut from its text (finish "length"); else None, and the forced verdict
    continues the text. (llama-server's log-probabilities leave out a token that ends inside a
    character; its `/completion` lists every token.)"""
    if not isinstance(prompt, list) or finish != "length" or not generated:
        return None
    ids = wire.sampled_ids(choice)
    return prompt + ids if ids is not None and len(ids) == generated else None


def _common_prefix(texts: list[str]) -> str:
    if not texts:
        return ""
    return os.path.commonprefix(texts)


class ServerEngine(Engine):
    """The Engine seam over an OpenAI-compatible HTTP server (see module docstring)."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.client = ServerClient(settings)
        self.url = self.client.url
        self.strict = self.client.strict
        self._generated = 0
        self.template = None
        try:
            served = self.client.run(self.client.discover())
            self.flavor, self.model = served.flavor, served.model
            found = find_template(settings, self.model, served.props, self.client.root,
                                  self.strict)
            self.template, self.template_source = found.template, found.source
            # the prompts (a local tokenizer when a GGUF was given), their bodies, the verdicts
            self.prompts = ServedPrompts(self.client, found.template, found.tokenizer)
            self.bodies = RequestBodies(self.flavor, self.model, self.strict, found.template,
                                        self.prompts.neutralize)
            self.forcing = ServerForcing(self.client, self.bodies, self.prompts,
                                         settings.top_logprobs)
            self.endpoint = self.client.run(probe_endpoint(self.client, self.bodies,
                                                           settings.top_logprobs))
            self.prompt_encoding = self.client.run(
                self.prompts.choose_encoding(self.endpoint, self.flavor, self.strict))
            # llama-server: a sample goes to its own /completion, which lists every token's id
            # (a forced verdict then continues them exactly; /v1 leaves out a token that ends
            # inside a character)
            self.native = (self.flavor == "llama-server" and self.endpoint == "completions"
                           and not self.strict and self.client.run(
                               probe_native(self.client, self.bodies, settings.top_logprobs)))
        except Unreachable as exc:
            self.close()
            raise ServerError(f"the server at {self.url} stopped answering while being checked "
                              f"({exc.reason}); check it and retry") from None
        except wire.ProtocolError as exc:
            self.close()
            raise ServerError(f"the server at {self.url} {exc}: it does not follow the OpenAI "
                              "completions protocol; fix the server (or the proxy in front of "
                              "it) and retry") from None
        except BaseException:
            self.close()
            raise
        # llama-server's slots each keep their own KV cache: a request's samples go as one
        # request with n: N (the prompt evaluated once, copied to N slots) on slots the group
        # holds until its forced verdicts are done (docstring; docs/speed.md). slot_groups:
        # the slots shared out, min(the server's, --server-concurrency); 0 elsewhere
        slots = served.props.get("total_slots")
        self.slot_groups = (min(slots, settings.concurrency)
                            if (settings.slot_groups and self.flavor == "llama-server"
                                and self.endpoint == "completions"
                                and isinstance(slots, int) and not isinstance(slots, bool)
                                and slots > 0) else 0)
        # n: N without the slots held (--server-share-prompt where the server's slots are not
        # known or slot groups are off)
        self.share_prompt = (settings.share_prompt and not self.slot_groups
                             and self.flavor == "llama-server" and self.endpoint == "completions")
        self._n_copies = True  # llama-server answers n: N (with its prompt copied to N slots)
        # and with slot actions (--slot-save-path) a group's shared prompt is evaluated on
        # one slot and copied to the group's others, its requests pinned to its slots
        tag = server_tag(self.url, self.model)
        copies = bool(self.slot_groups > 1 and settings.slot_copies
                      and self.client.run(slot_copies_kept(self.client, self.bodies, tag)))
        self.groups = SlotGroups(self.client, tag, self.slot_groups, copies, self._sample,
                                 self._samples, self._prime,
                                 lambda: self._n_copies) if self.slot_groups else None
        if self.endpoint == "chat":
            self.template_source = "the server (chat completions)"
        self.info = ModelInfo(
            path=self.url, sha256="", architecture=found.architecture, name=self.model,
            n_ctx_train=served.n_ctx,
            chat_template=None if self.template is None else self.template.source,
            prompt_suffix=suffix_for_model(found.architecture, self.model),
            prompt_encoding=self.prompt_encoding,
        )

    @property
    def slot_copies(self) -> bool:
        """Whether a group's shared prompt is copied between llama-server's slots now."""
        return self.groups is not None and self.groups.copies

    def describe(self) -> str:
        """One line for the user: which server, model, endpoint and template source."""
        where = ("/v1/completions" + (" (samples: /completion, every token's id)"
                                      if self.native else "")
                 + ", chat template from " + self.template_source
                 if self.endpoint == "completions" else
                 "/v1/chat/completions, documented OpenAI parameters only" if self.strict else
                 "/v1/chat/completions (no text completions; the server renders the template)")
        sent = ("prompts as token ids" if self.prompt_encoding == ENCODING_IDS else
                "forced verdicts from verdict-only requests" if self.strict else
                "prompts as text with control strings in data broken")
        shared = (f", a shared prompt evaluated on one slot and copied to the group's others "
                  f"(slot actions), {self.slot_groups} slots" if self.slot_copies else
                  f", a request's samples as one request (n: N) on slots it keeps, "
                  f"{self.slot_groups} slots" if self.slot_groups else
                  ", a request's samples as one request (n: N)"
                  if self.share_prompt and self._n_copies else "")
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

    @property
    def neutralize(self):
        """Breaks the control strings of this model's template in data text."""
        return self.prompts.neutralize

    # -- Engine protocol -----------------------------------------------------------------------
    @property
    def generated_tokens(self) -> int:
        return self._generated

    def preferred_pairs_in_flight(self, settings: JudgeSettings) -> int:
        if self.slot_groups:  # a pair and order's reflections hold one slot: enough pairs
            # that every slot is busy in that stage too
            return max(2, math.ceil(2 * self.slot_groups / len(settings.order_list)))
        per_pair = settings.samples * len(settings.order_list)
        return max(2, math.ceil(2 * self.settings.concurrency / per_pair))

    def payload(self, req: GenRequest) -> str | list[int]:
        """What /v1/completions is sent for `req`: token ids, or text with the data's control
        strings broken (`prompt_encoding` says which)."""
        return self.client.run(self.prompts.prompt(req))

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
        tok = self.prompts.tokenizer
        if tok is None:
            raise ServerError("counting tokens for --server needs the served GGUF: pass "
                              "--model FILE.gguf")
        return [len(tok.prompt_tokens(r)) for r in requests]

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
            prompt = await self.prompts.prompt(req) if self.endpoint == "completions" else None
            key = req.share_key if req.share_key is not None else ("__req", i)
            groups.setdefault(key, []).extend((i, s, prompt) for s in range(req.n))

        async def one(i: int, s: int, prompt: str | list[int] | None) -> None:
            out[i][s] = await self._sample(requests[i], s, prompt)

        async def shared(i: int, prompt: str | list[int]) -> None:
            out[i] = await self._samples(requests[i], requests[i].n, prompt)  # type: ignore

        async def group(members: list[tuple[int, int, str | list[int] | None]]) -> None:
            if self.groups is not None:  # llama-server: on slots the group holds
                await self.groups.run(requests, members, out)
                return
            if self.share_prompt and self._n_copies:  # one request of n samples per prompt
                firsts = [(i, p) for i, s, p in members if s == 0]
                await gather_all(shared(i, p) if requests[i].n > 1 else one(i, 0, p)
                                 for i, p in firsts)  # type: ignore[arg-type]
                return
            if self.settings.prime and len(members) > 1 and self.endpoint == "completions":
                prefix = _common_prefix([p for _, _, p in members])  # type: ignore[misc]
                if prefix:
                    await self._prime(prefix)
            await gather_all(one(*m) for m in members)

        await gather_all(group(m) for m in groups.values())
        return out  # type: ignore[return-value]

    async def _prime(self, prefix: str | list[int], slot: int | None = None) -> int | None:
        """A one-token request for `prefix` (on `slot`), so that the server caches it; its
        prompt tokens as the server counts them."""
        body = self.bodies.completion(prefix, 1, 0.0, 1.0, 0, (), None)
        if slot is not None:
            body["id_slot"] = slot
        try:
            return wire.usage(await self.client.post("/completions", body))[0]
        except HTTPStatus:
            return None  # the members' own requests report what is wrong with the prompt

    async def _sample(self, req: GenRequest, s: int, prompt: str | list[int] | None,
                      slot: int | None = None) -> Generation:
        """Sample `s` of `req`, one request (pinned to llama-server's `slot` when given, as
        its forced verdict then is)."""
        seed = sample_seed(req.seed, s)
        try:
            if prompt is not None and self.native:
                body = self.bodies.native_completion(prompt, req.max_tokens, req.temperature,
                                                     req.top_p, seed, req.stop, 1)
                if slot is not None:
                    body["id_slot"] = slot
                out = wire.from_native(await self.client.post_native(body))
            elif prompt is not None:
                body = self.bodies.completion(prompt, req.max_tokens, req.temperature, req.top_p,
                                             seed, req.stop, 1)
                if slot is not None:
                    body["id_slot"] = slot
                out = await self.client.post("/completions", body)
            else:
                body = self.bodies.chat(list(req.messages), req.assistant_prefix, req.max_tokens,
                                       req.temperature, req.top_p, seed, req.stop, 1)
                out = await self.client.post("/chat/completions", body)
        except HTTPStatus as exc:
            return self._request_failed(exc)
        if slot is not None and self.groups is not None:
            self.groups.found[slot] = wire.cached_tokens(out)
        ch = wire.first_choice(out)
        if ch is None:
            raise ServerError(f"the server at {self.url} answered without choices: "
                              f"{str(out)[:200]}")
        return await self._read_choice(req, ch, prompt, slot, wire.usage(out)[1])

    async def _samples(self, req: GenRequest, n: int, prompt: str | list[int],
                       first: int = 0) -> list[Generation]:
        """`n` samples of one prompt in one request (`n: N`): the server evaluates the prompt
        once for all of them; seeded by the seed of sample `first`. A llama-server that
        answers with one choice (a build without `n`) gives that one sample, and the engine
        sends one request per sample from then on."""
        body = self.bodies.completion(prompt, req.max_tokens, req.temperature, req.top_p,
                                     sample_seed(req.seed, first), req.stop, 1)
        body["n"] = n
        try:
            out = await self.client.post("/completions", body)
        except HTTPStatus as exc:
            if exc.status == 400 and not self.slot_groups:
                return await self._samples_apart(req, n, prompt, first)
            return [self._request_failed(exc) for _ in range(n)]
        choices = out.get("choices")
        if self.slot_groups and isinstance(choices, list) and len(choices) == 1 and n > 1:
            self._n_copies = False  # this server ignores n
            n = 1
        if not isinstance(choices, list) or len(choices) != n or not all(
                isinstance(c, dict) for c in choices):
            raise wire.ProtocolError(f"answered a request for n={n} samples with "
                                     f"{len(choices) if isinstance(choices, list) else 'no'} "
                                     "choices")
        choices = sorted(choices, key=lambda c: c.get("index") if isinstance(
            c.get("index"), int) else 0)
        if not self.slot_groups:
            return list(await gather_all(self._read_choice(req, ch, prompt) for ch in choices))
        # llama-server: the samples' slots do not offer their cache to later requests (the
        # copies' tokens are not kept for matching), so the forced verdicts go one after
        # another to the slot that evaluated the prompt, each evaluating only its sample's
        # text and continuation there
        return [await self._read_choice(req, ch, prompt) for ch in choices]

    async def _samples_apart(self, req: GenRequest, n: int, prompt: str | list[int],
                             first: int) -> list[Generation]:
        """`--server-share-prompt` on a llama-server that does not report its slots, which
        refused `n: N` (HTTP 400: N above its slots, or a prompt it will not run): the samples
        one request each. When any of them is answered, the server runs the prompt but not
        `n`, and later requests go one per sample without asking again."""
        gens = list(await gather_all(self._sample(req, first + k, prompt) for k in range(n)))
        if any(g.finish_reason != "error" for g in gens):
            self._n_copies = False
        return gens

    async def _read_choice(self, req: GenRequest, ch: dict, prompt: str | list[int] | None,
                           slot: int | None = None, generated: int | None = None) -> Generation:
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
        lps = wire.sampled_logprobs(ch.get("logprobs"))
        if lps is None:
            raise ServerError(f"the server at {self.url} returned no log-probabilities for a "
                              f"generation; enable them ({LOGPROB_FLAGS})")
        gen = Generation(text=text, token_logprobs=lps, finish_reason=finish)
        if req.force is not None:
            cont = req.force.continuation(text)
            if cont is not None:
                tokens = sampled_continuation(prompt, ch, finish, generated)
                await self.forcing.force(req, tokens or prompt, "" if tokens else text, cont,
                                         gen, slot)
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
