"""The embedded demo: train a tiny orchestrator offline on CPU and show what it learned.

    orchlib demo [--steps N] [--size tiny|small] [--seed S] [--out DIR] [--reading-drills]

Build the default policy → SFT warm start on golden trajectories (format only: every valid tool is
written for each task, whatever P says), with `--reading-drills` also on preference-reading drills over
a pair of tools the demo never offers (`reading_drills`) → check the format before RL → GRPO with
rewards/toolorchestra.yaml on train tasks, drawn evenly from both categories and each under both the
"accuracy" and the "thrifty" profile; the update pushes the called tool's name only (by its
expectation over the tools a group tried, `choice_gradient`), learns how the two profiles'
advantages differ (`preference_contrast`), holds every other id to the warm start with the KL term, and lets
its lr fall to 0 (see docs/training.md) → evaluate before and after training, and the
baselines → table, metrics.json, trajectories.jsonl and a self-contained report.html.

The demo's slice of orchestra-mini: arithmetic (calculator or generalist) and GSM8K with real
recorded answers (Mixtral or the generalist). Every tool's answer is final — the calculator's
too — so the policy only chooses and calls; a ~1 M-parameter policy copying a result into its own
answer would blur the difference between tools RL has to learn (see DESIGN.md). Preferences decide:
under "accuracy" the dear generalist is worth it, under "thrifty" the calculator and Mixtral are.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchlib.chat import IM_END, TOOL_CALL
from orchlib.rollout import RolloutConfig
from orchlib.shipped import shipped_dir
from orchlib.tasks import PROFILES, Golden, Task
from orchlib.trajectory import ToolCall

__all__ = ["DemoConfig", "DemoResult", "DEMO_TOOLS", "DEMO_TOOL_NAMES", "READING_PAIR", "READING_SETTINGS",
           "demo_suite", "run_demo", "format_checks", "choice_gap", "reading_drills", "reading_toolbox", "as_reading"]

# Tools offered per category in the demo (all final, see the module docstring).
# Two per category, one cheap and one dear, so P decides: the free calculator (exact when the policy
# copies the expression exactly) or the dear generalist (97 %); Mixtral's real answers (64 %, cheap) or
# the dear generalist (95 %).
DEMO_TOOLS: dict[str, list[str]] = {"arithmetic": ["calculator", "generalist"],
                                    "gsm8k": ["mixtral", "generalist"]}
DEMO_TOOL_NAMES = tuple(sorted({t for tools in DEMO_TOOLS.values() for t in tools}))
DEMO_PROFILES = ("accuracy", "thrifty")
EXPENSIVE = "generalist"
# Phase 2's preference-reading drills (`reading_drills`) offer this pair, which the demo never offers, and
# the golden call is the one P names: they teach the policy to read P where it chooses, not which demo
# tool each P calls for.
READING_PAIR: dict[str, str] = {"accuracy": "gpt4", "thrifty": "specialist"}
# The DemoConfig fields `orchlib demo --reading-drills` sets: the drills need a longer phase 2.
READING_SETTINGS: dict[str, int] = {"reading_drills": 800, "sft_steps": 450}
# How every call starts, up to the tool's name (chat.render_call's layout): the choice is the next id.
CALL_OPENING = TOOL_CALL + '\n{"name": "'
# the shipped reward file (package data: found in a wheel as in a checkout)
REWARD_FILE = shipped_dir("rewards") / "toolorchestra.yaml"

DEMO_ROLLOUT = RolloutConfig(
    max_turns=2, max_new_tokens=40, tool_schema="compact", tool_latency="declared",
    system_prompt="You are an orchestrator. Call one tool; its answer is final.", temperature=0.7)


class DemoConfig(BaseModel):
    """Defaults finish in about five minutes on 2 CPU cores."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = Field(0, description="seeds the suite, the policy's weights and every draw")
    size: str = Field("tiny", description="default policy size: tiny (~1.3 M) or small (~50 M)")
    steps: int = Field(80, ge=0, description="GRPO steps")
    n_train: int = Field(120, ge=4, description="train tasks (half arithmetic, half GSM8K)")
    n_test: int = Field(80, ge=4, description="held-out test tasks; with 40, Mixtral's accuracy on seed 1's 20 test "
                                              "questions was 0.45 against 0.65 on train, and always-cheapest lost "
                                              "to always-strongest under \"thrifty\" by that luck alone")
    copy_drills: int = Field(2000, ge=0, description="short calculator drills of phase 1 of the warm start")
    copy_gate: float = Field(0.95, ge=0, le=1, description="phase 1 ends once held-out drills are copied this "
                                                           "exactly (greedy); RL needs ~0.95 (see DESIGN.md)")
    copy_max_steps: int = Field(1500, ge=0, description="phase 1 budget; copying appears abruptly, after "
                                                        "~150-450 steps of batch 16 for the tiny policy at lr 1e-3")
    copy_learning_rate: float = Field(1e-3, gt=0, description="6e-3 and 3e-3 took 750-1200 steps or missed "
                                                              "the gate; 1e-3 reached it on 6 of 6 seeds")
    sft_steps: int = Field(300, ge=1, description="phase 2: golden trajectories in the orchestration format "
                                                  "(150 left 30 % of sampled turns malformed, 300 about 9 %; with "
                                                  "the reading drills 300 left 41 %, 450 about 1 %)")
    reading_drills: int = Field(0, ge=0, description="phase-2 preference-reading drills (`reading_drills`); off by "
                                                     "default until they help on every seed (docs/training.md); "
                                                     "READING_SETTINGS is the measured setting")
    sft_extra_arithmetic: int = Field(400, ge=0, description="more arithmetic tasks for phase 2, offering both "
                                                             "tools; the golden tool is drawn at random")
    sft_extra_gsm8k: int = Field(300, ge=0, description="more GSM8K questions for phase 2 (none in train or test): "
                                                        "with only the 60 train questions, 25 % of turns on unseen "
                                                        "questions were malformed, against 2 % on seen ones")
    sft_learning_rate: float = Field(3e-3, gt=0, description="peak lr of phase 2 (cosine to 0)")
    learning_rate: float = Field(5e-4, gt=0, description="GRPO lr; with the expected push and balanced draws, "
                                                         "5e-4 separated the profiles on every seed (3e-4: 22.6 "
                                                         "points on seed 1; docs/training.md)")
    kl_coef: float = Field(0.03, ge=0, description="KL to the warm start. The update pushes tool names only, so "
                                                   "the KL alone keeps the format; with the exact KL, 0.1 and 0.05 "
                                                   "held seed 1's GSM8K choice back (22.1 / 29.4 points)")
    kl_estimator: Literal["k3", "exact"] = Field("exact", description="VariantConfig.kl_estimator: with k3 (at 0.1) "
                                                 "seed 1 lost its format, 15 of 160 test runs without a well-formed "
                                                 "call: k3 sees only the sampled id, not mass moving to '</tool_call>'")
    kl_tokens: Literal["all", "not_names"] = Field("not_names", description="VariantConfig.kl_tokens: the KL holds "
                                                   "every id but the tool's name; on the name too, it held the "
                                                   "GSM8K choice back (0.1 on all ids: 5 points on seed 1)")
    lr_decay: bool = Field(True, description="GRPOConfig.decay_steps = steps: the lr falls linearly to 0; at a "
                                             "constant lr one run lost its profile gap in the last 10 steps")
    policy_tokens: Literal["all", "tool_names"] = Field("tool_names", description="VariantConfig.policy_tokens: "
                                                        "the update pushes the tool names only; the warm start "
                                                        "taught the rest")
    preference_contrast: float = Field(1.0, ge=0, le=1, description="VariantConfig.preference_contrast: the update "
                                       "learns how the profiles differ; below 1 the shared part swamped P")
    choice_gradient: Literal["sampled", "expected"] = Field("expected", description="VariantConfig.choice_gradient: "
                                                            "at the tool's name, the expectation over the tools a "
                                                            "group tried instead of the one sampled; sampled, the "
                                                            "draw's noise moved both profiles' choice at random")
    balance_categories: bool = Field(True, description="VariantConfig.balance_categories: each step's tasks drawn "
                                                       "evenly from arithmetic and GSM8K; drawn at random, some "
                                                       "steps held one category only, and the policy read P on "
                                                       "one category alone (seed 2: 5 points on GSM8K)")
    advantage_scale: Literal["std", "none"] = Field("none", description="GRPOConfig.advantage_scale: mean-only "
                                                    "advantages; with std scaling a rare error in a group that "
                                                    "nearly agrees became -2.6 and turned the contrast around")
    tasks_per_step: int = Field(4, ge=1, description="each drawn under both profiles: 8 groups per step")
    group_size: int = Field(8, ge=2, description="rollouts per task and profile (a GRPO group)")
    eval_samples: int = Field(2, ge=1, description="sampled runs per test task and profile")
    out: str = Field("out/demo", description="folder for report.html, metrics.json, trajectories.jsonl")


