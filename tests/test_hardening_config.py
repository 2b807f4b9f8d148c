"""A run config is data: reading or validating one runs nothing (its `hooks:` run only with --trust-code,
when training starts); its numbers are finite and its ints are not true/false; a step whose loss is not
finite is refused, and the last good checkpoint stays as it was."""

from __future__ import annotations

import json
import math
import re
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import REPO

from orchlib.cli import main
from orchlib.configfile import ConfigFileError, load_config

# A module the hooks name: importing it writes one marker, calling its factory another (with its argument).
HOOK_MODULE = '''
from pathlib import Path

from orchlib.train.hooks import Hooks, PaperLoss

Path({imported!r}).write_text("imported")


class NaNAfter(PaperLoss):
    """The paper's loss, times NaN from update `after` + 1 on: a divergence at a step chosen in advance."""

    def __init__(self, after):
        self.after, self.updates = after, 0

    def prepare(self, groups, advantages, tokenizer):
        self.updates += 1
        return super().prepare(groups, advantages, tokenizer)

    def __call__(self, batch, config):
        loss, stats = super().__call__(batch, config)
        return (loss * float("nan") if self.updates > self.after else loss), stats


def make(note, nan_after=None):
    Path({called!r}).write_text(note)
    return Hooks() if nan_after is None else Hooks(token_loss=NaNAfter(nan_after))
'''


@pytest.fixture
def hook_module(tmp_path, monkeypatch):
    """(module name, marker written on import, marker written by the factory), the module on sys.path."""
    name = f"orchlib_test_hooks_{tmp_path.name}".replace("-", "_")
    imported, called = tmp_path / "imported", tmp_path / "called"
    (tmp_path / f"{name}.py").write_text(HOOK_MODULE.format(imported=str(imported), called=str(called)))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, imported, called
    sys.modules.pop(name, None)


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def one_line(capsys) -> str:
    """The one line on stderr (transformers' "Writing model shards" progress bar of each save aside)."""
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if line.strip() and not line.startswith("Writing model shards")]
    assert len(err) == 1, err
    return err[0]


# ------------------------------------------------------------------------------------ hooks are code
def test_reading_or_validating_a_config_with_hooks_runs_nothing(tmp_path, hook_module):
    from orchlib.train.run import RunConfig

    name, imported, called = hook_module
    touched = tmp_path / "touched"
    write(tmp_path / "mine.yaml", f"hooks: {{from: '{name}:make', with: {{note: hi}}}}\n")
    write(tmp_path / "shell.yaml", f"hooks: {{from: 'subprocess:run', with: {{args: [touch, '{touched}']}}}}\n")
    write(tmp_path / "shell_invalid.yaml", f"""\
        steps: -1
        hooks: {{from: 'subprocess:run', with: {{args: [touch, '{touched}']}}}}
        """)
    cfg = load_config(tmp_path / "mine.yaml", RunConfig)
    assert (cfg.hooks.factory, cfg.hooks.options) == (f"{name}:make", {"note": "hi"})
    assert load_config(tmp_path / "shell.yaml", RunConfig).hooks.options == {"args": ["touch", str(touched)]}
    with pytest.raises(ConfigFileError, match=r"shell_invalid.yaml:1: steps: Input should be greater"):
        load_config(tmp_path / "shell_invalid.yaml", RunConfig)
    RunConfig.model_validate({"hooks": {"from": "subprocess:run", "with": {"args": ["touch", str(touched)]}}})
    assert not imported.exists() and not called.exists() and not touched.exists()
    assert name not in sys.modules


@pytest.mark.parametrize("hooks, problem", [
    ("{from: subprocess}", "hooks.from: Value error, expected 'package.module:factory', got 'subprocess'"),
    ("{from: 'os:system; rm'}", "hooks.from: Value error, expected 'package.module:factory'"),
    ("{from: 'a.b:c', with: [1]}", "hooks.with: Input should be a valid dictionary"),
    ("{from: 'a.b:c', with: {x: {y: [1, .nan]}}}", "hooks.with: Value error, x.y[1]: expected a finite number"),
    ("{from: 'a.b:c', with: {x: !!binary aGk=}}", "hooks.with: Value error, x: expected plain data"),
    ("{from: 'a.b:c', with: {x: 1}, extra: 2}", "hooks.extra: unknown field"),
])
def test_a_hooks_entry_of_the_wrong_shape_is_one_line_naming_the_field(tmp_path, hooks, problem):
    from orchlib.train.run import RunConfig

    path = write(tmp_path / "run.yaml", f"steps: 1\nhooks: {hooks}\n")
    with pytest.raises(ConfigFileError) as e:
        load_config(path, RunConfig)
    assert str(e.value).startswith(f"{path}:2: {problem}") and "\n" not in str(e.value)


