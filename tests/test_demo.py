"""A shortened demo, end to end: every phase runs, the files are written, and the numbers it reports
agree with an independent count over the trajectories it saved."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import load_benchmark

from orchlib.configfile import merged
from orchlib.demo import DEMO_TOOL_NAMES, DemoConfig, demo_suite, run_demo
from orchlib.trajectory import read_jsonl


@pytest.fixture(scope="module")
def demo(tmp_path_factory, policy_cache):
    mp = pytest.MonkeyPatch()
    mp.setenv("ORCHLIB_CACHE", str(policy_cache))
    out = tmp_path_factory.mktemp("demo")
    cfg = merged(DemoConfig(), {"steps": 12, "n_train": 40, "n_test": 12, "eval_samples": 1, "out": str(out),
                                "warm_start": {"copy_drills": 64, "copying": {"max_steps": 30},
                                               "golden": {"max_steps": 20},
                                               "extra_arithmetic": 16, "extra_gsm8k": 16, "reading_drills": 32}})
    yield run_demo(cfg, progress=False)
    mp.undo()


def test_demo_writes_report_metrics_and_trajectories(demo):
    out = demo.out
    m = json.loads((out / "metrics.json").read_text())
    for key in ("controllability_points", "reward_first10", "reward_last10", "wall_s", "policies", "format", "checks"):
        assert key in m, key
    for policy in ("before RL", "orchestrator", "strongest", "cheapest", "random", "oracle"):
        for profile in ("accuracy", "thrifty"):
            assert {"accuracy", "cost_usd", "latency_s", "calls"} <= set(m["policies"][policy][profile])
    html = (out / "report.html").read_text()
    assert html.count("plotly-graph-div") >= 6 and "orchlib demo" in html and "Where GRPO pushes" in html
    # what was learned first, then the checks, then the numbers (tests/test_demo_report.py checks the page)
    assert html.index("plotly-graph-div") > html.index("<section id='learned'>")
    assert html.index("<section id='learned'>") < html.index("<section id='checks'>") < html.index("<table>")
    assert set(m["wall_s"]) >= {"warm_start", "grpo", "eval_before", "eval_after", "baselines"}
    assert len(demo.history) == 12 and "checks:" in demo.table
    assert [h["step"] for h in m["history"]] == [h["step"] for h in demo.history]
    # first the objective this run's GRPO trained with (the shortened demo keeps the demo's variant), then the table
    first, table_head = demo.table.splitlines()[:2]
    assert first.startswith("trained with a variant of the paper's GRPO") and first.endswith("(docs/results.md)")
    header = table_head.split()
    assert [h for h in header if h != "calls"][8:] == ["calculator", "generalist", "mixtral", "unknown"]
    assert m["format"]["copy_drill_steps"] == 30  # the gate is checked every 50 steps: never reached here
    # the exact choice gap is measured on the warm start and again on the trained weights, which differ
    # once a step kept a group (a shortened warm start can leave every group of 12 steps without spread)
    before, after = m["format"]["choice_gap_points"], m["choice_gap_points"]
    updated = any(h.get("groups_kept", 0) > 0 for h in m["history"])
    assert -100 <= before <= 100 and -100 <= after <= 100 and (before != after) == updated
    assert f"{after:.2f} points (before RL: {before:.2f})" in demo.table
    # the profile gradient cosine, likewise on both sets of weights (a cosine: within [-1, 1])
    cos_before, cos_after = m["format"]["profile_cosine"], m["profile_cosine"]
    assert -1 <= cos_before <= 1 and -1 <= cos_after <= 1 and (cos_before != cos_after) == updated
    assert f"was {1 - cos_before:.1e} (after RL: {1 - cos_after:.2f}; the demo aims for >= 1e-2 before RL)" \
        in demo.table
    # and on the reading drills' own pair, which the demo never offers
    reading = m["format"]["reading_gap_points"]
    assert -100 <= reading <= 100 and reading != before and f"reading drills' pair: {reading:.1f} points" in demo.table


def test_reported_numbers_match_the_saved_trajectories(demo):
    trajs = read_jsonl(demo.out / "trajectories.jsonl")
    assert len(trajs) == 12 * 2  # test tasks x profiles x 1 sample
    m = demo.metrics
    for prof in ("accuracy", "thrifty"):
        sub = [t for t in trajs if t.preference["name"] == prof]
        calls = sum(sum(t.calls.values()) for t in sub)
        share = sum(t.calls.get("generalist", 0) for t in sub) / calls if calls else 0.0
        assert m["policies"]["orchestrator"][prof]["generalist_share"] == pytest.approx(share)
        assert m["policies"]["orchestrator"][prof]["accuracy"] == pytest.approx(sum(t.outcome for t in sub) / len(sub))
    for prof in ("accuracy", "thrifty"):  # the report's first chart: calls per backend, counted here by name
        counts: Counter[str] = Counter()
        for t in (t for t in trajs if t.preference["name"] == prof):
            for k, v in t.calls.items():
                counts[k if k in DEMO_TOOL_NAMES else "unknown"] += v
        total = sum(counts.values())
        names = sorted(DEMO_TOOL_NAMES) + (["unknown"] if counts["unknown"] else [])
        want = {k: counts[k] / total for k in names} if total else {}  # no calls at all: no shares
        assert m["backend_share"]["after RL"][prof] == pytest.approx(want)
    gap = 100 * (m["policies"]["orchestrator"]["accuracy"]["generalist_share"]
                 - m["policies"]["orchestrator"]["thrifty"]["generalist_share"])
    assert m["controllability_points"] == pytest.approx(gap)
    # per category, from the split's own task list (not the trajectories' category field)
    category = {t.id: t.category for t in demo_suite(0, 40, 12)[1]}
    assert set(m["controllability_by_category"]["orchestrator"]) == set(category.values()) == {"arithmetic", "gsm8k"}
    for cat in ("arithmetic", "gsm8k"):
        shares = []
        for prof in ("accuracy", "thrifty"):
            sub = [t for t in trajs if category[t.task_id.rsplit("@", 1)[0]] == cat and t.preference["name"] == prof]
            calls = sum(sum(t.calls.values()) for t in sub)
            shares.append(sum(t.calls.get("generalist", 0) for t in sub) / calls if calls else 0.0)
        assert m["controllability_by_category"]["orchestrator"][cat] == pytest.approx(100 * (shares[0] - shares[1]))
        assert f"{cat} {100 * (shares[0] - shares[1]):.1f}" in demo.table
    rewards = [h["reward"] for h in demo.history]
    assert m["reward_in_group_first10"] == pytest.approx(sum(rewards[:10]) / 10)
    assert m["reward_in_group_last10"] == pytest.approx(sum(rewards[-10:]) / 10)
    anchored = [h["reward_anchored"] for h in demo.history]
    assert len(anchored) == 12 and all(0.0 <= a <= 3.0 for a in anchored)  # at most outcome + cost + latency
    assert m["reward_first10"] == pytest.approx(sum(anchored[:10]) / 10)
    assert m["reward_last10"] == pytest.approx(sum(anchored[-10:]) / 10)
    assert m["checks"]["reward_last10>first10"] == (m["reward_last10"] > m["reward_first10"])
    for prof in ("accuracy", "thrifty"):  # per profile, the groups that carried a signal, summed per step
        kept = [h[f"profile/{prof}/groups_kept"] for h in demo.history]
        assert m["groups_kept_per_step"][prof] == pytest.approx(sum(kept) / len(kept))
        assert f"{prof} {sum(kept) / len(kept):.2f}" in demo.table
    both = [h["profile/accuracy/groups_kept"] + h["profile/thrifty/groups_kept"] for h in demo.history]
    assert both == [h["groups_kept"] for h in demo.history]
    for prof in ("accuracy", "thrifty"):  # where the updates pushed: steps whose rollouts called the generalist
        pushes = [h[f"profile/{prof}/advantage/generalist"] for h in demo.history
                  if f"profile/{prof}/advantage/generalist" in h]
        want = sum(pushes) / len(pushes) if pushes else float("nan")
        assert m["generalist_advantage_per_step"][prof] == pytest.approx(want, nan_ok=True)


def test_the_oracle_is_never_beaten_on_accuracy(demo):
    pol = demo.metrics["policies"]
    for name in ("orchestrator", "strongest", "cheapest", "random"):
        assert pol[name]["all"]["accuracy"] <= pol["oracle"]["all"]["accuracy"] + 1e-9


def test_the_trained_policy_comes_back_and_sweeps_over_p(demo):
    """`run_demo` returns the trained policy and its world; `sweep` runs it under each P of a grid on the
    demo's test tasks: one point per P, from exactly the runs made under that P, each prompt showing it."""
    from orchlib.demo.config import DEMO_ROLLOUT
    from orchlib.engines import TransformersEngine
    from orchlib.prompting import render_prompt, tool_schemas
    from orchlib.sweep import preference_grid, sweep

    model, tok = demo.policy
    assert not model.training and len(demo.env.test) == 12 and demo.env.reward is not None
    tasks = demo.env.test[:4]
    prefs = preference_grid(cost=[0, 2])
    result = sweep(TransformersEngine(model, tok, seed=0), tasks, demo.env.tools, prefs, config=DEMO_ROLLOUT)
    assert [p.preference.name for p in result.points] == [p.name for p in prefs]
    for point, pref in zip(result.points, prefs):
        runs = [t for t in result.report.trajectories if t.preference["name"] == pref.name]
        assert point.n == len(runs) == len(tasks)
        assert point.accuracy == pytest.approx(sum(t.outcome for t in runs) / len(runs), abs=1e-12)
        assert point.cost_usd == pytest.approx(sum(t.cost_usd for t in runs) / len(runs), rel=1e-9, abs=1e-15)
        shown = render_prompt(tasks[0].model_copy(update={"preference": pref}),
                              tool_schemas(demo.env.tools, tasks[0], DEMO_ROLLOUT.tool_schema), tok, DEMO_ROLLOUT)
        # the policy read this P, not the profile it was trained under: a grid point has no words written, so
        # the demo's rollout shows its sentences and its weights
        assert pref.render(instruction=True) in shown and f"({pref.render().split(': ', 1)[1]})" in shown


