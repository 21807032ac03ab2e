"""Every branch of the ReflectRM protocol, on the scripted engine."""

from __future__ import annotations

import pytest
from helpers import critique_slot, engine, first_slot_response, pair, pref, refl, unparsed

from rmjudge.engine.fake import ScriptedEngine
from rmjudge.judging.judge import Failure, Judge
from rmjudge.judging.protocol import confidence, vote
from rmjudge.core.seeds import derive_seed
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import Generation


def settings(**kw) -> JudgeSettings:
    base = dict(samples=4, orders="ab", seed=7)
    base.update(kw)
    return JudgeSettings(**base)


def winner_by_analysis(winners: set[str]):
    """Reflection script: the critique whose analysis is in `winners` is preferred."""

    def reflect(req, order):
        body = req.messages[-1]["content"]
        c1 = body.split("### Critique 1\n", 1)[1].split("\n\n### Critique 2", 1)[0]
        return refl(1 if c1 in winners else 2)

    return reflect


def test_confidence_is_mean_of_lowest_ten_percent():
    lps = [-0.1] * 18 + [-2.0, -4.0]  # 20 tokens -> lowest 2
    assert confidence(lps) == pytest.approx(-3.0)
    assert confidence([-0.3]) == pytest.approx(-0.3)  # at least one token
    assert confidence([]) is None


def test_anchor_is_most_confident_parsed_rollout():
    eng = engine({"ab": [pref(1, -0.9, "r0"), pref(2, -0.1, "r1"), pref(2, -0.5, "r2"),
                         unparsed(-0.01)]},
                 reflect=winner_by_analysis(set()))
    res = Judge(eng, settings(forced=False)).judge(pair())
    rows = res.orders["ab"].rollouts
    assert [r.is_anchor for r in rows] == [False, True, False, False]
    # the unparsed rollout has the best confidence but takes no part
    assert rows[3].prediction is None and rows[3].verdict_source is None


def test_winner_group_majority_decides():
    # anchor r1 predicts 2; r0 and r2 (both predicting 1) beat it in reflection -> 1 wins
    eng = engine({"ab": [pref(1, -0.9, "r0"), pref(2, -0.1, "r1"), pref(1, -0.5, "r2"),
                         pref(2, -0.6, "r3")]},
                 reflect=winner_by_analysis({"r0", "r2"}))
    res = Judge(eng, settings()).judge(pair())
    o = res.orders["ab"]
    assert o.prediction == 1 and not o.shortcut
    assert [r.won_reflection for r in o.rollouts] == [True, None, True, False]
    assert len(o.reflections) == 3
    assert res.verdict == "A" and res.correct is True


def test_empty_winner_group_falls_back_to_anchor():
    eng = engine({"ab": [pref(1, -0.9, "r0"), pref(2, -0.1, "r1"), pref(1, -0.5, "r2"),
                         pref(1, -0.6, "r3")]},
                 reflect=winner_by_analysis({"r1"}))  # the anchor always wins
    res = Judge(eng, settings()).judge(pair())
    # majority voting would say 1; ReflectRM keeps the anchor's 2
    assert res.orders["ab"].prediction == 2
    assert res.verdict == "B"


def test_tied_winner_group_adds_the_anchor():
    eng = engine({"ab": [pref(1, -0.9, "r0"), pref(2, -0.1, "r1"), pref(2, -0.5, "r2"),
                         pref(1, -0.6, "r3")]},
                 reflect=winner_by_analysis({"r0", "r2"}))  # W = {r0: 1, r2: 2}: tie
    res = Judge(eng, settings()).judge(pair())
    assert res.orders["ab"].prediction == 2  # anchor r1 (2) breaks it
    assert res.orders["ab"].vote_share_1 == pytest.approx(1 / 3)


def test_shortcut_skips_reflection_and_matches_full_run():
    outs = [pref(2, -0.2 * i, f"r{i}") for i in range(4)]
    eng = engine({"ab": list(outs)}, reflect=winner_by_analysis({"r3"}))
    short = Judge(eng, settings()).judge(pair())
    assert short.orders["ab"].shortcut is True
    assert all(len(call) == 1 for call in eng.calls)  # stage 1 only
    eng2 = engine({"ab": list(outs)}, reflect=winner_by_analysis({"r3"}))
    full = Judge(eng2, settings(shortcut=False)).judge(pair())
    assert full.orders["ab"].shortcut is False and len(full.orders["ab"].reflections) == 3
    assert full.verdict == short.verdict == "B"


def test_no_reflect_is_plain_majority():
    eng = engine({"ab": [pref(1, -0.9), pref(2, -0.1), pref(1, -0.5), pref(1, -0.6)]})
    res = Judge(eng, settings(reflect=False)).judge(pair())
    assert res.orders["ab"].prediction == 1
    assert len(eng.calls) == 1


