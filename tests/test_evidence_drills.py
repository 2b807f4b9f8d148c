"""Evidence drills (orchlib.train.evidence): what each drill asks for, what its prompt shows, its SFT example
and the accuracy check, on drills and replies written by hand; a run drills before its warm start."""

from __future__ import annotations

import re

import pytest
from conftest import load_benchmark

from orchlib.chat import IM_END, render_assistant
from orchlib.configurations import generated_names
from orchlib.describe_stats import Trial, newcombe, summarise
from orchlib.rollout import RolloutConfig
from orchlib.tasks import Task
from orchlib.train.evidence import (OTHER_CATEGORIES, EvidenceDrill, evidence_drill_accuracy, evidence_drill_examples,
                                    evidence_drill_prompt, evidence_drills)
from orchlib.trajectory import ToolCall
from written_replies import WrittenReplies

BRIEF = RolloutConfig(tool_schema="brief", price_order=True, max_turns=1,
                      system_prompt="You are an orchestrator. Call one tool; its answer is final.")
QUESTIONS = [Task(id=f"a{i}", prompt=f"What is {i} + {2 * i}?", category="arithmetic") for i in range(6)] + \
            [Task(id=f"g{i}", prompt=f"Ann has {i} apples and buys {i + 3} more. How many?", category="gsm8k")
             for i in range(6)]


def _stats(name: str, right: dict[str, tuple[int, int]]):
    """A tool's evidence written by hand: per category, (right, tried)."""
    trials = [Trial(task_id=f"{c}{i}", category=c, right=i < r, cost_usd=0.001, latency_s=2.0, error=None,
                    input="", output="") for c, (r, n) in right.items() for i in range(n)]
    return summarise(name, trials, examples=0)


def _drill(category="arithmetic", profile="thrifty"):
    stats = (_stats("kemo", {"arithmetic": (2, 10), "gsm8k": (9, 10)}),
             _stats("nupo", {"arithmetic": (9, 10), "gsm8k": (3, 10)}),
             _stats("bada", {"arithmetic": (5, 10), "gsm8k": (5, 10)}))
    question = QUESTIONS[0] if category == "arithmetic" else QUESTIONS[6]
    return EvidenceDrill(question.prompt, category, profile, ("kemo", "nupo", "bada"), stats)


def test_the_answer_is_the_tool_most_often_right_on_the_questions_kind():
    assert _drill("arithmetic").answer == "nupo"
    assert _drill("gsm8k").answer == "kemo"
    assert _drill("gsm8k", "accuracy").answer == "kemo"  # one price: both profiles ask for the same


def test_drills_draw_fresh_names_clear_evidence_and_other_categories():
    held_out = set(generated_names(4900, prefix="")[-300:])
    drills = evidence_drills(5, 300, QUESTIONS, exclude=held_out)
    assert drills == evidence_drills(5, 300, QUESTIONS, exclude=held_out)
    assert drills != evidence_drills(6, 300, QUESTIONS, exclude=held_out)
    names = {n for d in drills for n in d.names}
    assert not names & held_out and len(names) > 500 and {len(d.names) for d in drills} == {2, 3}
    by_prompt = {q.prompt: q.category for q in QUESTIONS}
    for d in drills:
        assert by_prompt[d.question] == d.category
        rates = sorted((s.categories[d.category].success_rate for s in d.stats), reverse=True)
        assert rates[0] - rates[1] >= 0.25 - 1e-9  # as shown: the evidence decides
        shown = set(d.stats[0].categories)
        assert d.category in shown and len(shown) >= 2 and all(set(s.categories) == shown for s in d.stats)
    # the answer's place in the list is drawn, as is the other categories reported
    assert {d.names.index(d.answer) for d in drills} == {0, 1, 2}
    assert {c for d in drills for c in d.stats[0].categories} - {"arithmetic", "gsm8k"} == set(OTHER_CATEGORIES)
    assert {d.profile for d in drills} == {"accuracy", "thrifty"}
    with pytest.raises(ValueError, match="n must be at least 0"):
        evidence_drills(5, -1, QUESTIONS)
    with pytest.raises(ValueError, match="no questions"):
        evidence_drills(5, 3, [])