def test_the_demos_rollout_setting_reaches_every_phase(tmp_path, monkeypatch, policy_cache):
    """`grpo.rollout` renders the prompts of the warm start's golden trajectories and reading drills and of
    every evaluation, as it renders GRPO's: here its price-order line is in all of them."""
    import importlib

    from orchlib.prompting import PRICE_ORDER_OPENING

    # the modules themselves (the package `orchlib` exports a function named `evaluate`)
    train_mod, evaluate_mod = importlib.import_module("orchlib.train"), importlib.import_module("orchlib.evaluate")
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    trained_on, evaluated = [], []
    real_sft, real_evaluate = train_mod.sft_train, evaluate_mod.evaluate

    def sft(model, tok, examples, *a, **kw):
        trained_on.append([tok.decode(e.ids) for e in examples])
        return real_sft(model, tok, examples, *a, **kw)

    def evaluate(engine, env, *a, **kw):
        report = real_evaluate(engine, env, *a, **kw)
        evaluated.append((kw.get("name"), kw.get("config")))
        return report

    monkeypatch.setattr(train_mod, "sft_train", sft)
    monkeypatch.setattr(evaluate_mod, "evaluate", evaluate)
    cfg = merged(DemoConfig(), {"steps": 2, "n_train": 8, "n_test": 4, "eval_samples": 1, "out": str(tmp_path),
                                "grpo": {"tasks_per_step": 2, "group_size": 2, "rollout": {"price_order": True}},
                                "warm_start": {"copy_drills": 16, "copying": {"max_steps": 2},
                                               "golden": {"max_steps": 2}, "extra_arithmetic": 4,
                                               "extra_gsm8k": 4, "reading_drills": 4}})
    result = run_demo(cfg, progress=False)
    copy, golden = trained_on  # phase 1's drills are the short format: a user turn, no tools
    assert copy and not any(PRICE_ORDER_OPENING in t for t in copy)
    assert len(golden) > 4 and all(PRICE_ORDER_OPENING in t for t in golden)
    assert sum("gpt4" in t for t in golden) == 4  # the reading drills, rendered alike
    assert {n for n, _ in evaluated} >= {"orchestrator", "strongest", "cheapest", "random", "oracle"}
    assert all(ro == cfg.grpo.rollout for _, ro in evaluated)
    # the policy's own runs: their prompt ids hold the line
    runs = read_jsonl(tmp_path / "trajectories.jsonl")
    assert runs and all(PRICE_ORDER_OPENING in result.policy[1].decode(t.ids[:t.prompt_len]) for t in runs)
    assert len(result.history) == 2


