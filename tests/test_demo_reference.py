"""Rollouts scored against fixed reference runs: the references fix each term's range."""

from __future__ import annotations

import numpy as np
import pytest

from orchlib.demo import DEMO_ROLLOUT, demo_suite, under
from orchlib.experiments.probes import anchored_reward, reference_runs
from orchlib.models import build_default_policy
from orchlib.reward import Reward
from orchlib.tasks import Preference


@pytest.fixture(scope="module")
def refs(policy_cache):
    _, tok = build_default_policy("tiny", cache=policy_cache)
    train, _, toolbox = demo_suite(0, 8, 4)
    tasks = under([train[0], train[-1]])  # one arithmetic and one GSM8K task, under both profiles
    return tasks, reference_runs(tasks, toolbox, tok, DEMO_ROLLOUT), Reward.load("rewards/toolorchestra.yaml")


def test_every_route_of_every_task_runs_once_under_its_own_p(refs):
    tasks, runs, _ = refs
    assert set(runs) == {t.id for t in tasks}
    for t in tasks:
        assert sorted(c for r in runs[t.id] for c in r.calls) == sorted(t.tools)  # one run per offered tool
        assert all(r.preference["name"] == t.preference.name and r.errors == {} for r in runs[t.id])


def test_a_group_that_agrees_scores_what_its_route_scores_among_the_references(refs):
    tasks, runs, reward = refs
    for t in tasks:
        P = t.preference
        alone = np.asarray(reward(runs[t.id], P=P), dtype=float)  # the references as their own group
        for i, run in enumerate(runs[t.id]):
            group = [run] * 8  # a settled policy: its own group scores 0 under the paper's reward
            assert np.allclose(reward(group, P=P), 0.0)
            assert anchored_reward([group], runs, reward) == pytest.approx(alone[i])


def test_groups_are_averaged_rollout_by_rollout(refs):
    tasks, runs, reward = refs
    a, b = tasks[0], tasks[1]
    groups = [[runs[a.id][0]] * 3, [runs[b.id][1]]]
    want = [reward(runs[a.id], P=Preference.model_validate(runs[a.id][0].preference))[0]] * 3
    want += [reward(runs[b.id], P=Preference.model_validate(runs[b.id][0].preference))[1]]
    assert anchored_reward(groups, runs, reward) == pytest.approx(float(np.mean(want)))
