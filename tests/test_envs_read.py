"""orchestra-read: what its prompt shows, its held-out test space, and golden data that never shows the
measured choice."""

from __future__ import annotations

from collections import Counter

import pytest

from orchlib.configurations import episode_view
from orchlib.envs import ENVIRONMENTS, make_environment
from orchlib.envs.read import READ_BACKENDS, TEST_FACTOR, TRAIN_FACTOR, make_read_suite, read_spaces
from orchlib.prompting import render_prompt, tool_schemas
from orchlib.rollout import RolloutConfig
from orchlib.train.sft import golden_trajectories


@pytest.fixture(scope="module")
def env():
    return make_environment("orchestra-read", seed=5, n_train=40, n_test=20)


def golden_backend(t):
    return t.golden.calls[0].name


def test_registered():
    assert "orchestra-read" in ENVIRONMENTS


def test_gsm8k_golden_is_counterbalanced_in_both_designs():
    for design in ("reading", "counterbalanced"):
        train = make_read_suite(7, n_train=60, n_test=4, golden=design).train
        gsm = [t for t in train if t.category == "gsm8k"]
        by_q: dict[str, dict[str, str]] = {}
        for t in gsm:
            by_q.setdefault(t.id.split("@")[0], {})[t.preference.name] = golden_backend(t)
        assert all(sorted(p) == ["accuracy", "thrifty"] and p["accuracy"] != p["thrifty"] for p in by_q.values())
        dear_under = Counter(p for q in by_q.values() for p, b in q.items() if b != "mixtral")
        assert dear_under["accuracy"] + dear_under["thrifty"] == len(by_q)
        assert abs(dear_under["accuracy"] - dear_under["thrifty"]) <= 1  # each way on half the questions


def test_arithmetic_golden_by_design():
    reading = make_read_suite(7, n_train=60, n_test=4, golden="reading").train
    balanced = make_read_suite(7, n_train=60, n_test=4, golden="counterbalanced").train
    for train in (reading, balanced):  # the calculator, where offered, under every profile
        assert {golden_backend(t) for t in train if "calculator" in t.tools} == {"calculator"}
    no_calc = [t for t in reading if t.category == "arithmetic" and "calculator" not in t.tools]
    assert no_calc and {(t.preference.name, golden_backend(t)) for t in no_calc} == {
        ("accuracy", "generalist"), ("thrifty", "specialist")}
    no_calc = [t for t in balanced if t.category == "arithmetic" and "calculator" not in t.tools]
    pairs = Counter((t.preference.name, golden_backend(t)) for t in no_calc)
    assert pairs["accuracy", "generalist"] == pairs["thrifty", "specialist"]
    assert abs(pairs["accuracy", "generalist"] - pairs["accuracy", "specialist"]) <= 1


def test_test_space_holds_out_names_and_prices(env):
    train_names = set(env.configurations.aliases.pool)
    for task, factor in [(t, TRAIN_FACTOR) for t in env.train] + [(t, TEST_FACTOR) for t in env.test]:
        c = env.configuration(task, 0)
        assert all(factor[0] <= o.factor <= factor[1] for o in c.tools)
        assert (set(c.aliases) <= train_names) == (factor == TRAIN_FACTOR)
        assert c.held_out == (() if factor == TRAIN_FACTOR else ("aliases", "prices"))
    # a question's two profile copies offer the same backends
    offers = {}
    for t in env.test:
        offers.setdefault(t.id.split("@")[0], set()).add(tuple(t.tools))
    assert all(len(v) == 1 for v in offers.values())


