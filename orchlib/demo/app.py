"""The embedded demo: train a tiny orchestrator offline on CPU and show what it learned.

    orchlib demo [--steps N] [--size tiny|small] [--seed S] [--out DIR] [--reading-drills]

P is shown in words after the question (`DEMO_WORDS`, `preference_style="words"`). Build the default
policy → copy drills (phase 1) → SFT warm start on golden trajectories (format, and that the choice
depends on P but not which way: each GSM8K question under both profiles with opposite tools, each way on
half of them, `counterbalanced`; and the calculator for arithmetic, where it is exact and free and so
right under every profile), mixed with preference-reading drills over a pair of tools the demo never
offers (`reading_drills`; `--reading-drills` doubles them) → check the format before RL → GRPO with
rewards/toolorchestra.yaml on train tasks, drawn evenly from both categories and each under both the
"accuracy" and the "thrifty" profile; the update pushes the called tool's name only (by its
expectation over the tools a group tried, `choice_gradient`), learns on GSM8K how the two profiles'
advantages differ (`preference_contrast`, `contrast_categories`), holds every other id, and the mass
that leaves the tried tools at the name, to the warm start with the KL term, and lets its lr fall to 0
→ evaluate before and after training, and the baselines → table, metrics.json,
trajectories.jsonl and a self-contained report.html.

The demo's slice of orchestra-mini: arithmetic (calculator or generalist) and GSM8K with real
recorded answers (Mixtral or the generalist). Every tool's answer is final — the calculator's
too — so the policy only chooses and calls; a ~1 M-parameter policy copying a result into its own
answer would blur the difference between tools RL has to learn. On GSM8K preferences
decide: under "accuracy" the dear generalist is worth it, under "thrifty" Mixtral is. On arithmetic the
exact, free calculator is right under both, and the generalist only costs more.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from orchlib.atomic import write_text_atomic
from orchlib.chat import IM_END
from orchlib.demo.config import (CALL_OPENING, DEMO_PROFILES, DEMO_ROLLOUT, DEMO_TOOL_NAMES, DEMO_TOOLS, EXPENSIVE,
                                 READING_PAIR, REWARD_FILE, DemoConfig, DemoResult)
from orchlib.demo.html import report_html
from orchlib.demo.report import SHARED, summarize_demo, table_text
from orchlib.env import Environment
from orchlib.envs.choice import counterbalanced
from orchlib.envs.choice import offer_choice as _retool
from orchlib.evaluate.gradients import profile_gradient_cosine
from orchlib.experiments.probes import anchored_reward, choice_gap, reference_runs
from orchlib.rollout import RolloutConfig
from orchlib.tasks import PROFILES, Golden, Task, under_profiles
from orchlib.trajectory import ToolCall, write_jsonl
from orchlib.train.drills import gate_with_margin  # noqa: F401  (re-exported: the demo's phase 1 gate)

__all__ = ["demo_suite", "run_demo", "format_checks", "profile_cosine", "gate_with_margin", "reading_drills",
           "reading_toolbox", "as_reading", "under",
           "write_outputs"]


def demo_suite(seed: int, n_train: int, n_test: int):
    """(train, test, toolbox) of the demo: orchestra-mini's arithmetic and GSM8K tasks with the demo's
    tools, every tool a golden alternative, and every tool final."""
    from orchlib.envs import make_suite
    from orchlib.tools import Toolbox

    suite = make_suite(seed, n_train=n_train, n_test=n_test, categories=tuple(DEMO_TOOLS),
                       profiles=DEMO_PROFILES)
    cards = [c.model_copy(update={"final": True}) for c in suite.cards if c.name in DEMO_TOOL_NAMES]
    return [_retool(t) for t in suite.train], [_retool(t) for t in suite.test], Toolbox.from_cards(cards)


def copy_drills(seed: int, n: int, exclude: set[str]) -> list[Task]:
    """Arithmetic tasks that appear nowhere in the demo's train or test split (same generator), each
    under a profile drawn at random: where the rollout puts P after the question (`preference_at=
    "user"`), the drills show it too, since copying learned without it there did not carry over."""
    from orchlib.envs.mini import arithmetic_tasks

    rng = random.Random(f"copy-drills:{seed}")
    tasks = [t for t in arithmetic_tasks(rng, n + len(exclude)) if t.prompt not in exclude][:n]
    return [t.model_copy(update={"preference": PROFILES[rng.choice(DEMO_PROFILES)]}) for t in tasks]


def copy_examples(tasks: list[Task], tokenizer, rollout: RolloutConfig = DEMO_ROLLOUT) -> list:
    """Phase 1 of the warm start: the question alone, then the calculator call that copies it.

    A ~1 M-parameter policy learns to copy digits only after hundreds of steps; on these ~50-token
    drills a step costs a third of one on the ~170-token orchestration prompt. They offer no tool
    choice, so they teach nothing RL is meant to learn."""
    return [_golden_reply(_short_prompt(t, tokenizer, rollout), t, tokenizer) for t in tasks]


def _golden_reply(prompt: str, task: Task, tokenizer):
    """`prompt`, then the task's golden calls as the reply: the loss applies to the reply only."""
    from orchlib.chat import render_assistant
    from orchlib.train import SFTExample

    head = tokenizer.encode(prompt, add_special_tokens=False)
    reply = tokenizer.encode(render_assistant("", task.golden.calls) + IM_END, add_special_tokens=False)
    return SFTExample(head + reply, [0] * len(head) + [1] * len(reply))