@dataclass
class DemoResult:
    metrics: dict[str, Any]
    table: str
    out: Path
    history: list[dict[str, float]] = field(default_factory=list)


def demo_suite(seed: int, n_train: int, n_test: int):
    """(train, test, toolbox) of the demo: orchestra-mini's arithmetic and GSM8K tasks with the demo's
    tools, every tool a golden alternative, and every tool final."""
    from orchlib.envs import make_suite
    from orchlib.tools import Toolbox

    suite = make_suite(seed, n_train=n_train, n_test=n_test, categories=tuple(DEMO_TOOLS),
                       profiles=DEMO_PROFILES)
    cards = [c.model_copy(update={"final": True}) for c in suite.cards if c.name in DEMO_TOOL_NAMES]
    return [_retool(t) for t in suite.train], [_retool(t) for t in suite.test], Toolbox.from_cards(cards)


def _retool(t: Task) -> Task:
    """A suite task with the demo's tools for its category, each one a golden alternative."""
    options = [[c for c in (t.golden.calls if t.golden else []) if c.name == "calculator"]]
    options = [o for o in options if o] + [[ToolCall(name=n)] for n in DEMO_TOOLS[t.category] if n != "calculator"]
    golden = Golden(calls=options[0], alternatives=options[1:], answer=t.answer)
    return t.model_copy(update={"tools": DEMO_TOOLS[t.category], "golden": golden})


