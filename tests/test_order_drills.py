"""Order drills (orchlib.train.drills): what each drill asks for, its prompt and its SFT example, and the
accuracy check, on drills and replies written by hand."""

from __future__ import annotations

import pytest

from orchlib.chat import IM_END, render_assistant
from orchlib.configurations import generated_names
from orchlib.prompting import price_order_line
from orchlib.train.drills import (OrderDrill, order_drill_accuracy, order_drill_examples, order_drill_prompt,
                                  order_drills)
from orchlib.trajectory import ToolCall
from written_replies import WrittenReplies


def test_the_answer_is_the_end_of_the_line_that_p_names():
    assert OrderDrill("thrifty", ("tool_a", "tool_b", "tool_c")).answer == "tool_a"
    assert OrderDrill("accuracy", ("tool_a", "tool_b", "tool_c")).answer == "tool_c"
    assert OrderDrill("accuracy", ("tool_a", "tool_b")).answer == "tool_b"


def test_drills_draw_fresh_names_and_leave_the_excluded_out():
    held_out = set(generated_names(200)[100:])
    drills = order_drills(5, 600, exclude=held_out)
    assert drills == order_drills(5, 600, exclude=held_out) and drills != order_drills(6, 600, exclude=held_out)
    assert {len(d.names) for d in drills} == {2, 3}
    assert all(len(set(d.names)) == len(d.names) for d in drills)
    names = {n for d in drills for n in d.names}
    assert not names & held_out and len(names) > 1000  # far too many to learn by heart
    profiles = [d.profile for d in drills]
    assert 240 < profiles.count("thrifty") < 360 and set(profiles) == {"accuracy", "thrifty"}
    assert order_drills(5, 0) == []
    with pytest.raises(ValueError, match="n must be at least 0"):
        order_drills(5, -1)
    with pytest.raises(ValueError, match="each size must be from 2"):
        order_drills(5, 3, sizes=(1, 2))


def test_the_prompt_shows_p_and_the_line_the_rollout_shows(tiny_policy):
    _, tok = tiny_policy
    drill = OrderDrill("thrifty", ("tool_kemo", "tool_nupo", "tool_bada"))
    prompt = order_drill_prompt(drill, tok)
    # the rollout's own line for three tools whose prices per call rise in this order
    line = price_order_line([{"name": n, "call_price": p} for n, p in zip(drill.names, (0.001, 0.02, 0.3))])
    assert line + IM_END in prompt.splitlines()  # the system turn's last line
    assert "Preference (thrifty): accuracy=1, cost=1, latency=0" in prompt.splitlines()
    assert prompt.endswith("<|im_start|>assistant\n")


def test_at_user_the_lines_close_the_user_turn_as_the_rollout_places_them(tiny_policy):
    _, tok = tiny_policy
    drill = OrderDrill("accuracy", ("tool_kemo", "tool_nupo"))
    prompt = order_drill_prompt(drill, tok, at="user")
    assert prompt == ("<|im_start|>user\nCall one tool.\n\nPreference (accuracy): accuracy=1, cost=0, latency=0\n"
                      "From the cheapest per call to the dearest: tool_kemo, tool_nupo.<|im_end|>\n"
                      "<|im_start|>assistant\n")
    ex = order_drill_examples([drill], tok, at="user")[0]
    assert tok.decode(ex.ids[:ex.mask.index(1)]) == prompt
    # quote_names: the same prompt, the names in quotes as the rollout's line then writes them
    quoted = order_drill_prompt(drill, tok, at="user", quoted=True)
    assert quoted == prompt.replace("tool_kemo, tool_nupo.", '"tool_kemo", "tool_nupo".')
    assert price_order_line([{"name": "tool_kemo", "call_price": 0.1}, {"name": "tool_nupo", "call_price": 0.01}],
                            quoted=True) == 'From the cheapest per call to the dearest: "tool_nupo", "tool_kemo".'
    ex = order_drill_examples([drill], tok, at="user", quoted=True)[0]
    assert tok.decode(ex.ids[:ex.mask.index(1)]) == quoted
    with pytest.raises(ValueError, match='at must be "system" or "user"'):
        order_drill_prompt(drill, tok, at="assistant")


def test_the_example_trains_on_the_call_alone(tiny_policy):
    _, tok = tiny_policy
    drills = [OrderDrill("accuracy", ("tool_kemo", "tool_nupo")), OrderDrill("thrifty", ("tool_bada", "tool_lisu"))]
    for d, ex in zip(drills, order_drill_examples(drills, tok)):
        n = ex.mask.index(1)
        assert set(ex.mask[:n]) == {0} and set(ex.mask[n:]) == {1}
        assert tok.decode(ex.ids[:n]) == order_drill_prompt(d, tok)
        assert tok.decode(ex.ids[n:]) == render_assistant("", [ToolCall(name=d.answer)]) + IM_END


def test_accuracy_counts_exactly_the_answer_called_alone(tiny_policy):
    _, tok = tiny_policy
    drills = [OrderDrill("thrifty", ("tool_kemo", "tool_nupo"))] * 5
    call = render_assistant("", [ToolCall(name="tool_kemo")]) + IM_END
    replies = [call,                                                                  # right
               render_assistant("", [ToolCall(name="tool_nupo")]) + IM_END,          # the other end
               render_assistant("", [ToolCall(name="tool_kemu")]) + IM_END,          # miscopied
               render_assistant("", [ToolCall(name="tool_kemo"), ToolCall(name="tool_nupo")]) + IM_END,  # two
               '<tool_call>{"name": "tool_kemo"' + IM_END]                           # cut short
    assert order_drill_accuracy(WrittenReplies(tok, replies), drills) == pytest.approx(1 / 5)
    assert order_drill_accuracy(WrittenReplies(tok, [call] * 5), drills) == 1.0