def copy_accuracy(engine, tasks: list[Task], rollout: RolloutConfig = DEMO_ROLLOUT) -> float:
    """Greedy, in the drills' short format: share of calls whose expression is the question's, exactly."""
    from orchlib.engines import SamplingParams

    tok = engine.tokenizer
    prompts = [tok.encode(_short_prompt(t, tok, rollout), add_special_tokens=False) for t in tasks]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=40, temperature=0.0),
                           stop_ids=[tok.convert_tokens_to_ids(IM_END)]).outputs
    return sum(_copied(tok.decode(o.ids).removesuffix(IM_END), t) for t, o in zip(tasks, outs)) / len(tasks)


def _short_prompt(t: Task, tokenizer, rollout: RolloutConfig = DEMO_ROLLOUT) -> str:
    """The demo's user turn as the only message, through the chat template, with P where `rollout` puts
    it in the user turn or the reply's prefix (none where it sits in the system turn)."""
    from orchlib.prompting import assistant_prefix, user_message

    return tokenizer.apply_chat_template([{"role": "user", "content": user_message(t, rollout)}],
                                         add_generation_prompt=True, tokenize=False) + assistant_prefix(t, rollout)


def _copied(text: str, task: Task) -> bool:
    from orchlib.chat import parse_tool_calls

    try:
        calls = parse_tool_calls(text)[1]
    except ValueError:
        return False
    want = task.golden.calls[0].arguments["expression"] if task.golden and task.golden.calls else None
    return bool(calls) and calls[0].arguments.get("expression") == want


def reading_toolbox():
    """The Toolbox of READING_PAIR's shipped cards (the drills only list them; no call is run)."""
    from orchlib.cards import load_cards
    from orchlib.envs.mini import default_toolcards
    from orchlib.tools import Toolbox

    return Toolbox.from_cards([c for c in load_cards(default_toolcards()) if c.name in READING_PAIR.values()])


def as_reading(t: Task, profile: str) -> Task:
    """`t` offering READING_PAIR's tools only, under `profile`, the golden call the tool that P names."""
    return t.model_copy(update={"id": f"reading-{t.id}@{profile}", "tools": sorted(READING_PAIR.values()),
                                "preference": PROFILES[profile],
                                "golden": Golden(calls=[ToolCall(name=READING_PAIR[profile])], answer=t.answer)})


def reading_drills(tasks: list[Task], n: int, tokenizer, seed: int, toolbox=None,
                   rollout: RolloutConfig = DEMO_ROLLOUT) -> list:
    """Phase 2's preference-reading drills: `n` prompts of `tasks` (cycled) in the rollout's format, each
    under a profile drawn at random and offering READING_PAIR only, then the call P names.

    A ~1 M-parameter policy otherwise reads P where it chooses only after ~150-250 steps of direct
    supervision, and then abruptly: more than RL gives it in a demo, so RL moved both
    profiles' tool shares as one block. After the drills, direct supervision on the demo's own tools
    separates the profiles within ~30 steps. Which demo tool each P calls for is still untaught: the
    warm start's `choice_gap` on the demo's tools stays near 0, and RL has to learn it.
    `toolbox`: `reading_toolbox()`'s, built here when not given; `rollout`: the prompts' rendering."""
    from orchlib.prompting import render_prompt, tool_schemas

    if not tasks or not n:
        return []
    rng, box, out = random.Random(f"reading:{seed}"), toolbox or reading_toolbox(), []
    for i in range(n):
        t = as_reading(tasks[i % len(tasks)], rng.choice(DEMO_PROFILES))
        prompt = render_prompt(t, tool_schemas(box, t, rollout.tool_schema), tokenizer, rollout)
        out.append(_golden_reply(prompt, t, tokenizer))
    return out