def copy_drills(seed: int, n: int, exclude: set[str]) -> list[Task]:
    """Arithmetic tasks that appear nowhere in the demo's train or test split (same generator), each
    under a profile drawn at random: where the rollout puts P after the question (`preference_at=
    "user"`), the drills show it too, since copying learned without it there did not carry over."""
    from orchlib.envs.mini import arithmetic_tasks

    rng = random.Random(f"copy-drills:{seed}")
    tasks = [t for t in arithmetic_tasks(rng, n + len(exclude)) if t.prompt not in exclude][:n]
    return [t.model_copy(update={"preference": PROFILES[rng.choice(DEMO_PROFILES)]}) for t in tasks]


def copy_examples(tasks: list[Task], tokenizer) -> list:
    """Phase 1 of the warm start: the question alone, then the calculator call that copies it.

    A ~1 M-parameter policy learns to copy digits only after hundreds of steps; on these ~50-token
    drills a step costs a third of one on the ~170-token orchestration prompt. They offer no tool
    choice, so they teach nothing RL is meant to learn."""
    return [_golden_reply(_short_prompt(t, tokenizer), t, tokenizer) for t in tasks]


def _golden_reply(prompt: str, task: Task, tokenizer):
    """`prompt`, then the task's golden calls as the reply: the loss applies to the reply only."""
    from orchlib.chat import render_assistant
    from orchlib.train import SFTExample

    head = tokenizer.encode(prompt, add_special_tokens=False)
    reply = tokenizer.encode(render_assistant("", task.golden.calls) + IM_END, add_special_tokens=False)
    return SFTExample(head + reply, [0] * len(head) + [1] * len(reply))


