"""Forced verdicts on a local engine: the tokens that continue an unparsed generation up to its
verdict, the two choice tokens to read there (`force_plan`), and their probabilities
(`forced_probs`). The continuation text itself is prompt knowledge (`ForceSpec`, from
`rmjudge.prompts`); the KV cells kept for it are `rmjudge.engine.budget.FORCE_MARGIN`."""

from __future__ import annotations

import math

from rmjudge.engine.vocab import Tokenizer, common_prefix
from rmjudge.core.types import ForceSpec


def force_plan(tok: Tokenizer, force: ForceSpec, text: str) -> tuple[list[int], tuple[int, int]] | None:
    """Tokens to feed after `text` and the two choice tokens to read, for a forced verdict;
    None when the text parses or the choices share their tokens. Tokenized as data (no
    special tokens), like the generated text it continues."""
    cont = force.continuation(text)
    if cont is None:
        return None
    t1 = tok.encode(cont + force.choices[0], special=False)
    t2 = tok.encode(cont + force.choices[1], special=False)
    k = common_prefix([t1, t2])
    if not 0 < k < min(len(t1), len(t2)):
        return None
    return t1[:k], (t1[k], t2[k])


def forced_probs(a: float, b: float) -> tuple[tuple[float, float], float]:
    """The two choices' probabilities renormalized over the pair, and the larger log-prob."""
    m = max(a, b)
    e1, e2 = math.exp(a - m), math.exp(b - m)
    return (e1 / (e1 + e2), e2 / (e1 + e2)), m
