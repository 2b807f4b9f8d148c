"""Per-episode tool configurations: the draw, the episode view, the rollout under it, the record and replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchlib.chat import render_assistant
from orchlib.configurations import (AliasPool, ConfigurationError, ConfigurationSpace, PriceSpace, Slot, Values,
                                    draw, generated_names, recorded_configurations)
from orchlib.env import Environment
from orchlib.ledger import ledger
from orchlib.rollout import RolloutConfig, rollout
from orchlib.shipped import shipped_path
from orchlib.tasks import PROFILES, Task
from orchlib.testing import ScriptedEngine
from orchlib.tools import Toolbox, ToolContext
from orchlib.trajectory import ToolCall, read_jsonl, to_json_line, write_jsonl

# A question of RouteLLM's GSM8K recording (orchlib/data/routellm/gsm8k_responses.csv), word for word.
QUESTION = ("Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for "
            "her friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh "
            "duck egg. How much in dollars does she make every day at the farmers' market?")
BACKENDS = ("gpt4", "mixtral", "generalist", "calculator")
POOL = ("alpha", "beta", "gamma", "delta", "epsilon")
CONFIG = RolloutConfig(tool_schema="brief", max_turns=2)


@pytest.fixture(scope="module")
def box():
    return Toolbox.load([shipped_path("toolcards") / f"{n}.yaml" for n in BACKENDS])


@pytest.fixture(scope="module")
def task():
    return Task(id="janet", prompt=QUESTION, answer="18", checker="numeric", category="gsm8k",
                preference=PROFILES["thrifty"])


def space(**more):
    """Aliases from POOL in a drawn order, prices at half or twice the list price (never the list price)."""
    fields = dict(aliases=AliasPool(names=POOL), order="drawn", show_prices=True,
                  price=PriceSpace(factor=Values(choices=(0.5, 2.0))),
                  tools=tuple(Slot(backends=(b,), description="A tool.") for b in BACKENDS))
    return ConfigurationSpace(**(fields | more))


def env_of(box, task, **more):
    return Environment(train=[task], tools=box, configurations=space(**more), reward="rewards/toolorchestra.yaml")


def call(name):
    return render_assistant("", [ToolCall(name=name)])


def test_a_call_to_an_alias_reaches_its_backend_at_the_episode_prices(tiny_policy, box, task):
    _, tok = tiny_policy
    env = env_of(box, task)
    c = env.configuration(task, 0)
    offered = {t.backend: t for t in c.tools}
    alias = offered["gpt4"].alias
    assert alias in POOL and offered["gpt4"].price.per_m_input in (5.0, 20.0)  # gpt4's list price is 10 / 30
    t = rollout(env, ScriptedEngine(tok, [call(alias)]), config=CONFIG)[0]
    obs = t.turns[0].observations[0]
    # the backend's own answer to this question, asked directly
    direct = box["gpt4"].call_sync({}, ToolContext(task_id=task.id, prompt=task.prompt))
    assert obs.content == direct.content and obs.meta["grade"] == direct.meta["grade"] == 1.0
    assert (obs.tool, obs.meta["backend"], t.calls, t.outcome) == (alias, "gpt4", {"gpt4": 1}, 1.0)
    # charged at the alias's shown prices, from the backend's token counts
    p = offered["gpt4"].price
    assert (obs.tokens_in, obs.tokens_out) == (direct.tokens_in, direct.tokens_out)
    assert obs.cost_usd == pytest.approx(direct.tokens_in * p.per_m_input / 1e6 + direct.tokens_out * p.per_m_output
                                         / 1e6, rel=1e-12)
    assert obs.cost_usd != pytest.approx(direct.cost_usd, rel=0.1)  # not the list price
    # the ledger names alias and backend, bills at the episode's prices and adds up exactly
    bill = ledger([t], box, policy=CONFIG)
    assert bill.reconciles and not bill.warnings
    payers = bill.by_payer_and_class()
    assert payers[f"{alias} (gpt4)"]["output"] == pytest.approx(direct.tokens_out * p.per_m_output / 1e6, rel=1e-12)


def test_the_prompt_lists_exactly_the_offered_tools_in_the_drawn_order_with_their_prices(tiny_policy, box, task):
    _, tok = tiny_policy
    env = env_of(box, task, sizes=(2,))
    c = env.configuration(task, 3)
    t = rollout(env, ScriptedEngine(tok, ["no call"]), config=CONFIG, episode=3)[0]
    assert t.configuration == c and len(c.tools) == 2
    prompt = tok.decode(t.ids[:t.prompt_len])
    lines = [line for line in prompt.splitlines() if line.split(":")[0] in POOL]
    # in the drawn order, each with the episode's price and latency
    assert [line.split(":")[0] for line in lines] == [o.alias for o in c.tools]
    for o, line in zip(c.tools, lines):
        assert line.startswith(f"{o.alias}: A tool. Price: {o.price.describe()}. Latency: about "
                               f"{o.latency.seconds:g} s."), line
    others = set(POOL) - {o.alias for o in c.tools}
    assert not any(f'"name": "{n}"' in prompt for n in others | set(BACKENDS))


def test_a_name_not_offered_is_an_error_observation(tiny_policy, box, task):
    _, tok = tiny_policy
    env = env_of(box, task)
    t = rollout(env, ScriptedEngine(tok, [call("gpt4"), "18"]), config=CONFIG)[0]  # the backend's real name
    obs = t.turns[0].observations[0]
    assert obs.error_kind == "unknown_tool" and obs.cost_usd == 0.0
    assert t.errors == {"unknown_tool": 1}


_DRAWS = """
import json, sys
from orchlib.configurations import AliasPool, ConfigurationSpace, PriceSpace, Values, bind, draw
from orchlib.shipped import shipped_path
from orchlib.tools import Toolbox
box = Toolbox.load([shipped_path("toolcards") / f"{n}.yaml" for n in ("gpt4", "mixtral", "generalist", "calculator")])
s = bind(ConfigurationSpace(aliases=AliasPool(generate=30), order="drawn", sizes=(2, 3, 4),
                            price=PriceSpace(factor=Values(low=0.5, high=2.0))), box)