def copy_accuracy(engine, tasks: list[Task]) -> float:
    """Greedy, in the drills' short format: share of calls whose expression is the question's, exactly."""
    from orchlib.engines import SamplingParams

    tok = engine.tokenizer
    prompts = [tok.encode(_short_prompt(t, tok), add_special_tokens=False) for t in tasks]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=40, temperature=0.0),
                           stop_ids=[tok.convert_tokens_to_ids(IM_END)]).outputs
    return sum(_copied(tok.decode(o.ids).removesuffix(IM_END), t) for t, o in zip(tasks, outs)) / len(tasks)


def _short_prompt(t: Task, tokenizer) -> str:
    """The demo's user turn as the only message, through the chat template, with P where the rollout puts
    it in the user turn or the reply's prefix (none where it sits in the system turn)."""
    from orchlib.rollout import assistant_prefix, user_message

    return tokenizer.apply_chat_template([{"role": "user", "content": user_message(t, DEMO_ROLLOUT)}],
                                         add_generation_prompt=True, tokenize=False) + assistant_prefix(t, DEMO_ROLLOUT)


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


def reading_drills(tasks: list[Task], n: int, tokenizer, seed: int, toolbox=None) -> list:
    """Phase 2's preference-reading drills: `n` prompts of `tasks` (cycled) in the rollout's format, each
    under a profile drawn at random and offering READING_PAIR only, then the call P names.

    A ~1 M-parameter policy otherwise reads P where it chooses only after ~150-250 steps of direct
    supervision, and then abruptly (docs/training.md): more than RL gives it in a demo, so RL moved both
    profiles' tool shares as one block. After the drills, direct supervision on the demo's own tools
    separates the profiles within ~30 steps. Which demo tool each P calls for is still untaught: the
    warm start's `choice_gap` on the demo's tools stays near 0, and RL has to learn it.
    `toolbox`: `reading_toolbox()`'s, built here when not given."""
    from orchlib.rollout import render_prompt, tool_schemas

    if not tasks or not n:
        return []
    rng, box, out = random.Random(f"reading:{seed}"), toolbox or reading_toolbox(), []
    for i in range(n):
        t = as_reading(tasks[i % len(tasks)], rng.choice(DEMO_PROFILES))
        prompt = render_prompt(t, tool_schemas(box, t, DEMO_ROLLOUT.tool_schema), tokenizer, DEMO_ROLLOUT)
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
    return [t.model_copy(update={"preference": PROFILES[p], "id": f"{t.id}@{p}"}) for t in tasks for p in profiles]


def format_checks(engine, tasks: list[Task], toolbox, config: RolloutConfig, seed: int = 0) -> dict[str, float]:
    """Before RL: share of well-formed turns (sampled, as RL samples), and how often the policy copies
    the arithmetic expression exactly once it has chosen the calculator (the call's opening is given)."""
    from orchlib.engines import SamplingParams
    from orchlib.rollout import render_prompt, rollout, tool_schemas

    trajs = rollout(tasks, toolbox, engine, config, group_size=2, seed=seed)
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


def choice_gap(model, tokenizer, tasks: list[Task], toolbox, config: RolloutConfig, tool: str = EXPENSIVE,
               profiles: tuple[str, str] = DEMO_PROFILES) -> float:
    """How far P moves the choice, exactly: the mean over `tasks` offering `tool` of
    p(first call names `tool` | profiles[0]) - p(same | profiles[1]), in percentage points, each
    probability from one forward pass over the prompt and the call's opening (no sampling noise).
    0 means the policy is blind to P at the moment it chooses (see docs/training.md)."""
    import torch

    from orchlib.rollout import render_prompt, tool_schemas

    # where the weights are: on a GPU machine, training left the model there
    gaps, device = [], next((p.device for p in model.parameters()), torch.device("cpu"))
    for task in (t for t in tasks if t.tools is None or tool in t.tools):
        p = []
        for shown in under([task], profiles):
            head = render_prompt(shown, tool_schemas(toolbox, shown, config.tool_schema), tokenizer, config)
            head += CALL_OPENING
            ids = tokenizer.encode(head + tool, add_special_tokens=False)
            n = len(tokenizer.encode(head, add_special_tokens=False))
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids], device=device)).logits[0].float(), -1)
            p.append(float(sum(logp[i - 1, ids[i]] for i in range(n, len(ids))).exp()))
        gaps.append(p[0] - p[1])
    return 100 * sum(gaps) / len(gaps) if gaps else float("nan")


