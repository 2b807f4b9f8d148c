"""The Environment: one task world that rollout, evaluate, Trainer and run_training take.

Policies are scripted (which tool each episode calls is written down), so every reward and outcome
below is known in advance: `right` answers "yes" (outcome 1), `wrong` answers "no" (outcome 0)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from conftest import REPO, TOY_ROLLOUT

from orchlib import Environment, RewardFunction, evaluate, make_environment, rollout
from orchlib.chat import render_call
from orchlib.engines.base import ChatPolicy, Engine, TrainableEngine
from orchlib.envs import ENVIRONMENTS, make_suite
from orchlib.envs.airline import airline_tasks
from orchlib.envs.toy import toy_tasks, toy_toolbox
from orchlib.models import build_tokenizer
from orchlib.reward import Reward
from orchlib.prompting import shown_preference
from orchlib.rollout import RolloutConfig
from orchlib.tasks import PROFILES
from orchlib.testing import ScriptedEngine
from orchlib.trajectory import ToolCall

TOK = build_tokenizer()
CONFIG = RolloutConfig(**TOY_ROLLOUT)
OUTCOME = "name: outcome\nreward: outcome"
OUTCOME_FILE = str(REPO / "rewards" / "outcome.yaml")


def _tasks(n: int = 3):
    # two profiles, so P differs between tasks and the reward's P argument is exercised
    return [t.model_copy(update={"preference": PROFILES["accuracy" if i % 2 else "thrifty"]})
            for i, t in enumerate(toy_tasks(n))]


def _engine(tasks, names=("right", "wrong")):
    """Episode g of every task calls `names[g]` once (a `final` tool: the episode ends there)."""
    per_episode = [[render_call(ToolCall(name=n))] for n in names]
    return ScriptedEngine(TOK, {t.id: per_episode for t in tasks}, tasks=tasks)


def _rows(trajs):
    return [(t.task_id, t.group_index, t.ids, t.mask, t.logprobs, t.outcome, t.finish_reason) for t in trajs]


def _rewards(reward, trajs, tasks, G):
    return [float(r) for i, t in enumerate(tasks)
            for r in reward(trajs[i * G:(i + 1) * G], P=shown_preference(t))]


def test_an_environment_by_hand_rolls_out_its_train_split():
    tasks, box, reward = _tasks(), toy_toolbox(), Reward.from_string(OUTCOME)
    env = Environment(train=tasks, tools=box, reward=reward, name="toy by hand")
    new = rollout(env, _engine(tasks), config=CONFIG, group_size=2)
    assert [(t.task_id, t.group_index) for t in new] == [(t.id, g) for t in tasks for g in (0, 1)]
    assert [t.turns[0].calls[0].name for t in new] == ["right", "wrong"] * 3
    assert [t.outcome for t in new] == [1.0, 0.0] * 3
    assert _rewards(env.reward, new, tasks, 2) == [1.0, 0.0] * 3
    # a subset of tasks by keyword: the same episodes as those tasks' share of the whole
    part = rollout(env, _engine(tasks), config=CONFIG, group_size=2, tasks=tasks[1:])
    assert _rows(part) == _rows(new)[2:]
    assert env.tasks == tuple(tasks) and env.test == () and env.users == {}
    assert isinstance(env.reward, RewardFunction)


def test_the_prompt_is_the_rollout_configs_alone():
    tasks, box = _tasks(), toy_toolbox()
    env = Environment(train=tasks, tools=box)
    base = RolloutConfig(max_turns=2, max_new_tokens=24, tool_latency="declared")
    named = base.model_copy(update={"preference_at": "user", "preference_style": "name"})
    by_name = rollout(env, _engine(tasks), config=named, group_size=2)
    plain = rollout(env, _engine(tasks), config=base, group_size=2)
    assert _rows(by_name) != _rows(plain)
    first = TOK.decode(by_name[0].ids[:by_name[0].mask.index(1)])
    assert "Question number 0?\n\nPreference (thrifty)" in first  # P after the task, by name
    # a world holds no prompt settings of its own: there is one place to set them
    with pytest.raises(TypeError, match="prompt"):
        Environment(train=tasks, tools=box, prompt={"preference_at": "user"})
    assert not hasattr(env, "rollout_config")


def test_evaluate_on_an_environment_runs_its_test_split():
    tasks, box, reward = _tasks(4), toy_toolbox(), Reward.from_string(OUTCOME)
    env = Environment(train=_tasks(1), test=tasks, tools=box, reward=reward)
    new = evaluate(_engine(tasks), env, config=CONFIG, group_size=2, name="p")
    assert new.rewards == [1.0, 0.0] * 4
    assert [(t.task_id, t.group_index) for t in new.trajectories] == [(t.id, g) for t in tasks for g in (0, 1)]
    assert new.metrics["overall"]["accuracy"] == 0.5
    # the environment's reward can be replaced for one evaluation
    twice = evaluate(_engine(tasks), env, config=CONFIG, group_size=2, reward=lambda g, P=None: np.full(len(g), 2.0))
    assert twice.rewards == [2.0] * 8
    with pytest.raises(ValueError, match="has no test tasks"):
        evaluate(_engine(tasks), Environment(train=tasks, tools=box))


def test_a_plain_callable_reward_is_a_reward():
    def doubled(group, P=None):  # no explain(): training logs no per-term means for it
        return np.array([2.0 * t.outcome + (P.cost if P is not None else 0.0) for t in group])

    tasks = _tasks(2)
    env = Environment(test=tasks, tools=toy_toolbox(), reward=doubled)
    assert isinstance(doubled, RewardFunction) and env.reward is doubled
    report = evaluate(_engine(tasks), env, config=CONFIG, group_size=2)
    # task 0 is shown "thrifty" (cost weight 1), task 1 "accuracy" (cost weight 0)
    want = [2.0 + PROFILES["thrifty"].cost, PROFILES["thrifty"].cost, 2.0, 0.0]
    assert report.rewards == want


def test_bad_input_is_named():
    tasks, box = _tasks(), toy_toolbox()
    with pytest.raises(ValueError, match="has no tasks"):
        Environment(tools=box)
    with pytest.raises(TypeError, match=r"train\[1\] is a str, not a Task"):
        Environment(train=[tasks[0], "q"], tools=box)
    with pytest.raises(TypeError, match="a reward is a reward file's path or a callable"):
        Environment(train=tasks, tools=box, reward=3)
    with pytest.raises(TypeError, match=r"tools\[0\]: a ToolCard, a Tool or a function"):
        Environment(train=tasks, tools=[3])
    env = Environment(train=tasks, tools=box)
    with pytest.raises(TypeError, match="positional argument"):  # one way: the config by keyword
        rollout(env, _engine(tasks), CONFIG)
    with pytest.raises(TypeError, match=r"env is an orchlib.Environment .*, not list"):
        rollout(tasks, _engine(tasks))
    with pytest.raises(TypeError, match=r"env is an orchlib.Environment .*, not list"):
        evaluate(_engine(tasks), tasks)
    with pytest.raises(ValueError, match="has no train tasks"):
        rollout(Environment(test=tasks, tools=box), _engine(tasks))
    with pytest.raises(dataclass_frozen()):
        env.name = "other"
    assert env.replace(name="other").name == "other" and env.name == "custom"


def dataclass_frozen():
    import dataclasses

    return dataclasses.FrozenInstanceError


def test_tools_may_be_functions_cards_or_a_toolbox():
    from orchlib.envs.toy import right, wrong

    by_functions = Environment(train=_tasks(1), tools=[right, wrong])
    by_cards = Environment(train=_tasks(1), tools=toy_toolbox().cards)
    assert by_functions.tools.names == by_cards.tools.names == ["right", "wrong"]
    assert by_cards.tools["right"].card == toy_toolbox()["right"].card


def test_suites_and_domains_are_environments():
    suite = make_suite(seed=0, n_train=5, n_test=5)
    env = suite.environment(OUTCOME_FILE)
    assert (env.name, env.train, env.test) == ("orchestra-mini", tuple(suite.train), tuple(suite.test))
    assert env.tools.names == suite.toolbox().names and isinstance(env.reward, Reward)
    assert sorted(ENVIRONMENTS) == ["airline", "orchestra-choice", "orchestra-mini", "orchestra-read", "shop", "toy"]
    shop = make_environment("shop", n_train=20, n_test=10)
    assert (len(shop.train), len(shop.test)) == (20, 10)
    assert not {t.id for t in shop.train} & {t.id for t in shop.test}
    airline = make_environment("airline")
    assert set(airline.users) == {t.id for t in airline_tasks()}
    assert all(u.kind == "scripted" for u in airline.users.values())
    toy = make_environment("toy", n_train=3, n_test=2)
    assert [t.id for t in toy.train + toy.test] == [f"toy{i}" for i in range(5)]
    with pytest.raises(ValueError, match="unknown environment 'nowhere'"):
        make_environment("nowhere")


def test_engine_protocols():
    from orchlib.engines.openai import APIPolicyConfig, OpenAIPolicy
    from orchlib.engines.transformers import TransformersEngine

    class Served:  # what the trainer asks of an engine with its own copy of the weights (vLLM's shape)
        tokenizer, last_sync = TOK, {}

        def generate(self, prompts, params, stop_ids=()): ...

        def clear_prefix_cache(self): ...

        def sync_weights(self, model): ...

    scripted = _engine(_tasks(1))
    assert isinstance(scripted, Engine) and not isinstance(scripted, (TrainableEngine, ChatPolicy))
    assert isinstance(Served(), TrainableEngine) and isinstance(Served(), Engine)
    for name in ("sync_weights", "clear_prefix_cache", "generate"):  # the transformers engine is trainable
        assert callable(getattr(TransformersEngine, name))
    policy = OpenAIPolicy(APIPolicyConfig(model="m", base_url="http://localhost:1/v1"))
    assert isinstance(policy, ChatPolicy) and not isinstance(policy, Engine)


# ------------------------------------------------------------------------------------------- training
def _trainer(tiny_policy, env, script, **kw):
    from train_worker import scripted_engine

    from orchlib.train import GRPOConfig, Trainer

    model, tok = tiny_policy
    cfg = GRPOConfig(rollout=CONFIG, kl_coef=0.0, seed=0, tasks_per_step=4, **kw)
    trainer = Trainer((copy.deepcopy(model), tok), env, cfg)
    trainer.engine = scripted_engine(tok, trainer.env.train, script)
    return trainer


def test_a_trainer_built_from_an_environment_takes_a_step(tiny_policy):
    tasks = toy_tasks(4)
    env = Environment(train=tasks, test=toy_tasks(6)[4:], tools=toy_toolbox(), reward=Reward.from_string(OUTCOME))
    trainer = _trainer(tiny_policy, env, ["right", "wrong"] * 4)
    assert trainer.env is env and trainer.env.train == tuple(tasks) and trainer.toolbox is env.tools
    assert not hasattr(trainer, "tasks")  # no copy of the tasks beside the environment
    report = trainer.step()
    assert report.rewards == [1.0, 0.0] * 16 and report.metrics["groups_kept"] == 4
    assert all((a > 0) == (r == 1.0) for a, r in zip(report.advantages, report.rewards))
    assert report.metrics["reward/reward"] == 0.5  # the DSL reward explains itself: its terms are logged
    assert [t.turns[0].calls[0].name for t in report.trajectories] == ["right", "wrong"] * 16


def test_a_trainer_takes_a_plain_callable_reward(tiny_policy):
    def doubled(group, P=None):
        return np.array([2.0 * t.outcome for t in group])

    tasks = toy_tasks(4)
    env = Environment(train=tasks, tools=toy_toolbox(), reward=doubled)
    trainer = _trainer(tiny_policy, env, ["right", "wrong"] * 4)
    report = trainer.step()
    assert report.rewards == [2.0, 0.0] * 16 and report.metrics["reward"] == 1.0
    assert not [k for k in report.metrics if k.startswith("reward/")]  # nothing to explain


def test_a_trainer_needs_a_reward_and_one_config(tiny_policy):
    from orchlib.train import GRPOConfig, Trainer

    env = Environment(train=toy_tasks(2), tools=toy_toolbox())
    with pytest.raises(ValueError, match="Trainer needs a reward"):
        Trainer(tiny_policy, env)
    with pytest.raises(TypeError, match="multiple values for argument 'config'"):
        Trainer(tiny_policy, env.replace(reward=OUTCOME_FILE), GRPOConfig(), config=GRPOConfig(seed=3))
    with pytest.raises(TypeError, match=r"env is an orchlib.Environment .*, not list"):
        Trainer(tiny_policy, list(env.train), GRPOConfig())


def test_run_training_takes_an_environment_in_place_of_the_world_its_file_names(tmp_path):
    from orchlib.envs.config import EnvConfig
    from orchlib.train.run import RunConfig, load_environment, run_training

    cfg = RunConfig(env={"n_train": 5, "n_test": 5, "reward": OUTCOME_FILE})
    env = load_environment(cfg)
    suite = make_suite(seed=0, n_train=5, n_test=5)
    assert (env.name, env.train, env.test) == ("orchestra-mini", tuple(suite.train), tuple(suite.test))
    assert env.tools.names == suite.toolbox().names and env.reward.name == Reward.load(OUTCOME_FILE).name
    # one entry, said three ways: a bare name, a name with options, a factory (a string with ':')
    assert EnvConfig.model_validate("shop").world == "shop" and RunConfig().env.world == "orchestra-mini"
    assert EnvConfig.model_validate("pkg.mod:make").factory == "pkg.mod:make"
    shop = load_environment(RunConfig(env={"name": "shop", "seed": 1, "n_train": 3, "n_test": 2}))
    want = make_environment("shop", seed=1, n_train=3, n_test=2)
    assert (shop.train, shop.test, shop.tools.names) == (want.train, want.test, want.tools.names)
    toy = Environment(train=toy_tasks(2), tools=toy_toolbox(), reward=Reward.from_string(OUTCOME))
    with pytest.raises(ValueError, match=r"the environment replaces \['env'\]; leave them unset"):
        run_training(cfg, env=toy)
    with pytest.raises(ValueError, match="has no reward"):
        run_training(RunConfig(out=str(tmp_path)), env=toy.replace(reward=None))