def test_copy_drills_show_p_where_the_configs_rollout_puts_it():
    """Phase 1's short prompts follow the config's rollout: the demo's own shows each profile's words after
    the question; a rollout with P in the system turn shows none (the short format has no system turn)."""
    from orchlib.demo.app import copy_drills, copy_examples
    from orchlib.demo.config import DEMO_ROLLOUT, DEMO_WORDS
    from orchlib.models import build_default_policy

    _, tok = build_default_policy("tiny", seed=0)
    drills = copy_drills(0, 4, set())
    shown = [tok.decode(e.ids) for e in copy_examples(drills, tok)]
    assert all(f"{t.prompt}\n\nPreference ({t.preference.name}): {DEMO_WORDS[t.preference.name]}<|im_end|>" in text
               for t, text in zip(drills, shown))
    system = DEMO_ROLLOUT.model_copy(update={"preference_at": "system"})
    assert not any("Preference (" in tok.decode(e.ids) for e in copy_examples(drills, tok, system))


def test_the_demo_shows_p_in_words_and_the_weights_example_as_it_was():
    """The demo's prompt shows each profile's words, and no weights, after the question;
    examples/demo_p_as_weights.yaml (loaded as `orchlib demo --config` loads it) shows the weights in the
    system turn, with the warm start and GRPO as they were before the words."""
    from pathlib import Path

    from orchlib.cli import build_parser
    from orchlib.commands.demo import config_from
    from orchlib.demo.config import DEMO_ROLLOUT, DEMO_WORDS, DemoConfig
    from orchlib.models import build_default_policy
    from orchlib.prompting import render_prompt, tool_schemas
    from orchlib.tasks import PROFILES

    _, tok = build_default_policy("tiny", seed=0)
    train, _, box = demo_suite(0, 8, 4)
    ro = DemoConfig().grpo.rollout
    assert ro == DEMO_ROLLOUT
    lines = {}
    for name in ("accuracy", "thrifty"):
        task = train[-1].model_copy(update={"preference": PROFILES[name]})
        prompt = render_prompt(task, tool_schemas(box, task, ro.tool_schema), tok, ro)
        lines[name] = f"Preference ({name}): {DEMO_WORDS[name]}"
        assert f"{task.prompt}\n\n{lines[name]}<|im_end|>" in prompt and prompt.count("Preference (") == 1
        assert "cost=" not in prompt
    # after the profile's name the two lines differ in nearly every place, not in one digit
    a, t = (tok.encode(lines[n].split(": ", 1)[1], add_special_tokens=False) for n in ("accuracy", "thrifty"))
    assert min(len(a), len(t)) >= 30 and sum(x != y for x, y in zip(a, t)) >= 0.9 * min(len(a), len(t))

    example = Path(__file__).parents[1] / "examples" / "demo_p_as_weights.yaml"
    old = config_from(build_parser().parse_args(["demo", "--config", str(example)]))
    assert (old.grpo.rollout.preference_at, old.grpo.rollout.preference_style) == ("system", "weights")
    assert (old.warm_start.reading_drills, old.warm_start.golden.max_steps, old.steps) == (0, 300, 80)
    task = train[-1].model_copy(update={"preference": PROFILES["thrifty"]})
    prompt = render_prompt(task, tool_schemas(box, task, old.grpo.rollout.tool_schema), tok, old.grpo.rollout)
    assert prompt.index("Preference (thrifty): accuracy=1, cost=1, latency=0") < prompt.index("<tools>")