def test_train_without_trust_code_refuses_hooks_in_one_line_and_runs_nothing(tmp_path, capsys, monkeypatch,
                                                                              hook_module):
    from orchlib.settings import UntrustedCodeError
    from orchlib.train.run import RunConfig, run_training

    name, imported, called = hook_module
    monkeypatch.chdir(REPO)
    config = write(tmp_path / "run.yaml", f"""\
        steps: 0
        warm_start: null
        hooks: {{from: '{name}:make', with: {{note: hi}}}}
        out: {tmp_path / 'run'}
        """)
    assert main(["train", "--config", str(config)]) == 2
    assert one_line(capsys) == (f"orchlib train: {config}: hooks: '{name}:make' would be imported and run; a config "
                                "file is data, so pass --trust-code (orchlib train) or trust_code=True "
                                "(run_training) if you trust its code")
    with pytest.raises(UntrustedCodeError, match=r"^hooks: .*trust_code=True"):
        run_training(load_config(config, RunConfig))
    assert not imported.exists() and not called.exists() and not (tmp_path / "run").exists()


def test_train_with_trust_code_builds_the_hooks_when_training_starts(tmp_path, capsys, monkeypatch, policy_cache,
                                                                    hook_module):
    name, imported, called = hook_module
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    config = write(tmp_path / "run.yaml", f"""\
        steps: 0
        warm_start: null
        hooks: {{from: '{name}:make', with: {{note: from the config}}}}
        out: {tmp_path / 'run'}
        """)
    assert main(["train", "--config", str(config), "--trust-code"]) == 0
    assert imported.read_text() == "imported" and called.read_text() == "from the config"
    assert "trained 0 steps" in capsys.readouterr().out


def test_the_shipped_example_with_hooks_still_builds_them_when_asked():
    from orchlib.experiments.variants import VariantConfig
    from orchlib.train.run import RunConfig

    cfg = load_config(REPO / "examples" / "train_tiny.yaml", RunConfig)
    assert cfg.hooks.build().record == VariantConfig(paired_profiles=("accuracy", "thrifty")).hooks().record


# ------------------------------------------------------------------------ finite numbers, no booleans
@pytest.mark.parametrize("text, line, field, problem", [
    ("grpo:\n  learning_rate: .inf\n", 2, "grpo.learning_rate", "Input should be a finite number"),
    ("grpo:\n  learning_rate: 1e400\n", 2, "grpo.learning_rate", "Input should be a finite number"),
    ("grpo: {kl_coef: .nan}\n", 1, "grpo.kl_coef", "Input should be a finite number"),
    ("grpo: {clip_high: .inf}\n", 1, "grpo.clip_high", "Input should be a finite number"),
    ("grpo: {max_grad_norm: .inf}\n", 1, "grpo.max_grad_norm", "Input should be a finite number"),
    ("grpo:\n  rollout:\n    temperature: .NaN\n", 3, "grpo.rollout.temperature", "Input should be a finite number"),
    ("grpo: {rollout: {tool_timeout_s: .inf}}\n", 1, "grpo.rollout.tool_timeout_s", "Input should be a finite"),
    ("warm_start: {learning_rate: -.inf}\n", 1, "warm_start.learning_rate", "Input should be a finite number"),
    ("steps: true\n", 1, "steps", "Value error, expected a number, got true"),
    ("steps: 2\nsave_every: false\n", 2, "save_every", "Value error, expected a number, got false"),
    ("grpo: {group_size: true}\n", 1, "grpo.group_size", "Value error, expected a number, got true"),
    ("grpo: {learning_rate: true}\n", 1, "grpo.learning_rate", "Value error, expected a number, got true"),
    ("env: {name: orchestra-choice, n_train: true}\n", 1, "env.n_train", "Value error, expected a number, got true"),
    ("evaluation: {samples: true}\n", 1, "evaluation.samples", "Value error, expected a number, got true"),
    ("grpo: {lora: {r: true}}\n", 1, "grpo.lora.r", "Value error, expected a number, got true"),
])
def test_non_finite_and_boolean_numbers_are_one_line_naming_file_line_and_field(tmp_path, text, line, field,
                                                                               problem):
    from orchlib.train.run import RunConfig

    path = write(tmp_path / "run.yaml", text)
    with pytest.raises(ConfigFileError) as e:
        load_config(path, RunConfig)
    assert str(e.value).startswith(f"{path}:{line}: {field}: {problem}") and "\n" not in str(e.value)