def test_parse_failures_never_become_verdicts():
    eng = engine({"ab": [unparsed(), unparsed(), unparsed(), unparsed()]})
    res = Judge(eng, settings(forced=False)).judge(pair())
    assert res.verdict == "error" and res.correct is None and res.p_a is None
    assert all(r.prediction is None and r.verdict_source is None for r in res.orders["ab"].rollouts)


def test_forced_verdict_is_recorded_as_forced():
    eng = engine({"ab": [unparsed(), unparsed(), unparsed(), pref(1, -2.0)]},
                 reflect=winner_by_analysis(set()), force=lambda req, i, text: (0.2, 0.8))
    res = Judge(eng, settings(forced=True)).judge(pair())
    rows = res.orders["ab"].rollouts
    assert [r.verdict_source for r in rows] == ["forced", "forced", "forced", "generated"]
    assert [r.prediction for r in rows] == [2, 2, 2, 1]
    assert rows[0].p_first == pytest.approx(0.2)
    # the forced choice's log-prob (log 0.8) enters the confidence
    assert rows[0].confidence < -0.1
    # one rollout wrote its own verdict, so the three forced ones (cut at the token limit)
    # take no part: it is the anchor and decides alone, without self-reflection
    assert [r.is_anchor for r in rows] == [False, False, False, True]
    assert res.orders["ab"].prediction == 1 and len(eng.calls) == 1


def test_order_mapping_and_consistency():
    # ab: slot 1 = A, predicts 1 -> A. ba: slot 1 = B, predicts 2 -> A. Consistent.
    eng = engine({"ab": [pref(1)] * 4, "ba": [pref(2)] * 4})
    res = Judge(eng, settings(orders="both")).judge(pair(label="A"))
    assert (res.letter("ab"), res.letter("ba"), res.verdict) == ("A", "A", "A")
    assert res.consistent is True and res.p_a == pytest.approx(1.0)
    # the (B, A) prompt really shows B first
    ba_call = [r for r in eng.calls[0] if r.share_key[1] == "ba"][0]
    assert first_slot_response(ba_call) == "bad answer"


@pytest.mark.parametrize("policy,expected", [("tie", "tie"), ("drop", "dropped"),
                                             ("confident", "B")])
def test_inconsistent_orders_follow_the_policy(policy, expected):
    # ab says A (pred 1) with low confidence; ba says B (pred 1 = B) with high confidence
    eng = engine({"ab": [pref(1, -3.0)] * 4, "ba": [pref(1, -0.1)] * 4})
    res = Judge(eng, settings(orders="both", on_inconsistent=policy)).judge(pair(label="A"))
    assert res.consistent is False and res.policy == policy
    assert res.verdict == expected
    assert res.correct is {"tie": False, "dropped": None, "B": False}[expected]


def test_one_order_failing_keeps_the_other():
    eng = engine({"ab": [pref(1)] * 4, "ba": [unparsed()] * 4})
    res = Judge(eng, settings(orders="both", forced=False)).judge(pair())
    assert res.letter("ba") == "error" and res.verdict == "A" and res.consistent is None


def test_reflection_critique_order_is_seeded_and_recorded():
    seen = []

    def reflect(req, order):
        seen.append(req)
        return refl(1)

    outs = [pref(1, -0.1, "r0")] + [pref(2, -0.5 - i, f"r{i + 1}") for i in range(7)]
    eng = engine({"ab": list(outs)}, reflect=reflect)
    res = Judge(eng, settings(samples=8)).judge(pair())
    slots = [r.reflection_slot for r in res.orders["ab"].reflections]
    assert set(slots) == {1, 2}  # both placements occur (seeded shuffle)
    for req, smp in zip(seen, res.orders["ab"].reflections):
        assert critique_slot(req, f"r{smp.reflection_of}") == smp.reflection_slot
        assert smp.won_reflection is None  # stored on the rollout row
        assert res.orders["ab"].rollouts[smp.reflection_of].won_reflection == (smp.reflection_slot == 1)
    # same seed, same pair -> same placements
    eng2 = engine({"ab": list(outs)}, reflect=lambda req, order: refl(1))
    res2 = Judge(eng2, settings(samples=8)).judge(pair())
    assert [r.reflection_slot for r in res2.orders["ab"].reflections] == slots


def test_pair_randomness_depends_on_id_not_position():
    assert derive_seed(1, "x", "ab", "rollout", 0) == derive_seed(1, "x", "ab", "rollout", 0)
    assert derive_seed(1, "x", "ab", "rollout", 0) != derive_seed(1, "y", "ab", "rollout", 0)
    assert derive_seed(1, "x", "ab", "rollout", 0) != derive_seed(2, "x", "ab", "rollout", 0)


