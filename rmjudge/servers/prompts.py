"""The start-up of `--server` and its prompts (engine/server.py is the engine): the probe that
picks the endpoint, the choice of how prompts are encoded, and the prompts themselves.

- **The probe** (`probe_endpoint`) sends one one-token request: `/v1/completions` with
  log-probabilities, else (404/405/501) `/v1/chat/completions`; a server that gives no
  log-probabilities, refuses the key or has no chat template for text completions is one
  `ServerError` naming the fix.
- **The encoding** (`ServedPrompts.choose_encoding`): prompts go as token ids where the server
  takes them (`TOKEN_ID_FLAVORS`) and rmjudge can tokenize as the model does (the served
  GGUF's vocabulary, or llama-server's `/tokenize` when it honours `parse_special`), data
  pieces tokenized without special-token parsing as in-process; else as text with the data's
  control-token strings broken (servers/control_text.py).
- **The prompts** (`ServedPrompts.prompt`, `extend`): the judge's chat template's pieces,
  encoded the chosen way.
"""

from __future__ import annotations

from rmjudge.servers import openai_chat
from rmjudge.servers import responses as wire
from rmjudge.prompts.sandbox import TemplateError
from rmjudge.servers.control_text import Neutralizer, looks_like_control, template_strings
from rmjudge.servers.bodies import RequestBodies
from rmjudge.servers.client import (API_KEY_ENV, HTTPStatus, ServerClient, ServerError,
                                     Unreachable)
from rmjudge.core.extras import install_hint
from rmjudge.core.errors import ModelError
from rmjudge.core.types import GenRequest

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


async def probe_endpoint(client: ServerClient, bodies: RequestBodies, top_logprobs: int) -> str:
    """"completions" or "chat": the endpoint that answers with log-probabilities (completions
    first; `--server-api openai-chat` probes chat only)."""
    if bodies.strict:
        return await probe_chat(client, bodies, top_logprobs)
    body = bodies.completion("Hello", 1, 0.0, 1.0, 0, (), top_logprobs)
    try:
        out = await client.post("/completions", body)
    except HTTPStatus as exc:
        if exc.status in (404, 405, 501):
            return await probe_chat(client, bodies, top_logprobs)
        raise probe_error(client.url, exc) from None
    ch = wire.first_choice(out) or {}
    lp = ch.get("logprobs")
    # malformed ones raise ProtocolError (said as such, not as switched off)
    if not wire.sampled_logprobs(lp) or len(wire.top_at(lp, 0)) < 2:
        raise ServerError(f"the server at {client.url} returns no log-probabilities, which "
                          f"rmjudge needs for confidences and forced verdicts; enable them "
                          f"({LOGPROB_FLAGS})")
    if bodies.template is None:
        raise ServerError(
            f"no chat template for {bodies.model!r}: the server does not expose one; pass "
            f"--chat-template FILE, or --model the GGUF it serves ({install_hint('hub')} "
            "to read the template of a Hub model name)")
    return "completions"


async def probe_chat(client: ServerClient, bodies: RequestBodies, top_logprobs: int) -> str:
    body = bodies.chat([{"role": "user", "content": "Hello"}], "", 1, 0.0, 1.0, 0, (),
                       top_logprobs)
    try:
        out = await client.post("/chat/completions", body)
    except HTTPStatus as exc:
        if exc.status in (404, 405, 501):
            raise ServerError(f"the server at {client.url} offers neither /v1/completions nor "
                              "/v1/chat/completions; check --server") from None
        raise probe_error(client.url, exc) from None
    ch = wire.first_choice(out) or {}
    if not wire.sampled_logprobs(ch.get("logprobs")):
        raise ServerError(f"the server at {client.url} returns no log-probabilities, which "
                          f"rmjudge needs; enable them ({LOGPROB_FLAGS})")
    return "chat"


async def probe_native(client: ServerClient, bodies: RequestBodies, top_logprobs: int) -> bool:
    """Whether llama-server's own `/completion` answers a sample with the ids of every token it
    generated (`return_tokens`) and log-probabilities in the `/v1` form (`logprob`,
    `top_logprobs`); older builds answer without them (or with probabilities), and then samples
    go to /v1/completions. Asked once, with a one-token request."""
    body = bodies.native_completion("Hello", 1, 0.0, 1.0, 0, (), top_logprobs)
    try:
        out = wire.from_native(await client.post_native(body))
    except (HTTPStatus, Unreachable, wire.ProtocolError):
        return False
    ch = out["choices"][0]
    if not isinstance(ch.get("tokens"), list) or len(ch["tokens"]) != 1:
        return False  # no ids (a build without `return_tokens`)
    try:
        return (wire.sampled_ids(ch) is not None and bool(wire.sampled_logprobs(ch["logprobs"]))
                and len(wire.top_at(ch["logprobs"], 0)) >= 2)
    except wire.ProtocolError:
        return False