def test_the_prompt_lists_each_tool_with_its_evidence_at_one_price(tiny_policy):
    _, tok = tiny_policy
    prompt = evidence_drill_prompt(_drill(), tok, BRIEF)
    lines = prompt.splitlines()
    for name in ("kemo", "nupo", "bada"):
        assert f'{{"name": "{name}", "arguments": []}}' in lines
    (nupo,) = [ln for ln in lines if ln.startswith("nupo: ")]
    assert nupo == ("nupo: Nupo: answers the question itself; its answer is final. Right on 90% of arithmetic "
                    "(n=10, 95% CI 60–98%), 30% of gsm8k (n=10, 95% CI 11–60%); mean cost $0.001, mean latency 2 s.")
    # one price: the order line keeps the list's order, so it says nothing of which to call
    assert "From the cheapest per call to the dearest: kemo, nupo, bada." in lines
    assert "Preference (thrifty): accuracy=1, cost=1, latency=0" in lines
    assert prompt.endswith(f"{QUESTIONS[0].prompt}{IM_END}\n<|im_start|>assistant\n")
    assert not any(ln.startswith("Most often right on") for ln in lines)  # evidence_order is off
    with pytest.raises(ValueError, match="shows no evidence to read: the rollout lists tools 'compact' without "
                                         "evidence_order"):
        evidence_drill_prompt(_drill(), tok, RolloutConfig(tool_schema="compact"))


def test_with_evidence_order_the_prompt_names_the_tools_by_their_rate_per_kind(tiny_policy):
    _, tok = tiny_policy
    # the compact list and the lines alone: the descriptions are not shown, the lines say what they measured
    compact = RolloutConfig(tool_schema="compact", evidence_order=True, price_order=True, max_turns=1)
    lines = evidence_drill_prompt(_drill(), tok, compact).splitlines()
    assert not any(ln.startswith("nupo: ") for ln in lines)
    # rates by hand (_drill): arithmetic kemo 0.2, nupo 0.9, bada 0.5; gsm8k kemo 0.9, nupo 0.3, bada 0.5;
    # the lines close the tools' part of the system turn, before the price-order line
    i = lines.index("Most often right on arithmetic: nupo, bada, kemo.")
    assert lines[i + 1:i + 3] == ["Most often right on gsm8k: kemo, bada, nupo.",
                                  "From the cheapest per call to the dearest: kemo, nupo, bada."]
    # quote_names: the drill's lines quote the names as the rollout's do
    quoted = evidence_drill_prompt(_drill(), tok, compact.model_copy(update={"quote_names": True})).splitlines()
    assert quoted[i:i + 3] == ['Most often right on arithmetic: "nupo", "bada", "kemo".',
                               'Most often right on gsm8k: "kemo", "bada", "nupo".',
                               'From the cheapest per call to the dearest: "kemo", "nupo", "bada".']
    # brief with the lines: the descriptions, then the lines
    both = BRIEF.model_copy(update={"evidence_order": True})
    lines = evidence_drill_prompt(_drill(), tok, both).splitlines()
    assert lines.index("Most often right on gsm8k: kemo, bada, nupo.") > max(
        i for i, ln in enumerate(lines) if ln.startswith(("kemo: ", "nupo: ", "bada: ")))


def test_the_example_trains_on_the_call_alone(tiny_policy):
    _, tok = tiny_policy
    drills = [_drill("arithmetic"), _drill("gsm8k", "accuracy")]
    for d, ex in zip(drills, evidence_drill_examples(drills, tok, BRIEF)):
        n = ex.mask.index(1)
        assert set(ex.mask[:n]) == {0} and set(ex.mask[n:]) == {1}
        assert tok.decode(ex.ids[:n]) == evidence_drill_prompt(d, tok, BRIEF)
        assert tok.decode(ex.ids[n:]) == render_assistant("", [ToolCall(name=d.answer)]) + IM_END