def test_phase_one_ends_a_margin_after_the_gate_is_first_met():
    from orchlib.demo.app import gate_with_margin

    readings = iter([0.5, 0.96, 0.90, 0.97, 0.99])
    until = gate_with_margin(lambda: next(readings), gate=0.95, margin_steps=100, every=50)
    assert [until() for _ in range(4)] == [False, False, False, True]  # met at the 2nd check, +2 checks
    once = gate_with_margin(lambda: 0.99, gate=0.95, margin_steps=0, every=50)
    assert once() is True
    never = gate_with_margin(lambda: 0.2, gate=0.95, margin_steps=0, every=50)
    assert not any(never() for _ in range(5))


def test_counterbalanced_shows_each_question_under_both_profiles_with_opposite_tools_each_way_on_half():
    from collections import Counter

    from orchlib.demo.app import calculator_only, counterbalanced

    train, _, _ = demo_suite(0, 24, 4)
    warm = calculator_only(train)
    out = counterbalanced(warm, seed=3)
    gsm = [t for t in warm if t.category == "gsm8k"]
    assert [t for t in out if t.category == "arithmetic"] == [t for t in warm if t.category == "arithmetic"]
    by_question: dict[str, dict[str, str]] = {}
    for t in (t for t in out if t.category == "gsm8k"):
        assert t.golden.alternatives == [] and len(t.golden.calls) == 1 and t.answer == t.golden.answer
        by_question.setdefault(t.prompt, {})[t.preference.name] = t.golden.calls[0].name
    assert sorted(by_question) == sorted(t.prompt for t in gsm)
    for tools in by_question.values():  # both profiles, opposite tools
        assert set(tools) == {"accuracy", "thrifty"} and set(tools.values()) == {"mixtral", "generalist"}
    ways = Counter(tools["accuracy"] for tools in by_question.values())
    assert ways["mixtral"] == ways["generalist"] == len(gsm) // 2  # neither way taught: each on half
    assert counterbalanced(warm, seed=3) == out and counterbalanced(warm, seed=4) != out


