"""Opening up a reward: each term's value, contribution and share per rollout against values computed
by hand, and each warning planted: a term that cannot affect the result, one that contributes nothing,
one that never varies within a group, and a group GRPO drops."""

from __future__ import annotations

import pytest

from orchlib.reward import Reward
from orchlib.reward.breakdown import breakdown, unreachable_terms
from orchlib.tasks import Preference
from orchlib.trajectory import Trajectory

REWARD = """\
name: planted
terms:
  acc: minmax(outcome)
  thrift: P.cost * minmax(-cost)
  speed: P.latency * minmax(-latency)
  level: mean(outcome)
  dead: latency
  zeroed: cost
reward: where(outcome >= 1, acc + thrift + speed + level, 0) + 0 * zeroed
"""
P = Preference(name="thrifty", cost=1.0, latency=0.0)


def group(task: str, rows) -> list[Trajectory]:
    return [Trajectory(task_id=task, group_index=i, outcome=o, cost_usd=c, latency_s=s,
                       preference=P.model_dump()) for i, (o, c, s) in enumerate(rows)]


# g1: two right (cost 1 and 3), two wrong; g2: all wrong, so every reward is 0
G1 = group("g1", [(1.0, 1.0, 2.0), (1.0, 3.0, 1.0), (0.0, 2.0, 1.0), (0.0, 2.0, 4.0)])
G2 = group("g2", [(0.0, 1.0, 1.0), (0.0, 2.0, 2.0)])


def test_values_contributions_and_shares_by_hand():
    b = breakdown(Reward.from_string(REWARD), [G1, G2], P=P)
    assert b.terms == ["acc", "thrift", "speed", "level", "dead", "zeroed"]
    label, pref, e = b.groups[0]
    assert label == "g1" and pref == P
    # acc = minmax(outcome) = [1, 1, 0, 0]; -cost = [-1, -3, -2, -2] → thrift = [1, 0, 0.5, 0.5];
    # level = mean(outcome) = 0.5; the gate keeps the right ones: reward = [2.5, 1.5, 0, 0]
    assert e.reward.tolist() == [2.5, 1.5, 0.0, 0.0]
    assert e.values["thrift"].tolist() == [1.0, 0.0, 0.5, 0.5]
    assert e.contributions["acc"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert e.contributions["thrift"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert e.contributions["level"].tolist() == [0.5, 0.5, 0.0, 0.0]
    shares = b.shares(0)
    assert shares["acc"][:2] == pytest.approx([1 / 2.5, 1 / 1.5]) and shares["acc"][2:] == [None, None]
    assert shares["thrift"][0] == pytest.approx(0.4) and shares["level"][1] == pytest.approx(1 / 3)
    rows = [r for r in b.rows() if r["group"] == "g1" and r["rollout"] == 0]
    assert {r["term"]: r["contribution"] for r in rows}["acc"] == 1.0
    assert b.groups[1][2].reward.tolist() == [0.0, 0.0]


def test_each_planted_warning():
    b = breakdown(Reward.from_string(REWARD), [G1, G2], P=P)
    kinds = {(w.kind, w.subject) for w in b.warnings}
    assert kinds == {("unused", "dead"), ("unused", "zeroed"),  # never named; only under a factor of 0
                     ("no_effect", "speed"),                   # P.latency is 0
                     ("constant", "level"),                    # the group's mean: the same for every rollout
                     ("flat_group", "g2")}                     # all wrong: rewards 0, 0
    level = next(w for w in b.warnings if w.subject == "level")
    assert "contribution still differs within a group" in level.message  # through the outcome gate
    assert unreachable_terms(Reward.from_string(REWARD)) == ["dead", "zeroed"]
    table = b.table()
    assert "1 → 1 (40%)" in table and "warning: flat_group: g2:" in table


def test_a_plain_sum_with_a_constant_term_and_p_from_the_rollouts():
    reward = Reward("acc + bonus", terms={"acc": "minmax(outcome)", "bonus": "P.outcome"})
    flat = G1 + G2  # a flat list is grouped by task id, each group under the P its rollouts were shown
    b = breakdown(reward, flat)
    assert [label for label, _, _ in b.groups] == ["g1", "g2"] and b.groups[0][1] == P
    constant = next(w for w in b.warnings if w.kind == "constant")
    assert constant.subject == "bonus" and "GRPO's advantage cancels it" in constant.message
    # g2: minmax(outcome) of all-wrong rollouts is 0, so each scores 0 + 1: flat
    assert b.groups[1][2].reward.tolist() == [1.0, 1.0]
    assert [w.subject for w in b.warnings if w.kind == "flat_group"] == ["g2"]


def test_flat_groups_use_the_spread_given():
    reward = Reward("outcome + cost")
    near = group("near", [(1.0, 0.0, 0.0), (1.0, 2.0 ** -30, 0.0)])
    assert [w.kind for w in breakdown(reward, [near]).warnings] == ["flat_group"]  # std 2^-31 ≤ 1e-6
    assert breakdown(reward, [near], min_spread=0.0).warnings == []
    assert breakdown(reward, [near]).terms == ["reward"]


def test_the_playground_shows_the_breakdown():
    from orchlib.widgets import RewardPlayground

    pg = RewardPlayground(REWARD, group=G1, P=P)
    assert {(w.kind, w.subject) for w in pg.breakdown.warnings} >= {("unused", "dead"), ("constant", "level")}
    assert "data-kind='unused'" in pg.breakdown_box.value and "acc share" in pg.breakdown_box.value
    assert "<td>40%</td>" in pg.breakdown_box.value
