"""How the batched llama.cpp engine turns requests into sequences and groups.

Each request is tokenized and split into its `n` samples, one `Seq` each, with its own
generator seeded from (request seed, sample index). The N samples of one request (identical
prompts) and the requests with the same `share_key` (the N-1 reflections of a pair and order)
form a `Group`: its common token prefix is evaluated once on the group's first sequence and
copied to the others' streams (`rmjudge.engine.scheduler`). A prompt that cannot fit the
context is answered with an error at once, before it is tokenized when its length alone
proves it too long.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rmjudge.core.types import GenRequest
from rmjudge.engine.budget import prompt_room, tokens_needed, too_long_reason
from rmjudge.engine.sequences import MIN_CHUNK, Group, Seq
from rmjudge.engine.vocab import Tokenizer, common_prefix


class Planner:
    """Tokenizes requests and groups their sequences for a context of `n_seq_ctx` tokens per
    sequence and `parallel` sequence slots."""

    def __init__(self, tok: Tokenizer, n_seq_ctx: int, parallel: int):
        self.tok = tok
        self.n_seq_ctx = n_seq_ctx
        self.parallel = parallel

    def plan(self, requests: list[GenRequest]) -> tuple[list[Group], list[list[Seq]]]:
        """Tokenize, group by shared prefix, and check every sequence fits the context.

        A group is every sequence with the same `share_key` (or of the same request); its
        shared prefix is their longest common prefix less `MIN_CHUNK` tokens, so each sequence
        evaluates at least two tokens of its own. Groups larger than `--parallel` run in
        several waves, each evaluating the same prefix: the numbers do not depend on
        `--parallel`."""
        per_req: list[list[Seq]] = []
        keyed: dict[Any, list[tuple[list[int], Seq]]] = {}
        order: list[Any] = []
        for i, req in enumerate(requests):
            toks, error = self.prompt_or_error(req)
            seqs = []
            for s in range(req.n):
                rng = None if req.temperature <= 0 else np.random.default_rng([req.seed & (2**63 - 1), s])
                seq = Seq(s, req, feed=list(toks), pos=0, rng=rng)
                seq.need = tokens_needed(len(toks), req.max_tokens)
                if error:
                    seq.error = error
                    seq.phase = "done"
                    seq.finish = "error"
                seqs.append(seq)
            per_req.append(seqs)
            key = req.share_key if req.share_key is not None else ("__req", i)
            if key not in keyed:
                keyed[key] = []
                order.append(key)
            keyed[key].extend((toks, s) for s in seqs if s.error is None)
        groups: list[Group] = []
        for key in order:
            members = keyed[key]
            if not members:
                continue
            lcp = common_prefix([t for t, _ in members]) - MIN_CHUNK if len(members) > 1 else 0
            if lcp < MIN_CHUNK:
                lcp = 0
            for start in range(0, len(members), self.parallel):
                chunk = members[start:start + self.parallel]
                shared = lcp if len(chunk) > 1 else 0
                for toks, s in chunk:
                    s.feed = toks[shared:]
                    s.pos = shared
                groups.append(Group(chunk[0][0][:shared], [s for _, s in chunk]))
        return groups, per_req

    def _too_long(self, n: str, req: GenRequest) -> str:
        return too_long_reason(n, req.max_tokens, self.n_seq_ctx)

    def prompt_or_error(self, req: GenRequest) -> tuple[list[int], str | None]:
        """The prompt's tokens, or an error when it cannot fit the context. A prompt whose
        length alone proves it too long is rejected before it is tokenized, so a huge row
        costs no memory. That bound (the text's characters over the longest token's bytes)
        never exceeds the characters, so it is computed only for a text with more characters
        than the room: finding the longest token reads the whole vocabulary (an engine's first
        request on SmolLM2's 49,152 tokens: 0.55 s of CPU instead of 0.61, measured)."""
        room = prompt_room(self.n_seq_ctx, req.max_tokens)
        chars = sum(len(m["content"]) for m in req.messages) + len(req.assistant_prefix)
        bound = self.tok.min_prompt_tokens(req) if chars > room else 0
        if bound > room:
            return [], self._too_long(f"at least {bound}", req)
        toks = self.tok.prompt_tokens(req)
        if len(toks) > room:
            return [], self._too_long(str(len(toks)), req)
        return toks, None