def test_accuracy_counts_exactly_the_answer_called_alone(tiny_policy):
    _, tok = tiny_policy
    drills = [_drill("arithmetic")] * 4
    call = lambda *names: render_assistant("", [ToolCall(name=n) for n in names]) + IM_END  # noqa: E731
    replies = [call("nupo"), call("kemo"), call("nupo", "bada"), '<tool_call>{"name": "nupo"' + IM_END]
    assert evidence_drill_accuracy(WrittenReplies(tok, replies), drills, BRIEF) == pytest.approx(1 / 4)


def test_a_run_drills_evidence_before_its_warm_start_and_records_it(tmp_path):
    import json

    from orchlib.train.run import RunConfig, run_training

    spec = {
        "policy": "tiny", "env": {"name": "orchestra-read", "seed": 3, "n_train": 4, "n_test": 4,
                                  "options": {"aliases": 400}, "reward": "rewards/toolorchestra.yaml"},
        "evidence_drills": {"n": 16, "held_out": 4, "check_every": 100, "sft": {"max_steps": 2, "batch_size": 4}},
        "warm_start": {"max_steps": 1, "batch_size": 4}, "steps": 1,
        "grpo": {"tasks_per_step": 1, "group_size": 2,
                 "rollout": {"max_turns": 1, "max_new_tokens": 8, "tool_schema": "brief", "price_order": True}},
        "evaluation": {"baselines": ["cheapest"]}, "out": str(tmp_path / "run")}
    run_training(RunConfig.model_validate(spec), progress=False)
    ev = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert ev["warm_start"]["evidence_drills"]["steps"] == 2 and "evidence_drills" in ev["wall_s"]
    warm = json.loads((tmp_path / "run" / "warm_start.json").read_text())
    assert warm["evidence_drills"]["checks"] == [[2.0, warm["evidence_drills"]["accuracy"]]]
    spec["grpo"]["rollout"]["tool_schema"] = "compact"
    with pytest.raises(ValueError, match=re.escape("grpo.rollout.tool_schema is 'compact' and evidence_order is "
                                                   "off; list the tools 'brief'")):
        RunConfig.model_validate(spec)
    spec["grpo"]["rollout"]["evidence_order"] = True  # the lines show the evidence: accepted
    assert RunConfig.model_validate(spec).grpo.rollout.evidence_order


def test_bench_describe_prints_each_drills_curve_from_the_runs_record():
    bench_describe = load_benchmark("bench_describe")
    warm = {"wall_s": {"load": 1.0, "order_drills": 61.4, "evidence_drills": 903.0, "warm_start": 40.0},
            "order_drills": {"steps": 30.0, "accuracy": 1.0, "checks": [[10.0, 0.5], [20.0, 0.96], [30.0, 1.0]]},
            "evidence_drills": {"steps": 50.0, "accuracy": 0.453, "checks": [[25.0, 0.391], [50.0, 0.453]]}}
    assert bench_describe.drill_lines(warm) == [
        "order drills: 30 steps in 61 s; held-out share at each check (step: share): 10: 0.50, 20: 0.96, 30: 1.00",
        "evidence drills: 50 steps in 903 s; held-out share at each check (step: share): 25: 0.39, 50: 0.45"]
    assert bench_describe.drill_lines({"wall_s": {}}) == [] and bench_describe.drill_lines(None) == []
    # the reader is tested as its recipe shows the evidence: as lines under the list it learned, else `brief`
    lines = RolloutConfig(tool_schema="compact", evidence_order=True, price_order=True)
    assert bench_describe.reader_rollout(lines) == lines
    assert bench_describe.reader_rollout(RolloutConfig(tool_schema="compact")).tool_schema == "brief"
    # a difference of shares keeps its interval inside [-1, 1]: 40 of 40 against 2 of 40 (Newcombe, by hand
    # from the two Wilson intervals: 0.95 - hypot(1 - 0.9124, 0.1650 - 0.05), 0.95 + hypot(0, 0.05 - 0.0138))
    assert bench_describe.diff_ci([True] * 2 + [False] * 38, [True] * 40) == "+0.95 (+0.81, +0.99)"
    assert bench_describe.diff_ci([], [True]) == "-"


