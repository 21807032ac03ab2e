"""ReflectRM two-stage inference and the both-order check, as pure logic over an Engine.

Per pair and order (reflectrm.md §2): N rollouts at temperature T; confidence = mean of the
lowest 10% token log-probabilities; anchor = most confident usable rollout; every other usable
rollout is compared with the anchor in self-reflection (critiques in a seeded random order,
greedy); rollouts that win form W; verdict = majority of W, with the anchor added when W is
empty or tied. When every usable prediction agrees the verdict is already fixed, so stage 2 is
skipped (the "shortcut", recorded). The two orders are combined in `combine_orders` (§3).

Usable (`usable`): a generation with a verdict of its own (`verdict_source = generated`) that
did not stop at the token limit (`finish_reason != length`). Nothing else is ever an anchor, a
critique, a voter in the normal path, or a reflection that decides W. Forced verdicts (read
from the logits, only with `--forced`) are a fallback: when no rollout of an order is usable,
the order's verdict is the majority of its forced verdicts, the most confident forced rollout
breaking a tie (recorded as the anchor), without self-reflection (`voting_pool`). Reflections
never ask for a forced verdict.

One `PairOrderJob` per pair and order asks for its rollouts (`rollout_request`), then for its
reflections (`reflection_requests`); the driver (`rmjudge.judging.judge`) keeps many jobs in flight, so
the engine can fill its batch across pairs.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Iterable

from rmjudge.core.seeds import derive_seed
from rmjudge import prompts
from rmjudge.prompts.choice import format_of
from rmjudge.prompts.formats import TIE, JudgeFormat, lowest_share_mean
from rmjudge.prompts.native_format import Reflection, reflectrm_reflection
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import Generation, GenRequest, Pair


def confidence(logprobs: Iterable[float], fraction: float = 0.1) -> float | None:
    """Mean of the lowest `fraction` of token log-probabilities (at least one token)."""
    return lowest_share_mean(list(logprobs), fraction)


@dataclass
class Sample:
    """One generation, as stored in the `samples` table."""

    pair_id: str
    order: str
    stage: str  # 'rollout' | 'reflection'
    idx: int
    text: str
    prediction: int | None  # 1 | 2 (the position in the prompt), 0 a tie (TIE), None: none
    verdict_source: str | None  # 'generated' | 'forced' | None (no verdict)
    tokens: int
    finish_reason: str
    confidence: float | None = None
    is_anchor: bool = False
    reflection_of: int | None = None
    reflection_slot: int | None = None  # slot (1|2) of the judged rollout's critique
    won_reflection: bool | None = None
    p_first: float | None = None  # forced verdict: probability of "1"


@dataclass
class OrderResult:
    order: str
    prediction: int | None  # 1 | 2 in this order's numbering; None: no rollout parsed
    shortcut: bool
    vote_share_1: float | None  # share of the final voting group that chose 1
    confidence: float | None  # mean confidence of the voters for the prediction
    rollouts: list[Sample] = field(default_factory=list)
    reflections: list[Sample] = field(default_factory=list)
    n_rollouts: int = 0

    @property
    def samples(self) -> list[Sample]:
        return self.rollouts + self.reflections


def order_responses(pair: Pair, order: str) -> tuple[str, str]:
    return (pair.response_a, pair.response_b) if order == "ab" else (pair.response_b, pair.response_a)


def to_letter(order: str, prediction: int | None) -> str | None:
    """Map a prediction in the prompt's numbering to 'A'/'B' ('tie' for TIE)."""
    if prediction is None:
        return None
    if prediction == TIE:
        return "tie"
    first_is_a = order == "ab"
    return "A" if (prediction == 1) == first_is_a else "B"


def usable(s: Sample) -> bool:
    """The generation wrote its own verdict and was not cut at the token limit."""
    return s.verdict_source == "generated" and s.finish_reason != "length"


def voting_pool(rollouts: list[Sample]) -> tuple[list[Sample], bool]:
    """The rollouts of one order that take part, and whether they are the forced fallback
    (no usable rollout: the rollouts with a forced verdict, which exist only with --forced)."""
    ok = [r for r in rollouts if usable(r)]
    if ok:
        return ok, False
    return [r for r in rollouts if r.verdict_source == "forced" and r.prediction is not None], True


def _sample_from(gen: Generation, read, **kw) -> Sample:
    """A Sample of `gen`, its verdict read by `read(text)` (1 | 2 | TIE | None), else forced
    from the logits where the engine read them."""
    pred = read(gen.text)
    source = "generated" if pred is not None else None
    p_first = None
    if pred is None and gen.forced_probs is not None:
        p_first = gen.forced_probs[0]
        pred = 1 if gen.forced_probs[0] >= gen.forced_probs[1] else 2
        source = "forced"
    return Sample(
        text=gen.text,
        prediction=pred,
        verdict_source=source,
        tokens=gen.n_tokens,
        finish_reason=gen.finish_reason,
        p_first=p_first,
        **kw,
    )


def _prediction(fmt: JudgeFormat, text: str) -> int | None:
    verdict = fmt.parse(text)
    return None if verdict is None else verdict.prediction