@pytest.mark.parametrize("text, line, problem", [
    ("env: !!float\n", 1, "(IndexError: string index out of range)"),
    ("steps: 2\ngrpo: {group_size: !!int abc}\n", 2, "(ValueError: invalid literal for int() with base 10: 'abc')"),
    ("steps: 2\nwarm_start:\n  shared_prompt: !!bool maybe\n", 3, "(KeyError: 'maybe')"),
])
def test_a_tagged_value_yaml_cannot_read_is_one_line_naming_its_line(tmp_path, text, line, problem):
    from orchlib.train.run import RunConfig

    path = write(tmp_path / "run.yaml", text)
    with pytest.raises(ConfigFileError) as e:
        load_config(path, RunConfig)
    assert str(e.value) == f"{path}:{line}: not valid YAML: a tagged value cannot be read {problem}"


def test_yaml_ints_and_floats_still_load_and_every_shipped_run_config_reads(tmp_path):
    from orchlib.demo.config import DemoConfig
    from orchlib.train.run import RunConfig

    cfg = load_config(write(tmp_path / "run.yaml", "steps: 3\ngrpo: {learning_rate: 1, group_size: 4, "
                                                   "min_reward_spread: null}\nwarm_start: {epochs: 2}\n"), RunConfig)
    assert (cfg.steps, cfg.grpo.learning_rate, cfg.grpo.group_size, cfg.warm_start.epochs) == (3, 1.0, 4, 2)
    assert type(cfg.steps) is int and type(cfg.grpo.learning_rate) is float
    shipped = [p for p in sorted((REPO / "examples").glob("*.yaml")) if re.search(r"^(grpo|steps):", p.read_text(),
                                                                                     re.M)]
    assert len(shipped) >= 2  # train_tiny, qwen3_8b, smollm2_choice
    for p in shipped:  # the demo's examples are DemoConfig files
        load_config(p, DemoConfig if p.name.startswith("demo_") else RunConfig)


def test_a_run_whose_phases_would_train_in_two_precisions_on_some_machine_is_refused_when_read(tmp_path):
    """Accelerate keeps one precision per process: 'amx' (bf16 on an AMX CPU or a GPU) for the warm start and
    'no' for GRPO ran on an AMD CPU and failed between the phases on the others. The file is refused when
    read, naming the machine and each phase's setting; settings that agree everywhere load."""
    from orchlib.train.run import RunConfig

    path = write(tmp_path / "run.yaml", "warm_start: {mixed_precision: amx}\ngrpo: {mixed_precision: 'no'}\n")
    with pytest.raises(ConfigFileError) as e:
        load_config(path, RunConfig)
    assert str(e.value) == (
        f"{path}:1: (file): Value error, mixed_precision: a run trains in one precision (Accelerate keeps one per "
        f"process), but on a GPU its phases would differ (grpo.mixed_precision: 'no' (no), "
        f"warm_start.mixed_precision: 'amx' (bf16)); give every phase the same setting")
    with pytest.raises(ValueError, match=r"on a CPU with AMX its phases would differ \(grpo.mixed_precision: "
                                         r"'bf16' \(bf16\), warm_start.mixed_precision: 'auto' \(no\), "
                                         r"order_drills.sft.mixed_precision: 'amx' \(bf16\)\)"):
        RunConfig(grpo={"mixed_precision": "bf16"}, warm_start={"mixed_precision": "auto"},
                  order_drills={"sft": {"mixed_precision": "amx"}})
    for agree in ("auto", "no", "bf16"):
        cfg = RunConfig(grpo={"mixed_precision": agree}, warm_start={"mixed_precision": agree},
                        order_drills={"sft": {"mixed_precision": agree}})
        assert cfg.grpo.mixed_precision == cfg.warm_start.mixed_precision == agree
    assert RunConfig(grpo={"mixed_precision": "no"}, warm_start=None).warm_start is None  # one phase: nothing to agree
    from orchlib.demo.config import DemoConfig  # the demo's phases likewise

    with pytest.raises(ValueError, match=r"on a GPU its phases would differ \(warm_start.copying.mixed_precision: "
                                         r"'auto' \(bf16\), warm_start.golden.mixed_precision: 'auto' \(bf16\), "
                                         r"grpo.mixed_precision: 'no' \(no\)\)"):
        DemoConfig(grpo={"mixed_precision": "no"})
    assert DemoConfig().grpo.mixed_precision == "auto"