def test_a_larger_alias_pool_grows_training_s_names_and_keeps_the_test_s():
    from orchlib.configurations import generated_names

    default_train, default_test = read_spaces(3)
    train, test = read_spaces(3, aliases=1000)
    names = generated_names(1100)
    assert default_train.aliases.pool == names[:100] and default_test.aliases.pool == names[100:200]
    assert test.aliases.pool == names[100:200]  # the held-out names do not depend on training's
    assert train.aliases.pool == names[:100] + names[200:1100] and len(set(train.aliases.pool)) == 1000
    assert read_spaces(3, aliases=10)[0].aliases.pool == names[:10]
    env = make_environment("orchestra-read", seed=3, n_train=20, n_test=10, aliases=1000)
    drawn = {a for t in env.train for k in range(3) for a in env.configuration(t, k).aliases}
    assert drawn <= set(train.aliases.pool) and len(drawn - set(names[:100])) > 0
    for bad in (2, 4801):
        with pytest.raises(ValueError, match="aliases must be between 3 and 4800"):
            read_spaces(3, aliases=bad)


def test_the_prompt_names_no_backend(env, tiny_policy):
    _, tok = tiny_policy
    config = RolloutConfig(tool_schema="brief")  # the tool list orchestra-read's prompts are meant for
    for task in env.train[:6] + env.test[:6]:
        view = episode_view(env.configuration(task, 0), task, env.tools)
        system = render_prompt(view.task, tool_schemas(view.toolbox, view.task, config.tool_schema), tok, config)
        system = system[:system.index(task.prompt)]
        assert not [b for b in READ_BACKENDS if b in system.lower()] and "gpt" not in system.lower()
        for o in view.configuration.tools:  # shown with its description and the episode's prices
            assert f"{o.alias}: {o.description}" in system and o.price.describe() in system


def test_golden_trajectories_call_the_golden_backend_under_its_alias(env, tiny_policy):
    _, tok = tiny_policy
    tasks = env.train[:8]
    gold = golden_trajectories(tasks, env.tools, tok, RolloutConfig(max_turns=1, tool_schema="brief"),
                               configurations=env.configuration_space)
    for task, g in zip(tasks, gold):
        drawn = env.configuration(task, 0)  # every entry of the space; the question keeps those it offers
        assert g.configuration == drawn.model_copy(update={"tools": tuple(o for o in drawn.tools
                                                                          if o.backend in task.tools)})
        (call,) = g.turns[0].calls
        assert call.name in g.configuration.aliases and g.configuration.backend_of(call.name) == golden_backend(task)
        assert g.calls == {golden_backend(task): 1}


def test_each_description_says_where_its_price_per_call_stands(env, tiny_policy):
    _, tok = tiny_policy
    config = RolloutConfig(tool_schema="brief")
    seen = Counter()
    for task in env.train[:20] + env.test[:20]:
        view = episode_view(env.configuration(task, 0), task, env.tools)
        system = render_prompt(view.task, tool_schemas(view.toolbox, view.task, config.tool_schema), tok, config)
        # per call of 1,000 input and 1,000 output tokens at the shown prices, computed here by hand
        cost = {o.alias: (1000 * o.price.per_m_input + 1000 * o.price.per_m_output) / 1e6 + o.price.per_call
                + o.price.per_second * o.latency.seconds for o in view.configuration.tools}
        for alias, c in cost.items():
            line = next(ln for ln in system.splitlines() if ln.startswith(f"{alias}: "))
            word = "the lowest" if c == min(cost.values()) else "the highest" if c == max(cost.values()) else "between"
            assert line.count("Cost per call:") == 1 and f"Cost per call: {word}" in line
            seen[word] += 1
    assert seen["the lowest"] and seen["the highest"] and seen["between"]  # three-tool offers rank a middle one


def test_price_ranks_follow_the_drawn_prices_not_the_backend():
    from orchlib.configurations import price_rank_line

    assert price_rank_line(1.0, [1.0, 2.0]) == "Cost per call: the lowest of the tools offered."
    assert price_rank_line(2.0, [1.0, 2.0]) == "Cost per call: the highest of the tools offered."
    assert price_rank_line(1.5, [1.0, 1.5, 2.0]).startswith("Cost per call: between")
    assert price_rank_line(1.0, [1.0, 1.0]) == "Cost per call: the same as every other tool offered."
    from orchlib.configurations import ConfigurationSpace

    with pytest.raises(ValueError, match="price_ranks: a rank follows the prices; set show_prices too"):
        ConfigurationSpace(price_ranks=True)


