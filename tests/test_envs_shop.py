"""The shop domain: tables, tools, state hashes and the τ²-bench-style checker."""

from __future__ import annotations

import pytest

from orchlib.env import Environment
from orchlib.envs import shop
from orchlib.envs.shop import (WRITE_TOOLS, check, initial_db, make_shop_env, replay, shop_cancel_order,
                               shop_place_order, shop_tasks, shop_update_email)
from orchlib.tasks import Task
from orchlib.trajectory import ToolCall

TASKS = shop_tasks(0)


def perturbed(task: Task) -> list[ToolCall]:
    """The golden calls with one write changed, or one write added to a read-only task."""
    calls = list(task.golden.calls)
    db = make_shop_env(task)
    writes = [i for i, c in enumerate(calls) if c.name in WRITE_TOOLS]
    if not writes:
        return calls + [ToolCall(name="shop_update_email", arguments={"customer_id": "C001", "email": "x@y.org"})]
    i = writes[0]
    args = dict(calls[i].arguments)
    if calls[i].name == "shop_place_order":  # same order for another customer
        args["customer_id"] = next(c for c in sorted(db.customers) if c != args["customer_id"])
    elif calls[i].name == "shop_cancel_order":  # cancel another open order
        args["order_id"] = next(o for o, v in sorted(db.orders.items())
                                if v.status == "placed" and o != args["order_id"])
    else:
        args["email"] = "someone.else@" + args["email"].split("@")[1]
    calls[i] = ToolCall(name=calls[i].name, arguments=args)
    return calls


def test_pool_covers_every_kind_with_unique_prompts():
    kinds = {t.meta["kind"] for t in TASKS}
    assert kinds == {"price", "stock", "total", "orders", "order", "find_and_order", "cancel", "email"}
    assert len({t.prompt for t in TASKS}) == len({t.id for t in TASKS}) == len(TASKS)
    assert {t.meta["kind"] for t in TASKS[:8]} == kinds  # interleaved: a prefix is balanced


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_golden_scores_one_and_a_perturbed_write_scores_zero(task):
    assert check(task.golden.answer, task, replay(task)) == 1.0
    assert check(task.golden.answer, task, replay(task, perturbed(task))) == 0.0


def test_answer_must_name_required_facts():
    task = next(t for t in TASKS if t.meta["kind"] == "order")
    env = replay(task)
    assert check("Placed order O1001.", task, env) == 1.0
    assert check("Done.", task, env) == 0.0
    assert check("Placed order O10011.", task, env) == 0.0   # a longer id is not the id
    assert check(None, task, env) == 0.0


def test_read_task_scores_untouched_state_and_env_none_means_untouched():
    task = next(t for t in TASKS if t.meta["kind"] == "price")
    assert check(task.golden.answer, task, make_shop_env(task)) == 1.0
    assert check(task.golden.answer, task, None) == 1.0
    write = next(t for t in TASKS if t.meta["kind"] == "order")
    assert check(write.golden.answer, write, None) == 0.0  # the write never happened


def test_state_hash_is_deterministic_and_copies_are_independent():
    a, b = initial_db(0), initial_db(0)
    assert a.state_hash() == b.state_hash()
    assert initial_db(1).state_hash() != a.state_hash()
    shop_update_email(a, "C001", "ada@new.org")
    assert a.state_hash() != b.state_hash()
    assert initial_db(0).state_hash() == b.state_hash()  # the cached original was not touched


def test_place_and_cancel_by_hand():
    db = initial_db(0)
    p = db.products["P001"]
    stock, price = p.stock, p.price_cents
    out = shop_place_order(db, "C002", "P001", 2)
    assert out.startswith("placed O1001 for C002: 2 x Blue Mug")
    assert db.products["P001"].stock == stock - 2
    assert db.orders["O1001"].total_cents == 2 * price
    assert db.next_order == 1002
    shop_cancel_order(db, "O1001")
    assert db.products["P001"].stock == stock and db.orders["O1001"].status == "cancelled"


@pytest.mark.parametrize("call, message", [
    (lambda db: shop_place_order(db, "C001", "P001", 999), "in stock"),
    (lambda db: shop_place_order(db, "C999", "P001", 1), "no customer"),
    (lambda db: shop_place_order(db, "C001", "P999", 1), "no product"),
    (lambda db: shop_cancel_order(db, "O0003"), "shipped"),
    (lambda db: shop_update_email(db, "C001", "not-an-address"), "email"),
])
def test_bad_calls_raise_and_change_nothing(call, message):
    db = initial_db(0)
    before = db.state_hash()
    with pytest.raises(ValueError, match=message):
        call(db)
    assert db.state_hash() == before


def test_every_tool_is_listed_and_documented():
    assert set(shop.SHOP_TOOLS) == {n for n in shop.__all__ if n.startswith("shop_") and n != "shop_tasks"}
    for fn in shop.SHOP_TOOLS.values():
        assert "Args:" in fn.__doc__ and list(fn.__code__.co_varnames)[0] == "env"


def test_an_episode_is_scored_on_its_own_database():
    """Through the rollout: the agent's database is what the checker reads, so the right words after a
    wrong write score 0, and the right write with the required facts scores 1."""
    from orchlib.chat import render_call
    from orchlib.engines.scripted import ScriptedEngine
    from orchlib.envs.mini import shop_cards
    from orchlib.models import build_tokenizer
    from orchlib.rollout import RolloutConfig, rollout
    from orchlib.tools import Toolbox

    task = next(t for t in TASKS if t.meta["kind"] == "order")
    box, tok = Toolbox.from_cards(shop_cards()), build_tokenizer()
    config = RolloutConfig(max_turns=3, max_new_tokens=128)

    def agent(calls):
        return ScriptedEngine(tok, lambda prompt, turn: render_call(calls[turn]) if turn < len(calls)
                              else task.golden.answer)

    [right] = rollout(Environment(train=[task], tools=box), agent(task.golden.calls), config=config)
    [wrong] = rollout(Environment(train=[task], tools=box), agent(perturbed(task)), config=config)
    assert right.final_answer == wrong.final_answer == task.golden.answer
    assert right.outcome == 1.0 and wrong.outcome == 0.0