def extra_gsm8k(seed: int, n: int, exclude: set[str]) -> list[Task]:
    """GSM8K questions with recorded answers that are in neither split, as phase-2 tasks (`_extras`)."""
    from orchlib.envs.mini import gsm8k_tasks

    rng = random.Random(f"extra-gsm8k:{seed}")
    return _extras([t for t in gsm8k_tasks(rng, n + len(exclude)) if t.prompt not in exclude][:n], rng)


def extra_arithmetic(tasks: list[Task], seed: int) -> list[Task]:
    """Arithmetic tasks as phase-2 tasks (`_extras`)."""
    return _extras(tasks, random.Random(f"extra:{seed}"))


def _extras(tasks: list[Task], rng: random.Random) -> list[Task]:
    """Phase-2 tasks in the demo's format: both tools offered, either one golden (drawn at random by the
    warm start), the profile drawn at random by `rng` — so the format is taught, not the choice."""
    return [_retool(t).model_copy(update={"id": f"extra-{t.id}", "preference": PROFILES[rng.choice(DEMO_PROFILES)]})
            for t in tasks]


def under(tasks: list[Task], profiles=DEMO_PROFILES) -> list[Task]:
    """Every task once per profile (ids suffixed), so only P differs between the copies."""
    return under_profiles(tasks, profiles)


def format_checks(engine, tasks: list[Task], toolbox, config: RolloutConfig, seed: int = 0,
                  trajectories: list | None = None) -> dict[str, float]:
    """Before RL: share of well-formed turns (sampled, as RL samples), and how often the policy copies
    the arithmetic expression exactly once it has chosen the calculator (the call's opening is given).
    `trajectories`: the policy's sampled runs of `tasks`, when an evaluation already has them (the demo's
    before-RL one); otherwise two per task are sampled here."""
    from orchlib.engines import SamplingParams
    from orchlib.prompting import render_prompt, tool_schemas
    from orchlib.rollout import rollout

    trajs = trajectories if trajectories is not None else rollout(Environment(train=tasks, tools=toolbox), engine,
                                                                   config=config, group_size=2, seed=seed)
    turns = [t for tr in trajs for t in tr.turns]
    # a well-formed turn makes at least one call and every call parses, names an offered tool and
    # fits its schema (in the demo every turn should call: each tool's answer is final)
    good = sum(bool(t.calls) and not any(o.error_kind in ("malformed_call", "unknown_tool", "schema_violation")
                                         for o in t.observations) for t in turns)
    arith = [t for t in tasks if t.category == "arithmetic"]
    tok = engine.tokenizer
    opening = CALL_OPENING + 'calculator", "arguments": {"expression": "'
    prompts = [tok.encode(render_prompt(t, tool_schemas(toolbox, t, config.tool_schema), tok, config) + opening,
                          add_special_tokens=False) for t in arith]
    gens = engine.generate(prompts, SamplingParams(max_new_tokens=config.max_new_tokens,
                                                   temperature=config.temperature, seed=seed),
                           stop_ids=[tok.convert_tokens_to_ids(IM_END)]).outputs
    exact = sum(_copied(opening + tok.decode(g.ids, skip_special_tokens=False).removesuffix(IM_END), t)
                for t, g in zip(arith, gens))
    return {"well_formed_turns": good / max(len(turns), 1),
            "arithmetic_copy_exact": exact / max(len(arith), 1), "n_turns": float(len(turns)),
            "n_arithmetic": float(len(arith))}


def calculator_only(tasks: list[Task]) -> list[Task]:
    """`tasks` with the calculator as arithmetic's only golden tool (`WarmStartConfig.calculator_only`)."""
    return [t.model_copy(update={"golden": t.golden.model_copy(update={"alternatives": []})})
            if t.category == "arithmetic" else t for t in tasks]


def choice_categories(tasks: list[Task]) -> set[str]:
    """The categories in which some task offers more than one right tool: there the tool is GRPO's to choose."""
    return {t.category for t in tasks if t.golden is not None and t.golden.alternatives}


def replay_examples(gold: list, tokenizer, choice: set[str]) -> list:
    """Phase 2's golden trajectories for SFT replay: in the `choice` categories (`choice_categories`, taken
    before `counterbalanced` gives each task one tool), the tool's name is left out of the loss (the choice
    is GRPO's to learn; the call's format is not)."""
    from orchlib.train import SFTExample
    from orchlib.experiments.replay import unlabel_names

    return [unlabel_names(SFTExample(g.ids, g.mask), tokenizer) if g.category in choice
            else SFTExample(g.ids, g.mask) for g in gold]