class PairOrderJob:
    """The two-stage run of one pair in one order."""

    def __init__(self, pair: Pair, order: str, settings: JudgeSettings, suffix: str,
                 style: prompts.PromptStyle = prompts.DEFAULT_STYLE):
        self.pair = pair
        self.style = style
        self.fmt = format_of(style)
        # the format's own critique comparison; ReflectRM's for one without (--reflect: an
        # ablation); the settings come resolved (runspec.resolve) or say so themselves
        self.reflection: Reflection = self.fmt.reflection or reflectrm_reflection()
        self.order = order
        self.s = settings
        self.suffix = suffix
        self.r1, self.r2 = order_responses(pair, order)
        self.rollouts: list[Sample] = []
        self.reflections: list[Sample] = []
        self.shortcut = False
        self._refl_plan: list[tuple[int, int]] = []  # (rollout idx, slot of its critique)

    # -- stage 1 -------------------------------------------------------------------------
    def rollout_request(self, n: int, start: int = 0) -> GenRequest:
        return GenRequest(
            messages=self.fmt.pref_messages(self.pair.messages, self.r1, self.r2, self.suffix,
                                            self.style),
            n=n,
            assistant_prefix=self.fmt.assistant_prefix,
            temperature=self.s.temperature,
            top_p=self.s.top_p,
            seed=derive_seed(self.s.seed, self.pair.id, self.order, "rollout", start),
            max_tokens=self.s.max_tokens,
            stop=self.fmt.stop,
            force=self.fmt.force_spec() if self.s.forced else None,
            share_key=(self.pair.id, self.order, "rollout"),
        )

    def add_rollouts(self, gens: list[Generation]) -> None:
        for gen in gens:
            smp = _sample_from(
                gen, lambda text: _prediction(self.fmt, text), pair_id=self.pair.id,
                order=self.order, stage="rollout", idx=len(self.rollouts),
            )
            lps = list(gen.token_logprobs)
            if smp.verdict_source == "forced" and gen.forced_logprob is not None:
                lps.append(gen.forced_logprob)
            smp.confidence = self.fmt.confidence(lps, gen.token_ends, gen.text,
                                                 self.s.confidence_fraction)
            self.rollouts.append(smp)

    @property
    def parsed(self) -> list[Sample]:
        """The usable rollouts (a verdict of their own, not cut at the token limit)."""
        return [r for r in self.rollouts if usable(r)]

    def anchor(self) -> Sample | None:
        pool, _ = voting_pool(self.rollouts)
        if not pool:
            return None
        if self.s.ablation == "random-anchor":  # the paper's ablation: any rollout that takes part
            rng = random.Random(derive_seed(self.s.seed, self.pair.id, self.order, "random-anchor"))
            return pool[rng.randrange(len(pool))]
        # Highest confidence; ties go to the lowest index (stable, reproducible).
        return max(pool, key=lambda r: (r.confidence if r.confidence is not None else -math.inf,
                                        -r.idx))

    # -- stage 2 -------------------------------------------------------------------------
    def reflection_requests(self) -> list[GenRequest]:
        """Plan stage 2; empty when it is not needed (shortcut, no reflection, < 2 usable, or
        the forced fallback)."""
        anchor = self.anchor()
        for r in self.rollouts:
            r.is_anchor = anchor is not None and r.idx == anchor.idx
        parsed = self.parsed
        if anchor is None or not self.s.reflect or not usable(anchor):
            return []
        if len({r.prediction for r in parsed}) <= 1 and self.s.shortcut:
            self.shortcut = True
            return []
        rng = random.Random(derive_seed(self.s.seed, self.pair.id, self.order, "reflect"))
        refl = self.reflection
        a_anchor = self.fmt.critique(anchor.text)
        reqs = []
        self._refl_plan = []
        for r in parsed:
            if r.idx == anchor.idx:
                continue
            slot = 1 if rng.random() < 0.5 else 2
            a_i = self.fmt.critique(r.text)
            c1, c2 = (a_i, a_anchor) if slot == 1 else (a_anchor, a_i)
            self._refl_plan.append((r.idx, slot))
            reqs.append(
                GenRequest(
                    messages=refl.messages(
                        self.pair.messages, self.r1, self.r2, c1, c2, self.suffix, self.style
                    ),
                    n=1,
                    assistant_prefix=refl.assistant_prefix,
                    temperature=0.0,
                    seed=0,
                    max_tokens=self.s.max_tokens,
                    stop=refl.stop,
                    force=None,  # a reflection decides W only with a verdict of its own
                    share_key=(self.pair.id, self.order, "reflection"),
                )
            )
        return reqs

    def add_reflections(self, gens: list[Generation]) -> None:
        for (ridx, slot), gen in zip(self._refl_plan, gens, strict=True):
            smp = _sample_from(
                gen, self.reflection.parse, pair_id=self.pair.id, order=self.order,
                stage="reflection", idx=len(self.reflections), reflection_of=ridx,
                reflection_slot=slot,
            )
            self.reflections.append(smp)
            won = smp.prediction == slot if usable(smp) else None
            self.rollouts[ridx].won_reflection = won
        if self.s.ablation == "random-group":
            self.random_winner_group()

    def random_winner_group(self) -> None:
        """The paper's ablation: as many winners as self-reflection chose, drawn at random
        (seeded per pair and order) from the rollouts compared with the anchor;
        `won_reflection` then marks that random group, and the reflections keep their own
        predictions."""
        judged = [ridx for ridx, _ in self._refl_plan]
        k = sum(self.rollouts[i].won_reflection is True for i in judged)
        rng = random.Random(derive_seed(self.s.seed, self.pair.id, self.order, "random-group"))
        group = set(rng.sample(judged, k))
        for i in judged:
            self.rollouts[i].won_reflection = i in group

    # -- verdict ---------------------------------------------------------------------------
    def result(self) -> OrderResult:
        pred, share, conf = vote(self.rollouts, reflected=self.s.reflect and not self.shortcut)
        return OrderResult(
            order=self.order, prediction=pred, shortcut=self.shortcut, vote_share_1=share,
            confidence=conf, rollouts=self.rollouts, reflections=self.reflections,
            n_rollouts=len(self.rollouts),
        )


