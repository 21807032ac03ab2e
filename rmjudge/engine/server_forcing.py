"""Forced verdicts through `--server` (engine/server.py is the engine): when a generation does
not parse, a one-token request with the top log-probabilities is sent for prompt + text +
`force.continuation(text)`, and the two choices' probabilities are read from it.

The choices' shared start (" " of " 1"/" 2") may be a token of its own; then the verdict is
read one token later. With token-id prompts the tokenizer says which (as
`engine.forcing.force_plan` decides in-process), so the likely read goes first and the other is
only a fallback. Under `--server-api openai-chat` the verdict comes from a verdict-only chat
request (servers/openai_chat.py). A request the server refuses leaves the sample unparsed.
"""

from __future__ import annotations

import os

from rmjudge.servers import openai_chat
from rmjudge.servers import responses as wire
from rmjudge.engine.forcing import forced_probs
from rmjudge.servers.bodies import RequestBodies
from rmjudge.servers.client import HTTPStatus, ServerClient
from rmjudge.servers.prompts import ServedPrompts
from rmjudge.engine.vocab import common_prefix
from rmjudge.core.types import Generation, GenRequest


class ServerForcing:
    """Reads forced verdicts for one served model (`top_logprobs`: `--server`'s top-k)."""

    def __init__(self, client: ServerClient, bodies: RequestBodies, prompts: ServedPrompts,
                 top_logprobs: int):
        self.client = client
        self.bodies = bodies
        self.prompts = prompts
        self.top_logprobs = top_logprobs
        self.head_alone: dict[tuple[str, str, str], bool] = {}  # see `choice_head_alone`

    async def force(self, req: GenRequest, prompt: str | list[int] | None, text: str, cont: str,
                    gen: Generation, slot: int | None = None) -> None:
        """Probabilities of the two choices as the next token after prompt + text + cont, set
        on `gen` (left unset when none can be read); asked of llama-server's `slot` when
        given (the one that generated `text`)."""
        c1, c2 = req.force.choices  # type: ignore[union-attr]
        if self.bodies.strict:
            msgs = openai_chat.verdict_messages(list(req.messages), req.assistant_prefix, text,
                                                cont)
            found = openai_chat.choice_logprobs(await self.next_token(req, None, "", msgs),
                                                (c1, c2))
            if found is not None:
                set_forced(gen, *found)
            return
        head = os.path.commonprefix([c1, c2])
        reads = [("", c1, c2)] + ([(head, c1[len(head):], c2[len(head):])] if head else [])
        if head and await self.choice_head_alone(prompt, cont, c1, c2, head):
            reads.reverse()
        for extra, a, b in reads:
            found = wire.choice_logprobs(await self.next_token(req, prompt, text + cont + extra,
                                                               slot=slot), a, b)
            if found is not None:
                set_forced(gen, *found)
                return

    async def choice_head_alone(self, prompt: str | list[int] | None, cont: str, c1: str,
                                c2: str, head: str) -> bool:
        """Whether, after `cont`, the choices' shared start `head` is a token of its own (the
        tokens of cont + c1 and cont + c2 part after those of cont + head), as
        `engine.forcing.force_plan` decides in-process; asked once per continuation, and only
        when prompts go as token ids (a tokenizer is at hand)."""
        if not isinstance(prompt, list):
            return False
        key = (cont, c1, c2)
        if key not in self.head_alone:
            try:
                t1, t2, th = [await self.prompts.tokens(cont + t, special=False, add_bos=False)
                              for t in (c1, c2, head)]
            except (HTTPStatus, wire.ProtocolError):
                return False
            self.head_alone[key] = common_prefix([t1, t2]) == len(th) and t1[:len(th)] == th
        return self.head_alone[key]

    async def next_token(self, req: GenRequest, prompt: str | list[int] | None,
                         tail: str, messages: list | None = None,
                         slot: int | None = None) -> dict[str, float]:
        """The top log-probabilities of the token after the prompt (or the chat) + `tail`."""
        k = self.top_logprobs
        try:
            if messages is not None:  # a verdict-only chat request (openai-chat)
                body = self.bodies.chat(messages, "", 1, 0.0, 1.0, 0, (), k)
                out = await self.client.post("/chat/completions", body)
            elif prompt is not None:
                body = self.bodies.completion(await self.prompts.extend(prompt, tail), 1, 0.0,
                                              1.0, 0, (), k)
                if slot is not None:
                    body["id_slot"] = slot
                out = await self.client.post("/completions", body)
            else:
                body = self.bodies.chat(list(req.messages), req.assistant_prefix + tail, 1, 0.0,
                                        1.0, 0, (), k)
                out = await self.client.post("/chat/completions", body)
        except HTTPStatus:
            return {}  # no forced verdict for this sample; the sample stays unparsed
        ch = wire.first_choice(out) or {}
        return wire.top_at(ch.get("logprobs"), 0)


def set_forced(gen: Generation, a: float, b: float) -> None:
    gen.forced_probs, gen.forced_logprob = forced_probs(a, b)