def run_demo(config: DemoConfig = DemoConfig(), progress: bool = True) -> DemoResult:
    """All phases; wall time of each is recorded. Returns the numbers and writes `config.out`."""
    import torch

    from orchlib.engines import TransformersEngine
    from orchlib.env import Environment
    from orchlib.models import build_default_policy
    from orchlib.reward import Reward
    from orchlib.experiments.replay import SFTReplay
    from orchlib.train import Trainer, golden_trajectories, sft_train

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    wall: dict[str, float] = {}
    t = time.perf_counter()
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    model, tok = build_default_policy(config.size, seed=config.seed)
    split = config.seed if config.split_seed is None else config.split_seed
    train, test, toolbox = demo_suite(split, config.n_train, config.n_test)
    reward = Reward.load(REWARD_FILE)
    wall["setup"] = time.perf_counter() - t

    t = time.perf_counter()
    ws = config.warm_start
    ro = config.grpo.rollout  # the prompts' rendering in every phase, as GRPO samples them
    engine = TransformersEngine(model, tok, seed=config.seed, share_prompts=True)
    pool = copy_drills(config.seed, ws.copy_drills + 64 + ws.extra_arithmetic, {t.prompt for t in train + test})
    drills, heldout = pool[:ws.copy_drills], pool[-64:]
    extra = extra_arithmetic(pool[ws.copy_drills:-64], config.seed)
    copy_sft, phase1_copy = None, 0.0
    if ws.copy_drills and ws.copying.max_steps:
        copying = ws.copying.model_copy(update={"seed": config.seed})
        copy_sft = sft_train(model, tok, copy_examples(drills, tok, ro), copying,
                             progress=progress, until=gate_with_margin(lambda: copy_accuracy(engine, heldout, ro),
                                                                       ws.copy_gate, ws.copy_margin_steps, 50),
                             check_every=50, desc="warm start 1/2: copy drills")
        phase1_copy = copy_accuracy(engine, heldout, ro)  # in the drills' format; phase 2 moves on to the real one
    extra += extra_gsm8k(config.seed, ws.extra_gsm8k, {t.prompt for t in train + test})
    # no tool drawn per task: a draw is learned by heart and biases the choice; each valid tool is written
    # (`each`), or each GSM8K question under both profiles, one tool each, each way on half (`counterbalanced`)
    warm = calculator_only(train + extra) if ws.calculator_only else train + extra
    choice = choice_categories(warm)  # the replay leaves these names out of its loss
    if ws.choice == "counterbalanced":
        warm = counterbalanced(warm, config.seed)
    gold = golden_trajectories(warm, toolbox, tok, ro, seed=config.seed, alternatives="each")
    golden_warm = list(gold)  # what SFT replay draws from (not the reading drills)
    reading_box = reading_toolbox()  # the drills' pair: listed in the drills and in the reading check
    gold += reading_drills(extra, ws.reading_drills, tok, config.seed, reading_box, ro)
    sft = sft_train(model, tok, gold, ws.golden.model_copy(update={"seed": config.seed}),
                    progress=progress, desc="warm start 2/2: golden trajectories")
    engine.clear_prefix_cache()
    wall["warm_start"] = time.perf_counter() - t

    t = time.perf_counter()
    before = _policy_eval(engine, test, toolbox, reward, config)
    checks = format_checks(engine, under(test), toolbox, ro, seed=config.seed,
                           trajectories=before.trajectories)  # the same runs: the format is read off them
    checks["copy_drill_steps"] = float(len(copy_sft.losses)) if copy_sft else 0.0
    checks["copy_heldout_accuracy"] = phase1_copy
    model.eval()
    checks["choice_gap_points"] = choice_gap(model, tok, test, toolbox, ro, EXPENSIVE, DEMO_PROFILES)
    checks["profile_cosine"] = profile_cosine(model, tok, test, toolbox, rollout=ro)
    if ws.reading_drills:  # whether the drills taught P's reading on their own pair (none without them)
        checks["reading_gap_points"] = choice_gap(model, tok, [as_reading(t, "accuracy") for t in test],
                                                  reading_box, ro, READING_PAIR["accuracy"], DEMO_PROFILES)
    wall["eval_before"] = time.perf_counter() - t

    t = time.perf_counter()
    grpo = config.grpo_config()
    rl_train = [t for t in train if t.category in config.rl_categories]
    hooks = config.variants.hooks()
    if config.replay_coef:
        hooks = hooks.with_extra_loss(SFTReplay(replay_examples(golden_warm, tok, choice), config.replay_coef,
                                                config.replay_batch, config.seed))
    env = Environment(train=rl_train, test=test, tools=toolbox, reward=reward, name="demo")
    trainer = Trainer((model, tok), env, grpo, hooks=hooks, policy_source=f"default-{config.size}")
    _train(trainer, rl_train, toolbox, tok, reward, config, progress)
    wall["grpo"] = time.perf_counter() - t

    t = time.perf_counter()
    after = _policy_eval(trainer.engine, test, toolbox, reward, config)
    wall["eval_after"] = time.perf_counter() - t
    t = time.perf_counter()
    baselines = _baselines(train, test, toolbox, tok, config)
    wall["baselines"] = time.perf_counter() - t

    metrics = summarize_demo(config, before, after, baselines, checks, trainer.history, sft, wall, reward)
    trained = trainer.accelerator.unwrap_model(trainer.model).eval()
    metrics["choice_gap_points"] = choice_gap(trained, tok, test, toolbox, ro, EXPENSIVE, DEMO_PROFILES)
    metrics["profile_cosine"] = profile_cosine(trained, tok, test, toolbox, rollout=ro)
    table = write_outputs(out, metrics, after, baselines, trainer.history, reward)
    return DemoResult(metrics, table, out, trainer.history, policy=(trained, tok), env=env)