def vote(rollouts: list[Sample], reflected: bool) -> tuple[int | None, float | None, float | None]:
    """Final prediction of one order from its rollout rows alone.

    The voters are the usable rollouts, or the forced fallback (`voting_pool`), which never
    reflects. reflected=False (plain majority, shortcut, fallback): majority over the voters,
    the anchor breaking a tie. reflected=True: majority over the winner group W, with the anchor
    added when W is empty or tied. Returns (prediction, share of voters for 1, mean confidence
    of the voters for the prediction).
    """
    parsed, fallback = voting_pool(rollouts)
    anchor = next((r for r in parsed if r.is_anchor), None)
    if not parsed or anchor is None:
        return None, None, None
    reflected = reflected and not fallback
    group = [r for r in parsed if r.won_reflection] if reflected else list(parsed)

    counts = _tally(group)
    pred = _single_best(counts)
    if pred is None and (reflected or anchor not in group):  # empty or tied: the anchor joins
        group = group + [anchor]
        counts = _tally(group)
        pred = _single_best(counts)
    if pred is None:  # still tied (plain majority): the anchor decides, with one vote more
        pred = anchor.prediction
        counts[pred] += 1  # type: ignore[index]
    n1, n2, n0 = counts[1], counts[2], counts[TIE]
    voters = [r for r in group if r.prediction == pred and r.confidence is not None]
    conf = sum(r.confidence for r in voters) / len(voters) if voters else None  # type: ignore[misc]
    return pred, (n1 + n0 / 2) / (n1 + n2 + n0), conf


def _tally(group: list[Sample]) -> dict[int, int]:
    """Votes for 1, for 2 and for a tie (TIE) in `group`."""
    return {p: sum(r.prediction == p for r in group) for p in (1, 2, TIE)}


def _single_best(counts: dict[int, int]) -> int | None:
    """The prediction with strictly the most votes, else None (none, or shared)."""
    top = max(counts.values())
    best = [p for p, n in counts.items() if n == top]
    return best[0] if top > 0 and len(best) == 1 else None


@dataclass
class PairResult:
    pair: Pair
    orders: dict[str, OrderResult]
    verdict: str  # 'A' | 'B' | 'tie' | 'error' | 'dropped'
    consistent: bool | None
    p_a: float | None
    correct: bool | None
    policy: str | None  # the --on-inconsistent policy applied, when the orders disagreed

    def letter(self, order: str) -> str | None:
        o = self.orders.get(order)
        if o is None:
            return None
        return to_letter(order, o.prediction) or "error"


def combine_orders(pair: Pair, results: dict[str, OrderResult], policy: str) -> PairResult:
    """Combine per-order verdicts (reflectrm.md §3) into the pair's verdict."""
    letters = {o: to_letter(o, r.prediction) for o, r in results.items()}
    ok = {o: v for o, v in letters.items() if v is not None}
    shares = []
    for o, r in results.items():
        if r.vote_share_1 is not None:
            shares.append(r.vote_share_1 if o == "ab" else 1.0 - r.vote_share_1)
    p_a = sum(shares) / len(shares) if shares else None
    consistent = None
    applied = None
    if not ok:
        verdict = "error"
    elif len(results) == 1 or len(ok) == 1:
        verdict = next(iter(ok.values()))
    else:
        consistent = ok["ab"] == ok["ba"]
        if consistent:
            verdict = ok["ab"]
        else:
            applied = policy
            if policy == "tie":
                verdict = "tie"
            elif policy == "drop":
                verdict = "dropped"
            else:  # confident: the order whose voters were more confident
                ca = results["ab"].confidence
                cb = results["ba"].confidence
                ca = -math.inf if ca is None else ca
                cb = -math.inf if cb is None else cb
                verdict = ok["ab"] if ca >= cb else ok["ba"]
    correct = None
    if pair.label is not None and verdict in ("A", "B", "tie"):
        correct = verdict == pair.label
    return PairResult(pair, results, verdict, consistent, p_a, correct, applied)