def probe_error(url: str, exc: HTTPStatus) -> ServerError:
    if exc.status in (401, 403):
        return ServerError(f"the server at {url} refused the request (HTTP "
                           f"{exc.status}); set {API_KEY_ENV} to its API key")
    if "logprob" in exc.message.lower() or "logits_all" in exc.message:
        return ServerError(f"the server at {url} does not give log-probabilities "
                           f"({exc.message}); enable them ({LOGPROB_FLAGS})")
    return ServerError(f"the server at {url} rejected a test request (HTTP "
                       f"{exc.status}: {exc.message})")


class ServedPrompts:
    """The prompts of a served model: its chat `template` (None when the server renders),
    the local `tokenizer` of the served GGUF (or None), the control strings that data text
    must not carry (`neutralize`), and `encoding`, once chosen."""

    def __init__(self, client: ServerClient, template, tokenizer):
        self.client = client
        self.template = template
        self.tokenizer = tokenizer
        strings = template_strings(template.source if template else None,
                                   template.bos if template else "",
                                   template.eos if template else "")
        if tokenizer is not None:
            strings |= {t for t in (tokenizer.piece(i, special=True)
                                    for i in tokenizer.special_tokens())
                        if looks_like_control(t)}
        self.strings = strings
        # breaks control strings in data sent as text (and in chat messages)
        self.neutralize = Neutralizer(strings)
        self.encoding: str | None = None

    async def choose_encoding(self, endpoint: str, flavor: str, strict: bool) -> str:
        """How prompts go to the server: token ids where it takes them and rmjudge can
        tokenize as its model does (the served GGUF's vocabulary, or llama-server's /tokenize
        with special-token parsing off for data), so that control-token strings inside the data
        stay text as in the in-process engine; else text with those strings broken
        (servers/control_text.py)."""
        self.encoding = await self._choose(endpoint, flavor, strict)
        return self.encoding

    async def _choose(self, endpoint: str, flavor: str, strict: bool) -> str:
        if strict:
            return openai_chat.ENCODING
        if endpoint != "completions" or flavor not in TOKEN_ID_FLAVORS:
            return ENCODING_TEXT
        if self.tokenizer is not None:
            return ENCODING_IDS
        if flavor == "llama-server" and await self.tokenize_keeps_data_apart():
            return ENCODING_IDS
        return ENCODING_TEXT

    async def tokenize_keeps_data_apart(self) -> bool:
        """Whether llama-server's /tokenize honours parse_special (older ones ignore it)."""
        probe = next(iter(sorted(self.strings, key=len, reverse=True)), None)
        if probe is None:
            return False
        try:
            special = await self.client.server_tokens(probe, special=True, add_bos=False)
            plain = await self.client.server_tokens(probe, special=False, add_bos=False)
        except (HTTPStatus, wire.ProtocolError):
            return False
        return len(special) == 1 and len(plain) > 1

    async def tokens(self, text: str, special: bool, add_bos: bool) -> list[int]:
        if self.tokenizer is not None:
            return self.tokenizer.tokenize(text, add_bos=add_bos, special=special)
        return await self.client.server_tokens(text, special, add_bos)

    async def prompt(self, req: GenRequest) -> str | list[int]:
        """What /v1/completions is sent for a request (see `choose_encoding`)."""
        try:
            pieces = self.template.segments(req.messages, req.assistant_prefix)  # type: ignore
        except TemplateError as exc:
            raise ModelError(str(exc)) from None
        if self.encoding != ENCODING_IDS:
            return "".join(t if is_template else self.neutralize(t) for t, is_template in pieces)
        tok, tmpl = self.tokenizer, self.template
        bos = tok.bos if tok is not None else tmpl.bos  # type: ignore[union-attr]
        ids: list[int] = []
        for i, (text, is_template) in enumerate(pieces):
            add_bos = i == 0 and not (bos and text.startswith(bos))
            ids += await self.tokens(text, special=is_template, add_bos=add_bos)
        return ids

    async def extend(self, prompt: str | list[int], tail: str) -> str | list[int]:
        """The prompt followed by generated text (data: never control tokens)."""
        if isinstance(prompt, list):
            return prompt + await self.tokens(tail, special=False, add_bos=False)
        return prompt + self.neutralize(tail)