def test_replay_examples_leave_out_the_name_only_where_the_task_offers_a_choice(tiny_policy):
    from orchlib.demo.app import calculator_only, choice_categories, counterbalanced, replay_examples
    from orchlib.demo.config import DEMO_ROLLOUT
    from orchlib.train import golden_trajectories

    tok = tiny_policy[1]
    train, _, toolbox = demo_suite(0, 8, 4)
    warm = calculator_only(train)
    gold = golden_trajectories(warm, toolbox, tok, DEMO_ROLLOUT, alternatives="each")
    examples = replay_examples(gold, tok, choice_categories(warm))
    assert len(examples) == len(gold) == 4 + 2 * 4  # the calculator once per arithmetic task, both GSM8K tools
    for g, ex in zip(gold, examples):
        dropped = [i for i, (a, b) in enumerate(zip(g.mask, ex.mask)) if a != b]
        assert ex.ids == g.ids
        if g.category == "gsm8k":
            assert tok.decode([g.ids[i] for i in dropped]) == g.turns[0].calls[0].name
        else:
            assert dropped == []
    # counterbalanced, a GSM8K task names one tool, which P decides: the name still leaves the loss
    cb = counterbalanced(warm, seed=0)
    gold = golden_trajectories(cb, toolbox, tok, DEMO_ROLLOUT, alternatives="each")
    for g, ex in zip(gold, replay_examples(gold, tok, choice_categories(warm))):
        dropped = [i for i, (a, b) in enumerate(zip(g.mask, ex.mask)) if a != b]
        assert tok.decode([g.ids[i] for i in dropped]) == (g.turns[0].calls[0].name if g.category == "gsm8k" else "")


def test_bench_demo_settings_reach_the_demo_for_every_seed(tmp_path, monkeypatch):
    """bench_demo --set: the command each seed runs parses, through orchlib's own CLI, to the seed's
    DemoConfig with those fields (no demo is run: the command is caught where it would start)."""
    import subprocess

    from orchlib.cli import build_parser
    from orchlib.commands.demo import config_from
    from orchlib.demo import DemoConfig

    bench_demo = load_benchmark("bench_demo")
    seen = []

    def caught(cmd, **kw):
        seen.append(cmd)
        raise RuntimeError("caught")

    monkeypatch.setattr(subprocess, "run", caught)
    # --set: any DemoConfig field, its value read as YAML, for every seed
    for seed, pairs, fields in ((3, [], {}), (4, ["split_seed=null"], {"split_seed": None}),
                                (2, ["warm_start.golden.max_steps=200",
                                     "variants.contrast_categories=[gsm8k, arithmetic]"],
                                 {"warm_start": {"golden": {"max_steps": 200}},
                                  "variants": {"contrast_categories": ["gsm8k", "arithmetic"]}})):
        with pytest.raises(RuntimeError, match="caught"):
            bench_demo.run_seed(seed, tmp_path / f"seed-{seed}", None, bench_demo.parse_settings(pairs))
        assert seen[-1][1:3] == ["-m", "orchlib.cli"]
        config = config_from(build_parser().parse_args(seen[-1][3:]))
        assert config == merged(DemoConfig(), {"seed": seed, "out": str(tmp_path / f"seed-{seed}"), **fields})
    # a wrong field or value stops the benchmark before a seed runs
    for bad, why in (("sft_steps=200", "no field 'sft_steps'"), ("warm_start.golden.max_steps=many", "max_steps"),
                     ("warm_start.golden.max_step=200", "max_step"), ("steps", "FIELD=VALUE")):
        with pytest.raises(SystemExit, match=why):
            bench_demo.parse_settings([bad])


