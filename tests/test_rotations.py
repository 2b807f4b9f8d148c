"""The counterbalanced held-out test (orchlib.evaluate.rotations): the rotations by hand, the copies of
orchestra-read's test split against its own draws, written policies with exact first-listed shares, and a
whole run that evaluates on the rotated copies."""

from __future__ import annotations

import json
import re

import pytest
import torch

from orchlib.cards import Latency, Price
from orchlib.configuration_record import Configuration, OfferedTool
from orchlib.envs import make_environment
from orchlib.evaluate import heldout_summary
from orchlib.evaluate.rotations import rotated, rotations
from orchlib.rollout import RolloutConfig, rollout
from orchlib.testing import ScriptedEngine


def conf(*pairs: tuple[str, str]) -> Configuration:
    return Configuration(tools=tuple(OfferedTool(alias=a, backend=b, price=Price(per_call=0.01),
                                                 latency=Latency(seconds=1.0), description=f"{b}.")
                                     for a, b in pairs), space="held-out", held_out=("aliases",), seed=4, episode=0)


def test_each_tool_is_at_each_place_once():
    c = conf(("a", "calculator"), ("b", "specialist"), ("c", "generalist"))
    got = rotations(c)
    assert [[t.alias for t in r.tools] for r in got] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert got[0] == c  # the drawn order is the first rotation
    assert all(r.model_dump(exclude={"tools"}) == c.model_dump(exclude={"tools"}) for r in got)
    assert [[t.alias for t in r.tools] for r in rotations(conf(("x", "mixtral"), ("y", "gpt4")))] == [["x", "y"],
                                                                                                       ["y", "x"]]


@pytest.fixture(scope="module")
def env():
    return make_environment("orchestra-read", seed=3, n_train=4, n_test=12)


def test_the_copies_of_a_test_split_follow_its_draws(env):
    tasks, shown = rotated(env)
    assert len(tasks) == sum(len(t.tools) for t in env.test) == 54  # 24 episodes offering 3 tools on 6, 2 on 18
    assert len({t.id for t in tasks}) == len(tasks)
    by_id = {t.id: t for t in env.test}
    for copy in tasks:
        base, r = copy.id.rsplit("#", 1)
        drawn = env.configuration(by_id[base], 0)
        tools = drawn.tools[int(r):] + drawn.tools[:int(r)]
        assert shown(copy).tools == tools and shown(copy).space == "held-out"
        assert copy.model_dump(exclude={"id"}) == by_id[base].model_dump(exclude={"id"})
    with pytest.raises(KeyError, match="not one of the rotated copies"):
        shown(env.test[0])


def calls_the(description: str):
    """A policy that reads one thing: it calls the tool whose description starts with `description`
    (the first listed where none does)."""
    def reply(text: str, turn: int) -> str:
        names = re.findall(r"^(tool_\w+): (.*)$", text, flags=re.M)
        name = next((n for n, d in names if d.startswith(description)), names[0][0])
        return f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'
    return reply


def first_listed(text: str, turn: int) -> str:
    name = re.findall(r"^(tool_\w+): ", text, flags=re.M)[0]
    return f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'


def test_a_policy_blind_to_the_order_calls_the_first_listed_once_in_k(env, tiny_policy):
    _, tok = tiny_policy
    tasks, shown = rotated(env)
    config = RolloutConfig(max_turns=1, tool_schema="brief")
    generalist = "Answers the question itself. Right on about 97 %"
    trajs = rollout(env, ScriptedEngine(tok, calls_the(generalist)), tasks=tasks, configurations=shown, config=config)
    arith3 = heldout_summary(trajs, offer="calculator+generalist+specialist")
    pair = heldout_summary(trajs, offer="generalist+specialist")
    for profile in ("accuracy", "thrifty"):
        n3, n2 = (sum(t.preference.name == profile and set(t.tools) == offer for t in env.test)
                  for offer in ({"calculator", "generalist", "specialist"}, {"generalist", "specialist"}))
        assert n3 and n2
        assert arith3[profile].backend_share == {"generalist": 1.0} and arith3[profile].calls == 3 * n3
        assert arith3[profile].first_listed == 1 / 3  # exactly: each copy shows it first once in three
        assert pair[profile].first_listed == 1 / 2 and pair[profile].calls == 2 * n2
    # the same test for a policy that follows the list: every call to the first listed, each backend alike
    trajs = rollout(env, ScriptedEngine(tok, first_listed), tasks=tasks, configurations=shown, config=config)
    arith3 = heldout_summary(trajs, offer="calculator+generalist+specialist")
    for profile in ("accuracy", "thrifty"):
        assert arith3[profile].first_listed == 1.0
        assert arith3[profile].backend_share == {b: 1 / 3 for b in ("calculator", "generalist", "specialist")}


def run(tmp_path, rotations: bool):
    from orchlib.train.run import RunConfig, run_training

    cfg = RunConfig.model_validate({
        "policy": "tiny", "env": {"name": "orchestra-read", "seed": 3, "n_train": 4, "n_test": 4,
                                  "reward": "rewards/toolorchestra.yaml"},
        "warm_start": {"max_steps": 1, "batch_size": 4}, "steps": 2,
        "grpo": {"tasks_per_step": 2, "group_size": 4,
                 "rollout": {"max_turns": 1, "max_new_tokens": 8, "tool_schema": "compact", "price_order": True}},
        "evaluation": {"baselines": ["cheapest"], "rotations": rotations}, "out": str(tmp_path / f"run{rotations}")})
    sampled: list[str] = []  # what each GRPO step's rollouts wrote
    trainer = run_training(cfg, progress=False,
                           on_step=lambda _, report: sampled.extend(t.turns[0].text for t in report.trajectories))
    return trainer, sampled


def test_a_run_evaluates_policies_and_baselines_on_the_rotated_copies(tmp_path):
    rotating, rotating_sampled = run(tmp_path, True)
    ev = json.loads((tmp_path / "runTrue" / "evaluation.json").read_text())
    suite = make_environment("orchestra-read", seed=3, n_train=4, n_test=4)
    k = sum(len(t.tools) for t in suite.test)
    assert k > len(suite.test)  # every test task ran once per offered tool
    assert {name: p["all"]["n"] for name, p in ev["policies"].items()} == {"before RL": k, "after RL": k,
                                                                          "cheapest": k}
    for policy in ("before RL", "after RL"):
        assert sum(r["episodes"] for r in ev["held_out"][policy].values()) == k
    # what GRPO sampled and learned does not depend on how many episodes the evaluation before it ran
    plain, plain_sampled = run(tmp_path, False)
    assert json.loads((tmp_path / "runFalse" / "evaluation.json").read_text())["policies"]["cheapest"]["all"]["n"] \
        == len(suite.test)
    assert len(plain_sampled) == 16 and len(set(plain_sampled)) > 1  # 2 steps of 2 tasks x 4, sampled
    assert plain_sampled == rotating_sampled
    for (name, a), b in zip(plain.model.named_parameters(), rotating.model.parameters()):
        assert torch.equal(a, b), name