def profile_cosine(model, tokenizer, test: list[Task], toolbox, n: int = 8,
                   rollout: RolloutConfig = DEMO_ROLLOUT) -> float:
    """The mean `profile_gradient_cosine` of the GSM8K choice (generalist or Mixtral) over the first `n`
    GSM8K test questions: how much of an update to it under one profile moves it under the other too."""
    gsm = [t for t in test if t.category == "gsm8k"][:n]
    cos = profile_gradient_cosine(model, tokenizer, gsm, toolbox, rollout, (EXPENSIVE, "mixtral"), DEMO_PROFILES)
    return sum(cos) / len(cos) if cos else float("nan")


def _train(trainer, train, toolbox, tok, reward, config, progress):
    """GRPO steps; each step's history also gets `reward_anchored`, its rollouts' reward against fixed
    reference runs of their tasks (`orchlib.experiments.probes.anchored_reward`): the training reward is normalised
    within groups and falls as a group's rollouts come to agree."""
    refs = reference_runs(under(train), toolbox, tok, config.grpo.rollout)
    G = config.grpo.group_size

    def anchor(report) -> None:
        groups = [report.trajectories[i:i + G] for i in range(0, len(report.trajectories), G)]
        report.metrics["reward_anchored"] = anchored_reward(
            groups, refs, reward, key=lambda t: f"{t.task_id}@{t.preference['name']}")

    trainer.run(config.steps, progress=progress, on_step=anchor)


def _policy_eval(engine, test, toolbox, reward, config):
    from orchlib.evaluate import evaluate

    return evaluate(engine, Environment(name="choice", test=under(test), tools=toolbox, reward=reward),
                    config=config.grpo.rollout, group_size=config.eval_samples, name="orchestrator",
                    seed=config.seed)


def _baselines(train, test, toolbox, tok, config):
    from orchlib.baselines import make_baselines, try_routes
    from orchlib.evaluate import evaluate

    tasks = under(test)
    per_category = {c: [t for t in train if t.category == c][:20] for c in DEMO_TOOLS}  # train is sorted by category
    ro = config.grpo.rollout
    calibration = try_routes(under([t for ts in per_category.values() for t in ts]), toolbox, tok, ro)
    engines = make_baselines(tasks, toolbox, tok, calibration=calibration, config=ro, seed=config.seed)
    env = Environment(name="choice", test=tasks, tools=toolbox)
    return {n: evaluate(e, env, config=ro, name=n) for n, e in engines.items()}


def write_outputs(out: Path, metrics, after, baselines, history, reward) -> str:
    """metrics.json, table.txt, trajectories.jsonl and report.html into `out`, each written whole."""
    table = table_text(metrics)
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=1, default=float) + "\n", mode=SHARED)
    write_text_atomic(out / "table.txt", table + "\n", mode=SHARED)
    write_jsonl(after.trajectories, out / "trajectories.jsonl")
    write_text_atomic(out / "report.html", report_html(metrics, after, baselines, history), mode=SHARED)
    return table
