"""demo.reading_drills: the demo's prompts, offering a pair of tools the demo never offers, with the call
that the shown P names as the only supervised text."""

from collections import Counter

from orchlib.chat import IM_END, parse_tool_calls
from orchlib.demo import DEMO_ROLLOUT, DEMO_TOOL_NAMES, READING_PAIR, demo_suite, reading_drills
from orchlib.prompting import render_prompt, tool_schemas


def test_drills_supervise_only_the_call_that_p_names(tiny_policy):
    _, tok = tiny_policy
    train, _, box = demo_suite(0, n_train=8, n_test=4)
    drills = reading_drills(train, 40, tok, seed=3)
    assert len(drills) == 40
    seen = Counter()
    for i, ex in enumerate(drills):
        cut = ex.mask.index(1)
        assert set(ex.mask[cut:]) == {1}  # prompt unsupervised, then only the reply
        prompt, reply = tok.decode(ex.ids[:cut]), tok.decode(ex.ids[cut:])
        profile = next(p for p in READING_PAIR if f"Preference ({p})" in prompt)
        seen[profile] += 1
        # the prompt is the rollout's own rendering of the task (cycled), P and tools aside
        task = train[i % len(train)]
        assert task.prompt in prompt and prompt.endswith("<|im_start|>assistant\n")
        listed = {s["name"] for s in tool_schemas(box, task, "compact")}
        assert listed <= set(DEMO_TOOL_NAMES) and not any(f'"name": "{t}"' in prompt for t in listed)
        assert all(f'"name": "{t}"' in prompt for t in READING_PAIR.values())
        calls = parse_tool_calls(reply.removesuffix(IM_END))[1]
        assert reply.endswith(IM_END) and [c.name for c in calls] == [READING_PAIR[profile]]
    assert set(seen) == set(READING_PAIR) and min(seen.values()) >= 10  # both profiles, drawn at random
    # same seed, same drills
    again = reading_drills(train, 40, tok, seed=3)
    assert [d.ids for d in again] == [d.ids for d in drills]
    assert not set(READING_PAIR.values()) & set(DEMO_TOOL_NAMES)
    assert reading_drills(train, 0, tok, seed=3) == [] and reading_drills([], 5, tok, seed=3) == []


def test_drill_prompt_is_the_rollout_rendering(tiny_policy):
    from orchlib.demo import as_reading, reading_toolbox

    _, tok = tiny_policy
    train, _, _ = demo_suite(0, n_train=8, n_test=4)
    ex = reading_drills(train[:1], 1, tok, seed=0)[0]
    profile = next(p for p in READING_PAIR if f"({p})" in tok.decode(ex.ids))
    t = as_reading(train[0], profile)
    want = render_prompt(t, tool_schemas(reading_toolbox(), t, DEMO_ROLLOUT.tool_schema), tok, DEMO_ROLLOUT)
    assert ex.ids[:ex.mask.index(1)] == tok.encode(want, add_special_tokens=False)


def test_demo_flag_turns_on_the_measured_reading_setting():
    from orchlib.cli import build_parser
    from orchlib.commands.demo import config_from
    from orchlib.demo import DemoConfig

    plain = config_from(build_parser().parse_args(["demo", "--seed", "2"]))
    assert plain == DemoConfig(seed=2) and plain.warm_start.reading_drills == 400
    drilled = config_from(build_parser().parse_args(["demo", "--seed", "2", "--reading-drills"]))
    assert drilled.warm_start.reading_drills == 800 and drilled.warm_start.golden.max_steps == 450
    # the rest of the nested settings are the demo's own, not the library's defaults
    assert drilled.warm_start.golden.learning_rate == plain.warm_start.golden.learning_rate
    assert drilled.model_copy(update={"warm_start": plain.warm_start}) == plain