def test_bench_describe_keeps_the_choice_apart_from_the_writing():
    bench_describe = load_benchmark("bench_describe")

    def row(arm, category, call, well_formed, profile="accuracy"):
        return {"arm": arm, "category": category, "profile": profile, "call": call, "listed_first": "lyra",
                "outcome": float(call == bench_describe.RIGHT[category]), "cost": 0.001, "well_formed": well_formed}

    # bare: two calls malformed ("vga", none), one right, one wrong; described: four right of four
    rows = [row("bare", "gsm8k", "atlas", True), row("bare", "gsm8k", "lyra", True),
            row("bare", "gsm8k", "vga", False), row("bare", "gsm8k", None, False)]
    rows += [row("described", "gsm8k", "atlas", True)] * 4
    rows += [row(arm, "arithmetic", "vega", True) for arm in ("bare", "described")]
    lines = bench_describe.unseen_tables(rows).splitlines()
    bare = next(line for line in lines if line.startswith("bare") and "gsm8k" in line).split()
    # episodes, right tool, first listed, well-formed, right of well-formed
    assert bare[2:9] == ["4", "0.25", "(0.05–0.70)", "0.25", "0.50", "1/2", "0.25"]
    described = next(line for line in lines if line.startswith("described") and "gsm8k" in line).split()
    assert described[2:9] == ["4", "1.00", "(0.51–1.00)", "0.00", "1.00", "4/4", "1.00"]
    delta = next(line for line in lines if line.startswith("described − bare") and "gsm8k" in line)
    lo, hi = newcombe(4, 4, 1, 4)
    assert delta.split()[-3:] == ["+0.75", f"({lo:+.2f},", f"{hi:+.2f})"]


def test_balanced_drills_ask_every_kind_equally_often():
    # 10 arithmetic questions to 2 GSM8K ones: drawn by question, GSM8K is a sixth of the drills; drawn by
    # kind first, about half
    skewed = [Task(id=f"a{i}", prompt=f"What is {i} + 7?", category="arithmetic") for i in range(10)] + QUESTIONS[6:8]
    share = lambda drills: sum(d.category == "gsm8k" for d in drills) / len(drills)  # noqa: E731
    plain, balanced = evidence_drills(5, 400, skewed), evidence_drills(5, 400, skewed, balance=True)
    assert share(plain) < 0.25 and 0.4 < share(balanced) < 0.6
    assert {d.question for d in balanced if d.category == "gsm8k"} == {q.prompt for q in QUESTIONS[6:8]}
    assert evidence_drills(5, 400, skewed, balance=True) == balanced  # the same draw for the same seed


def test_drill_evidence_draws_training_and_held_out_drills_as_its_config_says(tiny_policy, monkeypatch):
    import copy

    import orchlib.train.evidence as ev
    from orchlib.train.evidence import EvidenceDrillConfig, drill_evidence
    from orchlib.train.sft import SFTConfig

    model, tok = tiny_policy
    model = copy.deepcopy(model)  # trained in place: the session's policy stays as built
    seen, draw = [], ev._draw
    monkeypatch.setattr(ev, "_draw", lambda *a, **k: seen.append(a[-3:]) or draw(*a, **k))
    config = EvidenceDrillConfig(n=4, held_out=2, check_every=1, balance_kinds=True, decoys=True, every_kind=True,
                                 sft=SFTConfig(max_steps=1, batch_size=2))
    lines = RolloutConfig(tool_schema="compact", evidence_order=True, max_turns=1)
    record = drill_evidence(model, tok, config, QUESTIONS, lines, progress=False)
    # the training drills, then the gate's: each balanced, with decoys and every kind on its lines
    assert seen == [(True, True, True), (True, True, True)] and record["steps"] == 1