def _grpo_settings(config: DemoConfig):
    """The demo's GRPOConfig (the paper's knobs) and VariantConfig (the experimental ones it uses)."""
    from orchlib.train import GRPOConfig, VariantConfig

    grpo = GRPOConfig(seed=config.seed, learning_rate=config.learning_rate, kl_coef=config.kl_coef,
                      tasks_per_step=config.tasks_per_step, group_size=config.group_size,
                      advantage_scale=config.advantage_scale, rollout=DEMO_ROLLOUT,
                      decay_steps=config.steps if config.lr_decay and config.steps else None)
    variants = VariantConfig(paired_profiles=DEMO_PROFILES, balance_categories=config.balance_categories,
                             preference_contrast=config.preference_contrast, policy_tokens=config.policy_tokens,
                             kl_tokens=config.kl_tokens, kl_estimator=config.kl_estimator,
                             choice_gradient=config.choice_gradient)
    return grpo, variants


def run_demo(config: DemoConfig = DemoConfig(), progress: bool = True) -> DemoResult:
    """All phases; wall time of each is recorded. Returns the numbers and writes `config.out`."""
    import torch

    from orchlib.engines import TransformersEngine
    from orchlib.models import build_default_policy
    from orchlib.reward import Reward
    from orchlib.train import SFTConfig, Trainer, golden_trajectories, sft_train

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    wall: dict[str, float] = {}
    t = time.perf_counter()
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    model, tok = build_default_policy(config.size, seed=config.seed)
    train, test, toolbox = demo_suite(config.seed, config.n_train, config.n_test)
    reward = Reward.load(REWARD_FILE)
    wall["setup"] = time.perf_counter() - t

    t = time.perf_counter()
    engine = TransformersEngine(model, tok, seed=config.seed)
    pool = copy_drills(config.seed, config.copy_drills + 64 + config.sft_extra_arithmetic,
                       {t.prompt for t in train + test})
    drills, gate = pool[:config.copy_drills], pool[-64:]
    extra = extra_arithmetic(pool[config.copy_drills:-64], config.seed)
    copy_sft, phase1_copy = None, 0.0
    if config.copy_drills and config.copy_max_steps:
        copy_sft = sft_train(model, tok, copy_examples(drills, tok),
                             SFTConfig(seed=config.seed, max_steps=config.copy_max_steps, batch_size=16,
                                       learning_rate=config.copy_learning_rate, schedule="constant",
                                       warmup_fraction=0.02),
                             progress=progress, until=lambda: copy_accuracy(engine, gate) >= config.copy_gate,
                             check_every=50, desc="warm start 1/2: copy drills")
        phase1_copy = copy_accuracy(engine, gate)  # in the drills' format; phase 2 moves on to the real one
    extra += extra_gsm8k(config.seed, config.sft_extra_gsm8k, {t.prompt for t in train + test})
    # every valid tool written for each task: a per-task draw is learned by heart and biases the choice
    gold = golden_trajectories(train + extra, toolbox, tok, DEMO_ROLLOUT, seed=config.seed, alternatives="each")
    reading_box = reading_toolbox()  # the drills' pair: listed in the drills and in the reading check
    gold += reading_drills(extra, config.reading_drills, tok, config.seed, reading_box)
    sft = sft_train(model, tok, gold, SFTConfig(seed=config.seed, max_steps=config.sft_steps, batch_size=16,
                                                learning_rate=config.sft_learning_rate),
                    progress=progress, desc="warm start 2/2: golden trajectories")
    engine.clear_prefix_cache()
    wall["warm_start"] = time.perf_counter() - t

    t = time.perf_counter()
    checks = format_checks(engine, under(test), toolbox, DEMO_ROLLOUT, seed=config.seed)
    checks["copy_drill_steps"] = float(len(copy_sft.losses)) if copy_sft else 0.0
    checks["copy_gate_accuracy"] = phase1_copy
    model.eval()
    checks["choice_gap_points"] = choice_gap(model, tok, test, toolbox, DEMO_ROLLOUT)
    checks["reading_gap_points"] = choice_gap(model, tok, [as_reading(t, "accuracy") for t in test],
                                              reading_box, DEMO_ROLLOUT, tool=READING_PAIR["accuracy"])
    before = _policy_eval(engine, test, toolbox, reward, config)
    wall["eval_before"] = time.perf_counter() - t

    t = time.perf_counter()
    grpo, variants = _grpo_settings(config)
    trainer = Trainer((model, tok), train, toolbox, reward, grpo, hooks=variants.hooks(),
                      policy_source=f"default-{config.size}")
    _train(trainer, train, toolbox, tok, reward, config, progress)
    wall["grpo"] = time.perf_counter() - t

    t = time.perf_counter()
    after = _policy_eval(trainer.engine, test, toolbox, reward, config)
    wall["eval_after"] = time.perf_counter() - t
    t = time.perf_counter()
    baselines = _baselines(train, test, toolbox, tok, config)
    wall["baselines"] = time.perf_counter() - t

    from orchlib.demo_report import summarize_demo, write_outputs

    metrics = summarize_demo(config, before, after, baselines, checks, trainer.history, sft, wall, reward)
    trained = trainer.accelerator.unwrap_model(trainer.model).eval()
    metrics["choice_gap_points"] = choice_gap(trained, tok, test, toolbox, DEMO_ROLLOUT)
    table = write_outputs(out, metrics, after, baselines, trainer.history, reward)
    return DemoResult(metrics, table, out, trainer.history)