def test_drills_add_arithmetic_reading_questions_outside_both_splits():
    plain = make_read_suite(7, n_train=20, n_test=10)
    drilled = make_read_suite(7, n_train=20, n_test=10, drills=12)
    assert drilled.test == plain.test and drilled.train[:len(plain.train)] == plain.train
    drills = drilled.train[len(plain.train):]
    assert len(drills) == 24 and {t.category for t in drills} == {"arithmetic"}
    split_prompts = {t.prompt for t in plain.train + plain.test}
    assert not split_prompts & {t.prompt for t in drills}
    by_q: dict[str, dict[str, str]] = {}
    for t in drills:
        assert t.tools == ["specialist", "generalist"]
        by_q.setdefault(t.prompt, {})[t.preference.name] = golden_backend(t)
    assert list(by_q.values()) == [{"accuracy": "generalist", "thrifty": "specialist"}] * 12
    with pytest.raises(ValueError, match="drills must be at least 0"):
        make_read_suite(7, n_train=20, n_test=10, drills=-1)


@pytest.mark.parametrize("schema", ["brief", "compact"])
def test_the_price_order_line_lists_the_offered_tools_by_price_per_call(env, tiny_policy, schema):
    _, tok = tiny_policy
    config = RolloutConfig(tool_schema=schema, price_order=True)
    for task in env.train[:10] + env.test[:10]:
        view = episode_view(env.configuration(task, 0), task, env.tools)
        system = render_prompt(view.task, tool_schemas(view.toolbox, view.task, config.tool_schema), tok, config)
        # by hand: a call of 1,000 input and 1,000 output tokens at the shown prices and declared latency
        cost = {o.alias: (1000 * o.price.per_m_input + 1000 * o.price.per_m_output) / 1e6 + o.price.per_call
                + o.price.per_second * o.latency.seconds for o in view.configuration.tools}
        (line,) = [ln for ln in system.splitlines() if ln.startswith("From the cheapest per call to the dearest: ")]
        assert line.removeprefix("From the cheapest per call to the dearest: ").removesuffix(".").split(", ") \
            == sorted(cost, key=cost.get)
        assert "call_price" not in system  # the key the line is built from is not shown
    plain = render_prompt(view.task, tool_schemas(view.toolbox, view.task, schema), tok,
                          RolloutConfig(tool_schema=schema))
    with pytest.raises(ValueError, match="price_order: the line follows the compact or brief list of tools"):
        RolloutConfig(price_order=True)  # tool_schema "full": the line would be left out unsaid
    assert "From the cheapest" not in plain and plain.replace("\n", "") in system.replace("\n" + line, "").replace(
        "\n", "")


def test_the_price_order_line_can_close_the_user_turn(env, tiny_policy):
    _, tok = tiny_policy
    at_system = RolloutConfig(tool_schema="compact", price_order=True, preference_at="user")
    at_user = at_system.model_copy(update={"price_order_at": "user"})
    task = env.test[0]
    view = episode_view(env.configuration(task, 0), task, env.tools)
    schemas = tool_schemas(view.toolbox, view.task, "compact")
    before, after = (render_prompt(view.task, schemas, tok, c) for c in (at_system, at_user))
    (line,) = [ln for ln in before.splitlines() if ln.startswith("From the cheapest per call to the dearest: ")]
    # the same line, moved: from the system turn's end to the user turn's, after the task and P
    user_turn = after[after.index("<|im_start|>user\n"):]
    p_line = view.preference.render(weights=True)
    assert user_turn == f"<|im_start|>user\n{view.task.prompt}\n\n{p_line}\n{line}<|im_end|>\n<|im_start|>assistant\n"
    assert after.replace("\n" + line, "") == before.replace("\n" + line, "")
    # one tool: no order to show, wherever it would go
    alone = view.task.model_copy(update={"tools": view.task.tools[:1]})
    assert "From the cheapest" not in render_prompt(alone, schemas[:1], tok, at_user)