def test_driver_pipelines_many_pairs_and_reports_failures():
    def respond(req, i):
        pid = req.share_key[0]
        if pid == "bad":
            return Generation("", [], "error", error="too long for the context")
        if req.share_key[2] == "rollout":
            return pref(1 if i % 2 else 2, -0.1 * (i + 1), f"r{i}")
        return refl(1)

    eng = ScriptedEngine(respond, pairs_in_flight=3)
    pairs = [pair(f"p{i}", row=i) for i in range(6)] + [pair("bad", row=99)]
    out = list(Judge(eng, settings(orders="both")).run(pairs))
    done = {o.pair.id for o in out if not isinstance(o, Failure)}
    failed = [o for o in out if isinstance(o, Failure)]
    assert done == {f"p{i}" for i in range(6)}
    assert len(failed) == 1 and "too long" in failed[0].reason
    # stage 2 of early pairs shares engine calls with stage 1 of later pairs
    mixed = [c for c in eng.calls if {r.share_key[2] for r in c} == {"rollout", "reflection"}]
    assert mixed


class _StreamingScripted(ScriptedEngine):
    """A streaming engine for the driver: takes everything the source gives at every step
    (so only the driver bounds the work in flight), and finishes one running request per
    step, in a seeded random order (stages of different pairs complete interleaved)."""

    def __init__(self, respond, seed: int = 0):
        super().__init__(respond, pairs_in_flight=2)
        import random

        self.rng, self.max_running, self.taken = random.Random(seed), 0, []

    def steps(self, source):
        running = []
        while True:
            while more := source.take():
                self.taken.append([r.share_key[2] for r in more])
                running += more
            if not running:
                return
            self.max_running = max(self.max_running, sum(r.n for r in running))
            req = running.pop(self.rng.randrange(len(running)))
            source.done(req, self.generate([req])[0])
            yield


def test_streaming_driver_gives_the_results_of_the_call_driver():
    def respond(req, i):
        pid = req.share_key[0]
        if pid == "bad":
            return Generation("", [], "error", error="too long for the context")
        if req.share_key[2] == "rollout":
            return pref(1 if (i + len(pid)) % 3 else 2, -0.1 * (i + 1), f"r{i}")
        return refl(1 if i % 2 else 2)

    js = settings(orders="both", samples=3)
    pairs = [pair(f"p{i}", row=i) for i in range(9)] + [pair("bad", row=99)]
    by_calls = {o.pair.id: o for o in Judge(ScriptedEngine(respond, pairs_in_flight=2),
                                            js).run(pairs)}
    for seed in range(3):
        eng = _StreamingScripted(respond, seed=seed)
        streamed = list(Judge(eng, js).run(pairs))
        assert {o.pair.id for o in streamed} == set(by_calls)
        for o in streamed:
            ref = by_calls[o.pair.id]
            if isinstance(o, Failure):
                assert isinstance(ref, Failure) and o.reason == ref.reason
            else:
                assert o == ref  # every sample, vote and verdict
        # a pair's stage 2 was taken while other pairs' stage 1 ran, and the sequences in
        # flight stayed bounded: the target (2 pairs x 3 samples x 2 orders) plus a few stages
        kinds = [k for t in eng.taken for k in t]
        first_refl = kinds.index("reflection")
        assert "rollout" in kinds[first_refl:]
        assert eng.max_running <= 12 + 2 * 6  # unbounded, it would reach 10 x 6 = 60


def test_adaptive_stops_early_when_orders_agree():
    eng = engine({"ab": [pref(1)] * 8, "ba": [pref(2)] * 8})
    res = Judge(eng, settings(orders="both", samples=8, adaptive=2)).judge(pair())
    assert res.orders["ab"].n_rollouts == 2 and res.verdict == "A"
    eng = engine({"ab": [pref(1), pref(2)] + [pref(1)] * 6, "ba": [pref(2)] * 8},
                 reflect=lambda req, order: refl(1))
    res = Judge(eng, settings(orders="both", samples=8, adaptive=2)).judge(pair())
    assert res.orders["ab"].n_rollouts == 8


def test_vote_from_rows_alone():
    eng = engine({"ab": [pref(1, -0.9, "r0"), pref(2, -0.1, "r1"), pref(1, -0.5, "r2"),
                         pref(2, -0.6, "r3")]}, reflect=winner_by_analysis({"r0", "r2"}))
    res = Judge(eng, settings()).judge(pair())
    pred, share, _ = vote(res.orders["ab"].rollouts, reflected=True)
    assert pred == res.orders["ab"].prediction == 1 and share == 1.0