def test_bench_demo_tables_read_the_demos_metrics(demo):
    """bench_demo's per-profile table holds metrics.json's backend shares, accuracy, $ and s per task
    before and after RL, and its row the cosine's gap after the warm start and after RL."""
    bench_demo = load_benchmark("bench_demo")
    m = json.loads((demo.out / "metrics.json").read_text())
    r = bench_demo.row(m)
    assert r["1-cos warm"] == 1 - m["format"]["profile_cosine"] and r["1-cos RL"] == 1 - m["profile_cosine"]
    lines = bench_demo.profile_table([m]).splitlines()
    backends = sorted({b for when in m["backend_share"].values() for sh in when.values() for b in sh})
    assert lines[0].split()[3:] == [w for b in backends for w in ("calls", b)] + ["accuracy", "$", "/", "task",
                                                                                  "s", "/", "task"]
    assert len(lines) == 2 + 4  # header, rule, 2 policies x 2 profiles
    seen = set()
    for line in lines[2:]:
        seed, when_a, when_b, profile, *values = line.split()   # "before RL" / "after RL" is two words
        when = f"{when_a} {when_b}"
        seen.add((when, profile))
        shares = m["backend_share"][when][profile]
        p = m["policies"]["before RL" if when == "before RL" else "orchestrator"][profile]
        assert int(seed) == m["seed"]
        assert values == ([bench_demo._fmt(shares.get(b, 0.0)) for b in backends]
                          + [bench_demo._fmt(p[k]) for k in ("accuracy", "cost_usd", "latency_s")])
    assert seen == {(w, p) for w in ("before RL", "after RL") for p in ("accuracy", "thrifty")}


def test_bench_demo_cosine_bar_needs_every_seed_at_1e_2():
    """The mechanism's bar: 1 - cos after the warm start >= 1e-2 on every seed (rows written by hand)."""
    bench_demo = load_benchmark("bench_demo")
    base = {"well-formed %": 100.0, "copied %": 100.0, "ctrl gsm8k": 50.0, "thrifty margin": 0.1,
            "accuracy margin": 0.1, "reward first10": 0.1, "reward last10": 0.2, "total s": 100.0}
    for gaps, ok in (((0.5, 1e-2), True), ((0.5, 5.5e-3), False), ((2e-5, 8e-6), False)):
        rows = [{**base, "1-cos warm": g} for g in gaps]
        bar = [b for b in bench_demo.verdict(rows, 300.0) if b[0].startswith("1 - cos")]
        assert len(bar) == 1 and bar[0][1] is ok, (gaps, bar)
        assert bar[0][2] == f"min {min(gaps):.1e}"


def test_format_checks_read_an_evaluations_runs_as_their_own(tiny_policy):
    """The demo's format checks take the before-RL evaluation's runs: the same rollout call with the same
    seed, so the numbers equal those of the checks sampling their own runs."""
    from orchlib.demo.app import _policy_eval, format_checks, under
    from orchlib.demo.config import DEMO_ROLLOUT, REWARD_FILE
    from orchlib.engines import TransformersEngine
    from orchlib.reward import Reward

    model, tok = tiny_policy
    _, test, toolbox = demo_suite(0, 8, 6)
    engine = TransformersEngine(model, tok, seed=0)
    config = DemoConfig(eval_samples=2)
    before = _policy_eval(engine, test, toolbox, Reward.load(REWARD_FILE), config)
    own = format_checks(engine, under(test), toolbox, DEMO_ROLLOUT, seed=0)
    given = format_checks(engine, under(test), toolbox, DEMO_ROLLOUT, seed=0, trajectories=before.trajectories)
    assert given == own and len(before.trajectories) == 2 * len(under(test))
    assert own["n_turns"] == sum(len(t.turns) for t in before.trajectories)  # an untrained policy may take 2 turns