def test_the_warm_starts_drills_carry_the_draw_on_past_those_trained(tiny_policy):
    from orchlib.train.evidence import EvidenceDrillConfig, warm_start_drills

    _, tok = tiny_policy
    config = EvidenceDrillConfig(n=20, in_warm_start=12, seed=5)
    gate = generated_names(4900, prefix="")[-300:]
    mixed = warm_start_drills(config, QUESTIONS, tok, BRIEF)
    trained = evidence_drill_examples(evidence_drills(5, 20, QUESTIONS, exclude=gate), tok, BRIEF)
    carried = evidence_drills(5, 32, QUESTIONS, exclude=gate)[20:]
    assert [ex.ids for ex in mixed] == [ex.ids for ex in evidence_drill_examples(carried, tok, BRIEF)]
    assert len(mixed) == 12 and not {tuple(ex.ids) for ex in mixed} & {tuple(ex.ids) for ex in trained}
    assert not {n for d in carried for n in d.names} & set(gate)  # the gate's names stay unseen
    for ex, d in zip(mixed, carried):  # the loss on the call of the drill's answer alone
        assert tok.decode([i for i, m in zip(ex.ids, ex.mask) if m]).count(f'"name": "{d.answer}"') == 1
    assert warm_start_drills(config.model_copy(update={"in_warm_start": 0}), QUESTIONS, tok, BRIEF) == []


def test_a_warm_start_mixes_in_the_drills_its_config_asks_for(monkeypatch):
    import orchlib.train.sft as sft
    from orchlib.train.run import RunConfig, load_environment, warm_started_policy
    from orchlib.trajectory import Trajectory

    spec = {
        "policy": "tiny", "env": {"name": "orchestra-read", "seed": 3, "n_train": 4, "n_test": 4,
                                  "options": {"aliases": 400}, "reward": "rewards/toolorchestra.yaml"},
        "evidence_drills": {"n": 8, "held_out": 2, "check_every": 100, "in_warm_start": 6,
                            "sft": {"max_steps": 1, "batch_size": 4}},
        "warm_start": {"max_steps": 1, "batch_size": 4}, "warm_start_episodes": 2, "steps": 0,
        "grpo": {"rollout": {"max_turns": 1, "max_new_tokens": 8, "tool_schema": "brief"}}}
    cfg = RunConfig.model_validate(spec)
    env = load_environment(cfg)
    fed, train = [], sft.sft_train
    monkeypatch.setattr(sft, "sft_train", lambda model, tok, examples, *a, **k: fed.append(list(examples)) or
                        train(model, tok, examples, *a, **k))
    record: dict = {}
    warm_started_policy(cfg, env, progress=False, record=record)
    golden = 2 * sum(t.golden is not None for t in env.train)
    assert [sum(isinstance(x, Trajectory) for x in fed[-1]), len(fed[-1])] == [golden, golden + 6]
    assert record["warm_start"] == {"golden": golden, "evidence_drills": 6}
    spec["warm_start"] = None
    with pytest.raises(ValueError, match=re.escape("evidence_drills.in_warm_start: 6 drills to mix into the warm "
                                                   "start, but warm_start is null")):
        RunConfig.model_validate(spec)