print(json.dumps([draw(s, int(sys.argv[1]), t, e).model_dump(mode="json") for t in ("a", "b") for e in range(4)]))
"""


def _draws_in_a_fresh_process(seed: int) -> list:
    out = subprocess.run([sys.executable, "-c", _DRAWS, str(seed)], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": str(seed + 11), "PATH": "",
                              "PYTHONPATH": str(Path(__file__).parents[1])})
    return json.loads(out.stdout)


def test_the_same_seed_draws_the_same_configurations_in_a_fresh_process(box):
    from orchlib.configurations import bind

    here = bind(ConfigurationSpace(aliases=AliasPool(generate=30), order="drawn", sizes=(2, 3, 4),
                                   price=PriceSpace(factor=Values(low=0.5, high=2.0))), box)
    mine = [draw(here, 0, t, e).model_dump(mode="json") for t in ("a", "b") for e in range(4)]
    assert _draws_in_a_fresh_process(0) == mine
    other = _draws_in_a_fresh_process(1)
    assert other != mine and all(a != b for a, b in zip(other, mine))


def test_a_held_out_alias_pool_never_yields_a_training_alias(box, task):
    train = ConfigurationSpace(aliases=AliasPool(generate=40, prefix="t_"), order="drawn")
    test = ConfigurationSpace(name="test", aliases=AliasPool(generate=40, prefix="x_"), order="drawn",
                              held_out=("aliases",))
    env = Environment(train=[task], test=[task.model_copy(update={"id": "held"})], tools=box,
                      configurations=train, test_configurations=test)
    training = set(generated_names(40, "t_"))
    for e in range(50):
        c = env.configuration(env.test[0], e)
        assert c.held_out == ("aliases",) and c.space == "test"
        assert not set(c.aliases) & training and set(c.aliases) <= set(generated_names(40, "x_"))
        assert set(env.configuration(env.train[0], e).aliases) <= training
    clash = test.model_copy(update={"aliases": AliasPool(names=(generated_names(40, "t_")[7],), generate=10,
                                                         prefix="x_")})
    with pytest.raises(ConfigurationError, match="held-out aliases .* are also training names"):
        Environment(train=[task], test=[task], tools=box, configurations=train, test_configurations=clash)


def test_jsonl_keeps_the_configuration_and_a_replay_reproduces_cost_and_reward(tiny_policy, box, task, tmp_path):
    _, tok = tiny_policy
    env = env_of(box, task)
    aliases = [env.configuration(task, 5).tools[i].alias for i in range(4)]
    script = {task.id: [[call(aliases[0]), "18"], [call(aliases[1]), "18"], [call(aliases[2]), "18"]]}
    first = rollout(env, ScriptedEngine(tok, script, tasks=[task]), config=CONFIG, group_size=3, episode=5)
    path = write_jsonl(first, tmp_path / "t.jsonl")
    back = read_jsonl(path)
    assert [b.configuration for b in back] == [t.configuration for t in first] and back[0].configuration is not None
    assert [to_json_line(b) for b in back] == [to_json_line(t) for t in first]
    # an old file, written before configurations, still loads (nothing recorded)
    old = json.loads(to_json_line(first[0]))
    del old["configuration"]
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    assert read_jsonl(tmp_path / "old.jsonl")[0].configuration is None
    # replayed from the record alone: another episode index, but the recorded configuration
    again = rollout(env, ScriptedEngine.from_trajectories(tok, back), config=CONFIG, group_size=3, episode=99,
                    configurations=recorded_configurations(back))
    assert [t.cost_usd for t in again] == [t.cost_usd for t in first]
    assert [t.configuration for t in again] == [t.configuration for t in first]
    P = PROFILES["thrifty"]
    assert list(env.reward(again, P=P)) == list(env.reward(first, P=P))
    assert env.configuration(task, 99) != first[0].configuration  # the replay did not draw again


def test_an_identity_space_leaves_the_trajectories_byte_identical(tiny_policy, box, task):
    _, tok = tiny_policy
    turns = {task.id: [[call("mixtral")], [call("gpt4")]]}
    plain = Environment(train=[task], tools=box)
    same = Environment(train=[task], tools=box, configurations=ConfigurationSpace())
    a = rollout(plain, ScriptedEngine(tok, turns, tasks=[task]), config=CONFIG, group_size=2)
    b = rollout(same, ScriptedEngine(tok, turns, tasks=[task]), config=CONFIG, group_size=2)
    assert [to_json_line(t) for t in a] == [to_json_line(t) for t in b]
    assert '"configuration"' not in to_json_line(a[0])


def test_rewards_count_calls_by_backend(tiny_policy, box, task):
    """calls[gpt4] means the same whatever alias gpt4 wore: two episodes, two aliases, one count each."""
    _, tok = tiny_policy
    env = env_of(box, task)
    got = []
    for e in (0, 1, 2, 3):
        alias = next(o.alias for o in env.configuration(task, e).tools if o.backend == "gpt4")
        got.append((alias, rollout(env, ScriptedEngine(tok, [call(alias)]), config=CONFIG, episode=e)[0].calls))
    assert len({a for a, _ in got}) > 1 and all(calls == {"gpt4": 1} for _, calls in got)


def test_bad_configuration_errors_name_file_line_and_field(tmp_path, capsys):
    from orchlib.cli import main

    for block, field, problem, line in [
            ("price: {factor: [-1, 2]}", "configurations.price.factor", "greater than or equal to 0", 5),
            ("sizes: [0]", "configurations.sizes", "empty subset", 5),
            ("aliases: {names: [a, a]}", "configurations.aliases", "alias clash", 5),
            ("sizes: [1]\n  tools: [calculator, nope]", "configurations.tools[1].backends[0]",
             "unknown backend 'nope'", 6)]:
        path = tmp_path / "run.yaml"
        path.write_text(f"steps: 0\nenv: orchestra-choice\nwarm_start: null\nconfigurations:\n  {block}\n")
        path.write_text(path.read_text() + f"out: {tmp_path / 'out'}\n")
        assert main(["train", "--config", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert f"{path}:{line}: {field}" in err and problem in err, err


def test_eval_files_take_configuration_blocks_with_the_same_errors(tmp_path, capsys):
    from orchlib.cli import main

    head = f"policies: [{{name: p, local: tiny}}]\nenv: orchestra-choice\nout: {tmp_path / 'out'}\n"
    for block, field, problem, line in [
            ("configurations:\n  price: {factor: [0.5, -2]}", "configurations.price.factor", "greater than", 5),
            ("test_configurations:\n  tools: [mixtral, gpt5]", "test_configurations.tools[1].backends[0]",
             "unknown backend 'gpt5'", 5)]:
        path = tmp_path / "eval.yaml"
        path.write_text(head + block + "\n")
        assert main(["eval", "--config", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{path}:{line}: {field}" in err and problem in err, err


def test_evaluate_reports_per_configuration_feature(tiny_policy, box, task):
    from orchlib.evaluate import evaluate

    _, tok = tiny_policy
    seen = task.model_copy(update={"id": "seen"})
    train = ConfigurationSpace(tools=("gpt4", "calculator"), aliases=AliasPool(names=("a1", "a2")),
                               price=PriceSpace(factor=Values(choices=(0.5,))))
    test = ConfigurationSpace(name="test", tools=("mixtral", "calculator"), aliases=AliasPool(names=("b1", "b2")),
                              price=PriceSpace(factor=Values(choices=(2.0,))), held_out=("aliases", "prices"))
    env = Environment(train=[seen], test=[task], tools=box, configurations=train, test_configurations=test,
                      reward="rewards/toolorchestra.yaml")
    model = next(o.alias for o in env.configuration(task).tools if o.backend == "mixtral")
    engine = ScriptedEngine(tok, {"janet": [call(model)], "seen": ["18"]}, tasks=[task, seen])
    report = evaluate(engine, env, tasks=[task, seen])
    by = report.metrics["by_configuration"]
    assert {k: v["n"] for k, v in by["held_out"].items()} == {"held-out: aliases+prices": 1, "seen": 1}
    assert {k: v["n"] for k, v in by["space"].items()} == {"test": 1, "train": 1}
    assert {k: v["n"] for k, v in by["backend"].items()} == {"calculator": 2, "gpt4": 1, "mixtral": 1}
    assert set(by["price_band"]) == {"below list (×<0.8)", "above list (×>1.25)"}
    held = by["held_out"]["held-out: aliases+prices"]
    assert held["calls"] == {"mixtral": {"count": 1, "mean": 1.0, "share": 1.0}}  # by backend, not alias
    assert "held_out held-out: aliases+prices" in report.table()


def test_a_sweep_over_p_keeps_each_task_s_configuration(tiny_policy, box, task):
    from orchlib.sweep import sweep

    _, tok = tiny_policy
    from orchlib.configurations import bind
    from orchlib.reward import Reward

    s = space()
    c = draw(bind(s, box), s.seed, task.id, 0)
    alias = next(o.alias for o in c.tools if o.backend == "mixtral")
    result = sweep(ScriptedEngine(tok, [call(alias)]), [task], box, [PROFILES["accuracy"], PROFILES["thrifty"]],
                   reward=Reward.load("rewards/toolorchestra.yaml"), configurations=s)
    trajs = result.report.trajectories
    assert [t.configuration for t in trajs] == [c, c] and [t.calls for t in trajs] == [{"mixtral": 1}] * 2
    assert [p.preference.name for p in result.points] == ["accuracy", "thrifty"]
    assert [t.preference["name"] for t in trajs] == ["accuracy", "thrifty"]


def test_training_draws_each_step_s_configurations_and_the_panel_shows_them(tiny_policy, policy_cache):
    from conftest import TOY_ROLLOUT

    from orchlib.envs.toy import toy_tasks, toy_toolbox
    from orchlib.models import load_policy
    from orchlib.train import GRPOConfig, Trainer
    from orchlib.widgets import TrainerPanel

    model, tok = load_policy(next(Path(policy_cache).glob("default-tiny-s0-*")))  # a private copy: it trains
    s = ConfigurationSpace(aliases=AliasPool(generate=20), order="drawn",
                           price=PriceSpace(factor=Values(choices=(0.5, 2.0))))
    env = Environment(train=toy_tasks(2), tools=toy_toolbox(), configurations=s, reward="rewards/toolorchestra.yaml")
    cfg = GRPOConfig(tasks_per_step=2, group_size=2, rollout=RolloutConfig(**TOY_ROLLOUT))
    panel = TrainerPanel(Trainer((model, tok), env, cfg), background=False)
    for step in (0, 1):
        panel.step_button.click()
        for t in panel.reports[-1].trajectories:  # the step's episode index: step 0, then step 1
            assert t.configuration == env.configuration(next(x for x in env.train if x.id == t.task_id), step)
            assert not set(t.calls) & set(t.configuration.aliases)  # counted by backend, never by alias
    t = panel.reports[-1].trajectories[0]
    page = panel.conversation.value
    for o in t.configuration.tools:
        assert f"<b>{o.alias}</b> → {o.backend} ({o.price.describe()})" in page


def test_the_guide_s_snippets_run():
    """docs/configurations.md: its Python blocks, in order, in one namespace (they build on each other)."""
    import re

    text = (Path(__file__).parents[1] / "docs" / "configurations.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
    assert len(blocks) == 4
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/configurations.md", "exec"), namespace)  # noqa: S102  (our own docs)
    t, shown = namespace["t"], namespace["shown"]
    assert t.configuration == shown and t.outcome in (0.0, 1.0) and t.turns[0].observations[0].tool in shown.aliases
    # the third block's policy calls the first tool of every list it is shown: so it does, on every episode
    summary = namespace["heldout_summary"](namespace["trajs"])
    assert {p: (s.first_listed, s.well_formed) for p, s in summary.items()} == {"accuracy": (1.0, 1.0),
                                                                                 "thrifty": (1.0, 1.0)}
    # the fourth runs it on the rotated copies: where three tools are offered, each is first, so called, a third
    # of the time, and every episode ran once per tool it offered
    for numbers in namespace["three"].values():
        assert numbers.first_listed == 1.0
        assert numbers.backend_share == {b: 1 / 3 for b in ("calculator", "generalist", "specialist")}
    read = namespace["read"]
    assert len(namespace["rotated_trajs"]) == sum(len(t.tools) for t in read.test) > len(read.test)


class _ChatReadingTools:
    """An API-style policy that calls the last tool of the list it is given, whatever its name."""

    name, max_in_flight = "chat", 1

    def __init__(self):
        self.seen: list[list[str]] = []

    def start(self, system, user, tools):
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def session(self):
        import contextlib

        return contextlib.nullcontext()

    async def chat(self, messages, tools, session):
        from orchlib.engines.openai import ChatReply, PolicyCall

        names = [t["function"]["name"] for t in tools]
        self.seen.append(names)
        call = ToolCall(name=names[-1])
        return ChatReply(text="", content="", calls=[PolicyCall(call)], message={"role": "assistant", "content": ""},
                         tokens_in=10, tokens_out=5)


def test_an_api_policy_reads_the_aliases_and_its_call_reaches_the_backend(box, task):
    env = env_of(box, task, tools=(Slot(backends=("gpt4",), description="A tool."),
                                   Slot(backends=("mixtral",), description="A tool.")))
    policy = _ChatReadingTools()
    t = rollout(env, policy, config=CONFIG, episode=2)[0]
    c = env.configuration(task, 2)
    assert policy.seen == [[o.alias for o in c.tools]]
    last = c.tools[-1]
    obs = t.turns[0].observations[0]
    direct = box[last.backend].call_sync({}, ToolContext(task_id=task.id, prompt=task.prompt))
    assert (obs.tool, obs.content, t.calls) == (last.alias, direct.content, {last.backend: 1})
    assert obs.cost_usd == pytest.approx(direct.tokens_in * last.price.per_m_input / 1e6
                                         + direct.tokens_out * last.price.per_m_output / 1e6, rel=1e-12)


def test_the_audit_checks_an_episode_s_prices_under_its_aliases(box):
    from orchlib.audit import check_prices
    from orchlib.configurations import bind, episode_toolbox

    s = bind(space(price=PriceSpace(factor=Values(choices=(2.0,)))), box)
    c = draw(s, 0, "any", 0)
    gpt4 = next(o.alias for o in c.tools if o.backend == "gpt4")
    found = {(f.card, f.field): f for f in check_prices(episode_toolbox(c, box), factor=1.5).findings}
    listed = {(f.card, f.field): f for f in check_prices(box, factor=1.5).findings}
    assert listed[("gpt4", "price")].kind == "ok"  # the card's list price is the table's (10 / 30)
    off = found[(gpt4, "price.per_m_output")]
    assert (off.kind, off.card_value, off.model, off.file) == ("off", 60.0, "gpt-4-1106-preview", f"<card {gpt4}>")


@pytest.mark.parametrize("train, test, where, problem", [
    (ConfigurationSpace(sizes=(5,)), None, "configurations.sizes", "5 tools offered, but the environment has 4"),
    (ConfigurationSpace(held_out=("prices",)), None, "configurations.held_out",
     "held-out parts belong to the test space"),
    (ConfigurationSpace(price=PriceSpace(factor=(0.5, 1.5))),
     ConfigurationSpace(name="test", price=PriceSpace(factor=(1.2, 3.0)), held_out=("prices",)),
     "test_configurations.price", "held-out price factors [1.2, 3] overlap training's [0.5, 1.5]"),
    (ConfigurationSpace(tools=("gpt4", "calculator")),
     ConfigurationSpace(name="test", tools=("gpt4", "mixtral"), held_out=("backends",)),
     "test_configurations.tools", "held-out backends ['gpt4'] are offered in training"),
])
def test_a_space_that_does_not_fit_its_world_is_an_error_naming_the_field(box, task, train, test, where, problem):
    with pytest.raises(ConfigurationError) as e:
        Environment(train=[task], tools=box, configurations=train, test_configurations=test)
    assert str(e.value).startswith(f"{where}: {problem}") and "\n" not in str(e.value)