def _train(trainer, train, toolbox, tok, reward, config, progress):
    """GRPO steps; each step's history also gets `reward_anchored`, its rollouts' reward against fixed
    reference runs of their tasks (see orchlib/demo_reference.py): the training reward is normalised
    within groups and falls as a group's rollouts come to agree."""
    from orchlib.demo_reference import anchored_reward, reference_runs

    refs = reference_runs(under(train), toolbox, tok, DEMO_ROLLOUT)
    G = config.group_size

    def anchor(report) -> None:
        groups = [report.trajectories[i:i + G] for i in range(0, len(report.trajectories), G)]
        report.metrics["reward_anchored"] = anchored_reward(
            groups, refs, reward, key=lambda t: f"{t.task_id}@{t.preference['name']}")

    trainer.run(config.steps, progress=progress, on_step=anchor)


def _policy_eval(engine, test, toolbox, reward, config):
    from orchlib.evaluate import evaluate

    return evaluate(engine, under(test), toolbox, reward, DEMO_ROLLOUT, group_size=config.eval_samples,
                    name="orchestrator", seed=config.seed)


def _baselines(train, test, toolbox, tok, config):
    from orchlib.baselines import make_baselines, try_routes
    from orchlib.evaluate import evaluate

    tasks = under(test)
    per_category = {c: [t for t in train if t.category == c][:20] for c in DEMO_TOOLS}  # train is sorted by category
    calibration = try_routes(under([t for ts in per_category.values() for t in ts]), toolbox, tok, DEMO_ROLLOUT)
    engines = make_baselines(tasks, toolbox, tok, calibration=calibration, config=DEMO_ROLLOUT, seed=config.seed)
    return {n: evaluate(e, tasks, toolbox, None, DEMO_ROLLOUT, name=n) for n, e in engines.items()}