def test_with_decoys_neither_the_first_line_nor_one_kinds_line_passes_the_drills():
    from orchlib.train.evidence import DECOY_CATEGORIES

    def leader(d, kind):  # the first name on `kind`'s line: the highest rate, ties to the first listed
        rates = [s.categories[kind].success_rate for s in d.stats]
        return d.names[rates.index(max(rates))]

    def shares(drills):
        first = sum(leader(d, sorted(d.stats[0].categories)[0]) == d.answer for d in drills) / len(drills)
        arithmetic = sum("arithmetic" in d.stats[0].categories and leader(d, "arithmetic") == d.answer
                         for d in drills) / len(drills)
        return first, arithmetic

    plain, decoys = evidence_drills(5, 400, QUESTIONS), evidence_drills(5, 400, QUESTIONS, decoys=True)
    assert shares(plain)[0] > 0.8  # as drawn before: "the first name of the first line" passes a 0.8 gate
    first, arithmetic = shares(decoys)
    assert first < 0.6 and arithmetic < 0.6
    for d in decoys:  # the right tool leads its question's line and no other
        kinds = sorted(d.stats[0].categories)
        assert [k for k in kinds if leader(d, k) == d.answer] == [d.category]
        assert set(kinds) <= {"arithmetic", "gsm8k", *DECOY_CATEGORIES}
    # the question's line is first on some drills of each kind, and not on most
    for kind in ("arithmetic", "gsm8k"):
        own = [sorted(d.stats[0].categories)[0] == kind for d in decoys if d.category == kind]
        assert 0.2 < sum(own) / len(own) < 0.7
    # without decoys the draw is the one recorded runs drew
    assert [(d.names, d.category) for d in plain[:2]] == [(("zipe", "zimu", "dome"), "gsm8k"),
                                                         (("geza", "rami", "sogo"), "gsm8k")]


def test_with_every_kind_each_drill_shows_both_kinds_and_no_line_alone_passes():
    """A card described on the questions' kinds shows a line for each of them; drills with `every_kind` do
    too. Without it most drills show one of the two, and "the gsm8k line's leader, else the last line's"
    answers most of them; with it each kind's line answers its own questions alone."""

    def leader(d, kind):  # the first name on `kind`'s line: the highest rate, ties to the first listed
        rates = [s.categories[kind].success_rate for s in d.stats]
        return d.names[rates.index(max(rates))]

    def share(drills, line):
        return sum(line(d) in d.stats[0].categories and leader(d, line(d)) == d.answer for d in drills) / len(drills)

    decoys = evidence_drills(5, 400, QUESTIONS, balance=True, decoys=True)
    every = evidence_drills(5, 400, QUESTIONS, balance=True, decoys=True, every_kind=True)
    both = [{"arithmetic", "gsm8k"} <= set(d.stats[0].categories) for d in decoys]
    assert sum(both) / len(both) < 0.3  # without it few drills look like the described card
    gsm8k_line = lambda d: "gsm8k" if "gsm8k" in d.stats[0].categories else sorted(d.stats[0].categories)[-1]  # noqa: E731
    assert share(decoys, gsm8k_line) > 0.6  # and one kind's line, else the last, answers most of them
    for d in every:
        kinds = sorted(d.stats[0].categories)
        assert {"arithmetic", "gsm8k"} <= set(kinds) and len(kinds) <= 3
        assert [k for k in kinds if leader(d, k) == d.answer] == [d.category]  # the decoys still hold
    for line in (gsm8k_line, lambda d: "arithmetic", lambda d: sorted(d.stats[0].categories)[0],
                 lambda d: sorted(d.stats[0].categories)[-1]):
        assert share(every, line) < 0.6
    kinds = [d.category for d in every]
    assert 0.4 < kinds.count("gsm8k") / len(kinds) < 0.6
    # one kind of question alone: its line, and at most one more
    alone = evidence_drills(5, 50, QUESTIONS[:6], decoys=True, every_kind=True)
    assert all(1 <= len(d.stats[0].categories) <= 2 and d.category == "arithmetic" for d in alone)