def test_drill_order_trains_the_policy_for_its_budget_and_reports_it(tiny_policy):
    import copy

    import torch

    from orchlib.train.drills import OrderDrillConfig, drill_order
    from orchlib.train.sft import SFTConfig

    model, tok = tiny_policy
    model = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    # the gate is never measured within the budget (check_every > max_steps): the budget ends the drills
    cfg = OrderDrillConfig(n=48, held_out=4, check_every=100, sft=SFTConfig(max_steps=3, batch_size=8))
    got = drill_order(model, tok, cfg, exclude=generated_names(200)[100:], progress=False)
    assert got["steps"] == 3 and 0 <= got["accuracy"] <= 1 and got["seconds"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_drills_record_every_check_of_the_gate_and_the_last_measure(tiny_policy):
    """drill_to_gate's `checks`: [step, share] at every check until the gate, then the measure at the end.
    Scripted readings: 0.2 at step 2, 0.5 at 4, the gate (0.97) at 6, two margin steps unmeasured, and the
    last measure after step 8, where training stopped."""
    import copy

    from orchlib.train.drills import OrderDrillConfig, drill_to_gate
    from orchlib.train.sft import SFTConfig

    model, tok = tiny_policy
    model = copy.deepcopy(model)
    readings = iter([0.2, 0.5, 0.97, 0.99])
    cfg = OrderDrillConfig(n=8, held_out=1, gate=0.95, check_every=2, margin_steps=2,
                           sft=SFTConfig(max_steps=20, batch_size=4))
    examples = order_drill_examples(order_drills(3, 8), tok)
    got = drill_to_gate(model, tok, examples, cfg, lambda: next(readings), "drills", False, 0.0)
    assert got["checks"] == [[2.0, 0.2], [4.0, 0.5], [6.0, 0.97], [8.0, 0.99]]
    assert (got["steps"], got["accuracy"]) == (8.0, 0.99)


def test_the_gate_is_first_measured_at_first_check_and_the_margin_is_exact(tiny_policy):
    """first_check 3, every 2: measures at 3, 5, 7 (the gate); a margin of 3 is 3 steps (not a multiple of
    check_every), unmeasured, then the last measure at 10. With no margin the gate's measure is the last:
    the held-out drills are not decoded twice at one step."""
    import copy

    from orchlib.train.drills import OrderDrillConfig, drill_to_gate
    from orchlib.train.sft import SFTConfig

    model, tok = tiny_policy
    examples = order_drill_examples(order_drills(3, 8), tok)
    readings = iter([0.2, 0.5, 0.97, 0.99])
    cfg = OrderDrillConfig(n=8, held_out=1, gate=0.95, first_check=3, check_every=2, margin_steps=3,
                           sft=SFTConfig(max_steps=20, batch_size=4))
    got = drill_to_gate(copy.deepcopy(model), tok, examples, cfg, lambda: next(readings), "drills", False, 0.0)
    assert got["checks"] == [[3.0, 0.2], [5.0, 0.5], [7.0, 0.97], [10.0, 0.99]]
    assert (got["steps"], got["accuracy"]) == (10.0, 0.99)

    calls = []
    readings = iter([0.5, 0.96])
    cfg = cfg.model_copy(update={"margin_steps": 0})
    got = drill_to_gate(copy.deepcopy(model), tok, examples, cfg, lambda: calls.append(1) or next(readings),
                        "drills", False, 0.0)
    assert got["checks"] == [[3.0, 0.5], [5.0, 0.96]] and len(calls) == 2
    assert (got["steps"], got["accuracy"]) == (5.0, 0.96)


def test_a_run_drills_before_its_warm_start_and_records_it(tmp_path):
    import json

    from orchlib.train.drills import OrderDrillConfig
    from orchlib.train.run import RunConfig, run_training
    from orchlib.train.sft import SFTConfig

    cfg = RunConfig.model_validate({
        "policy": "tiny", "env": {"name": "orchestra-read", "seed": 3, "n_train": 4, "n_test": 4,
                                  "options": {"aliases": 400}, "reward": "rewards/toolorchestra.yaml"},
        "order_drills": OrderDrillConfig(n=32, held_out=4, check_every=100, sft=SFTConfig(max_steps=2, batch_size=8)),
        "warm_start_episodes": 2, "warm_start": {"max_steps": 1, "batch_size": 4}, "steps": 1,
        "grpo": {"tasks_per_step": 1, "group_size": 2,
                 "rollout": {"max_turns": 1, "max_new_tokens": 8, "tool_schema": "compact", "price_order": True}},
        "evaluation": {"baselines": ["cheapest"]}, "out": str(tmp_path / "run")})
    run_training(cfg, progress=False)
    ev = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert ev["warm_start"]["order_drills"]["steps"] == 2 and "order_drills" in ev["wall_s"]
    # warm_start.json, written before GRPO, holds the same record and the seconds of each phase
    warm = json.loads((tmp_path / "run" / "warm_start.json").read_text())
    assert warm["order_drills"] == ev["warm_start"]["order_drills"]
    assert warm["order_drills"]["checks"] == [[2.0, warm["order_drills"]["accuracy"]]]  # check_every > budget
    assert set(warm["wall_s"]) == {"load", "order_drills", "warm_start"}