def test_the_demo_and_variant_configs_refuse_infinities_and_booleans_too():
    from pydantic import ValidationError

    from orchlib.demo.config import DemoConfig, WarmStartConfig
    from orchlib.experiments.variants import VariantConfig

    for make, field, value in [(DemoConfig, "replay_coef", math.inf), (DemoConfig, "steps", True),
                               (WarmStartConfig, "copy_gate", math.nan), (VariantConfig, "preference_contrast", 1e400),
                               (VariantConfig, "category_quota", {"gsm8k": True})]:
        with pytest.raises(ValidationError) as e:
            make(**{field: value})
        assert e.value.errors()[0]["loc"] == (field,)
    assert VariantConfig(category_quota={"gsm8k": 3}).category_quota == {"gsm8k": 3}


# ------------------------------------------------------------------------------- a diverging step
@pytest.fixture
def toy_trainer(policy_cache):
    from orchlib.env import Environment
    from orchlib.envs.toy import toy_tasks, toy_toolbox
    from orchlib.models import build_default_policy
    from orchlib.reward import Reward
    from orchlib.rollout import RolloutConfig
    from orchlib.train import GRPOConfig, Trainer

    cfg = GRPOConfig(seed=5, tasks_per_step=2, group_size=2, min_reward_spread=None,
                     rollout=RolloutConfig(max_turns=1, max_new_tokens=6, tool_schema="compact",
                                           tool_latency="declared"))
    env = Environment(train=toy_tasks(4), tools=toy_toolbox(), reward=Reward.from_string("name: a\nreward: outcome"))
    return Trainer(build_default_policy("tiny", cache=policy_cache), env, cfg), env


def test_a_nan_loss_stops_the_step_before_the_weights_change_and_the_checkpoint_survives(toy_trainer, tmp_path):
    from orchlib.train import Trainer
    from orchlib.train.checkpoint import find_checkpoint
    from orchlib.train.grpo import TrainingDiverged
    from orchlib.train.hooks import PaperLoss

    trainer, env = toy_trainer
    trainer.step()  # a real update: the checkpoint holds weights the NaN step must not touch
    ckpt = trainer.save(tmp_path / "ckpt")
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    optimizer_before = json.dumps(str(trainer.optimizer.state_dict()))

    class NaNLoss(PaperLoss):
        def __call__(self, batch, config):
            loss, stats = super().__call__(batch, config)
            return loss * float("nan"), stats

    trainer.hooks = replace(trainer.hooks, token_loss=NaNLoss())
    with pytest.raises(TrainingDiverged) as e:
        trainer.step()
    assert re.fullmatch(r"step 2: training diverged \(loss nan, gradient norm nan\); the step was not applied",
                        str(e.value)), str(e.value)
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert json.dumps(str(trainer.optimizer.state_dict())) == optimizer_before
    assert trainer.step_count == 1 and len(trainer.history) == 1
    assert all(p.grad is None for p in trainer.model.parameters())
    assert find_checkpoint(ckpt) == ckpt
    back = Trainer.resume(ckpt, env)
    assert back.step_count == 1
    assert all(torch.equal(before[k], v) for k, v in back.model.state_dict().items())


def test_train_that_diverges_prints_one_line_exits_1_and_keeps_the_last_checkpoint(tmp_path, capsys, monkeypatch,
                                                                                  policy_cache, hook_module):
    from orchlib.cards import save_card
    from orchlib.envs.toy import toy_tasks, toy_toolbox
    from orchlib.tasks import save_tasks
    from orchlib.train.checkpoint import verify

    name, _, _ = hook_module
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    save_tasks(toy_tasks(4), tmp_path / "tasks.jsonl")
    (tmp_path / "cards").mkdir()
    for card in toy_toolbox().cards:
        save_card(card, tmp_path / "cards" / f"{card.name}.yaml")
    config = write(tmp_path / "run.yaml", f"""\
        env: {{tasks: {tmp_path / 'tasks.jsonl'}, cards: {tmp_path / 'cards'}, reward: rewards/outcome.yaml}}
        steps: 3
        save_every: 1
        warm_start: null
        grpo:
          tasks_per_step: 2
          group_size: 2
          min_reward_spread: null
          rollout: {{max_turns: 1, max_new_tokens: 6, tool_schema: compact, tool_latency: declared}}
        hooks: {{from: '{name}:make', with: {{note: nan, nan_after: 1}}}}
        out: {tmp_path / 'run'}
        """)
    assert main(["train", "--config", str(config), "--trust-code"]) == 1
    ckpt = tmp_path / "run" / "checkpoint"
    assert one_line(capsys) == ("orchlib train: step 2: training diverged (loss nan, gradient norm nan); the step was "
                                f"not applied; the last checkpoint, {ckpt}, is kept")
    verify(ckpt)
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["step"] == 1 and len(state["history"]) == 1
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["checkpoint"]  # no partial copy, no history.json
