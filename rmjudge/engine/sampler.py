"""Sampling for the batched llama.cpp engine, on the logits buffer of a decode call.

- sampling runs row by row: log-softmax, then inverse-CDF sampling with a per-sample generator
  seeded from (request seed, sample index); the log-probability of every sampled token under
  the model's distribution is kept for the anchor confidence;
- a generation that ends without a parseable verdict gets its `ForceSpec` continuation fed on
  the same sequence, and the probabilities of the two choices are read from the logits
  (forced verdict) without re-evaluating the prompt.

`Sampler.generations` turns finished sequences into `Generation`s and counts their tokens.
"""

from __future__ import annotations

import numpy as np

from rmjudge.core.types import Generation
from rmjudge.engine.forcing import force_plan, forced_probs
from rmjudge.engine.sequences import Seq
from rmjudge.engine.vocab import Tokenizer


class Sampler:
    """Picks each sequence's next token (or reads its forced choices) from the logits, and ends
    sequences on end-of-generation, stop strings and `max_tokens`."""

    def __init__(self, tok: Tokenizer):
        self.tok = tok
        self.generated = 0  # tokens of the generations handed back so far

    def sample(self, logits: np.ndarray, outputs: list[Seq]) -> None:
        """Sample (or read forced choices) for every sequence that produced logits in the last
        decode call (`logits`: one row each, in order), one row at a time so a row's numbers
        never depend on the other rows.

        exp of the shifted logits gives both the normalizer (log-probs under the model's
        distribution at temperature 1) and, unnormalized, the sampling weights at temperature
        1, so no row is exponentiated twice.
        """
        for row, s in enumerate(outputs):
            shifted = logits[row] - logits[row].max()
            weights = np.exp(shifted)
            lse = float(np.log(weights.sum()))
            if s.phase == "force":
                c1, c2 = s.force_choices  # type: ignore[misc]
                s.forced, s.forced_lp = forced_probs(float(shifted[c1]) - lse,
                                                     float(shifted[c2]) - lse)
                s.phase = "done"
                continue
            tok = self._pick(shifted, weights, s)
            s.phase = "decode"
            if self.tok.is_eog(tok):
                s.finish = "stop"
                self._finish(s, feed_last=None)
                continue
            s.tokens.append(tok)
            s.logprobs.append(float(shifted[tok]) - lse)
            s.out += self.tok.piece_bytes(tok)
            s.ends.append(len(s.out))
            stop = _matched_stop(s.out, s.req.stop)
            if stop is not None:
                del s.out[stop:]
                s.finish = "stop"
                self._finish(s, feed_last=tok)
            elif len(s.tokens) >= s.req.max_tokens:
                s.finish = "length"
                self._finish(s, feed_last=tok)
            else:
                s.feed = [tok]

    @staticmethod
    def _pick(shifted: np.ndarray, weights: np.ndarray, s: Seq) -> int:
        """Greedy, or inverse-CDF sampling with the sequence's own generator (top-p aware)."""
        req = s.req
        if s.rng is None or req.temperature <= 0:
            return int(shifted.argmax())
        p = weights if req.temperature == 1.0 else np.exp(shifted / req.temperature)
        u = s.rng.random()
        if req.top_p < 1.0:
            idx = np.argsort(-p, kind="stable")
            cs = np.cumsum(p[idx])
            cut = int(np.searchsorted(cs, req.top_p * cs[-1])) + 1
            keep = idx[:cut]
            cdf = cs[:cut]
            return int(keep[min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), cut - 1)])
        cdf = np.cumsum(p)
        return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(cdf) - 1)

    def _finish(self, s: Seq, feed_last: int | None) -> None:
        """End a sequence, or continue it with a forced-verdict suffix when it does not parse."""
        force = s.req.force
        if force is not None:
            plan = force_plan(self.tok, force, s.out.decode("utf-8", errors="replace"))
            if plan is not None:
                feed, s.force_choices = plan
                s.feed = ([feed_last] if feed_last is not None else []) + feed
                s.phase = "force"
                return
        s.phase = "done"

    def generations(self, seqs: list[Seq]) -> list[Generation]:
        """The `Generation` of each sequence of a request (an error generation for one that
        could not run); their tokens count towards `generated`."""
        gens = []
        for s in seqs:
            if s.error:
                gens.append(Generation("", [], "error", error=s.error))
                continue
            raw = bytes(s.out)
            text = raw.decode("utf-8", errors="replace")
            gens.append(Generation(
                text=text, token_logprobs=s.logprobs, finish_reason=s.finish,
                forced_probs=s.forced, forced_logprob=s.forced_lp,
                token_ends=_token_ends(raw, text, s.ends)))
            self.generated += len(s.logprobs)
        return gens


def _token_ends(raw: bytes, text: str, ends: list[int]) -> list[int]:
    """Where each token ends in `text` (UTF-8 bytes of the decoded text, which replaced any
    invalid byte of `raw` by U+FFFD): the byte offsets themselves when `raw` was valid."""
    ends = [min(e, len(raw)) for e in ends]
    if text.encode() == raw:
        return ends
    return [len(raw[:e].decode("utf-8", errors="replace").encode()) for e in ends]


def _matched_stop(out: bytearray, stops: tuple[str, ...]) -> int | None:
    """End index (exclusive) of the text to keep when a stop string occurs, else None."""
    for stop in stops:
        b = stop.encode()
        i = out.find(b, max(0, len(out) - len(b) - 16))
        if i >= 0:
            return i + len(b)
    return None
