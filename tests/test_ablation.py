"""The paper's ablations as settings: a random anchor, and a random winner group of the size
self-reflection chose (`--ablation`), seeded per pair and order."""

from __future__ import annotations

import pytest
from helpers import engine, pair, pref, refl, unparsed

from rmjudge.judging.judge import Judge
from rmjudge.core.settings import JudgeSettings, SettingsError


def rollouts():
    # r1 is the most confident parsed rollout; the unparsed one is more confident still
    return {"ab": [pref(1, -0.9, "r0"), pref(2, -0.1, "r1"), pref(1, -0.5, "r2"),
                   pref(2, -0.6, "r3"), unparsed(-0.01)]}


def reflect_wins(winners: set[str]):
    def reflect(req, order):
        body = req.messages[-1]["content"]
        c1 = body.split("### Critique 1\n", 1)[1].split("\n\n### Critique 2", 1)[0]
        c2 = body.split("### Critique 2\n", 1)[1].split("\n\n", 1)[0]
        return refl(1 if c1 in winners else 2 if c2 in winners else 1 if c1 == "r1" else 2)

    return reflect


def judged(pid: str, ablation: str, winners=frozenset({"r0"})):
    js = JudgeSettings(samples=5, orders="ab", seed=7, forced=False, ablation=ablation)
    eng = engine(rollouts(), reflect=reflect_wins(set(winners)))
    return Judge(eng, js).judge(pair(pid)).orders["ab"]


def test_random_anchor_is_any_parsed_rollout_and_reproducible():
    anchors = []
    for k in range(40):
        o = judged(f"p{k}", "random-anchor")
        idx = [r.idx for r in o.rollouts if r.is_anchor]
        assert len(idx) == 1 and idx[0] != 4  # never the unparsed rollout
        assert [r.idx for r in judged(f"p{k}", "random-anchor").rollouts if r.is_anchor] == idx
        anchors.append(idx[0])
    assert set(anchors) == {0, 1, 2, 3}
    assert all([r.is_anchor for r in judged(f"p{k}", "none").rollouts] ==
               [False, True, False, False, False] for k in range(5))


def test_random_group_has_the_size_reflection_chose():
    groups = set()
    for k in range(40):
        o = judged(f"p{k}", "random-group", winners={"r0", "r2"})  # two rollouts beat r1
        group = [r.idx for r in o.rollouts if r.won_reflection]
        assert len(group) == 2 and 1 not in group and 4 not in group
        # the reflections keep what the model said
        assert sorted(s.reflection_of for s in o.reflections) == [0, 2, 3]
        preds = [o.rollouts[i].prediction for i in group]
        if preds.count(1) != preds.count(2):
            assert o.prediction == max((1, 2), key=preds.count)
        else:  # a tied group: the anchor (r1, 2) joins and decides
            assert o.prediction == 2
        groups.add(tuple(group))
    assert groups == {(0, 2), (0, 3), (2, 3)}
    real = judged("p0", "none", winners={"r0", "r2"})
    assert [r.idx for r in real.rollouts if r.won_reflection] == [0, 2] and real.prediction == 1


def test_ablation_is_a_verdict_setting_recorded_only_when_chosen():
    assert "ablation" not in JudgeSettings().as_dict()
    assert JudgeSettings(ablation="random-group").as_dict()["ablation"] == "random-group"
    with pytest.raises(SettingsError, match="--ablation"):
        JudgeSettings(ablation="random")
