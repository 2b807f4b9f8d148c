"""The command line: info, train from a YAML config (and its errors), eval, --help of every command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

from orchlib.cli import COMMANDS, main


def test_every_command_has_help(capsys):
    for name in COMMANDS:
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        assert e.value.code == 0
        assert name in capsys.readouterr().out


def test_info_runs_offline_in_a_subprocess(policy_cache):
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "ORCHLIB_CACHE": str(policy_cache)}
    done = subprocess.run([sys.executable, "-m", "orchlib.cli", "info"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "parameters" in done.stdout and "tool cards" in done.stdout and "toolorchestra" in done.stdout


@pytest.mark.parametrize("text, expected", [
    ("steps: 2\ngrpo:\n  learning_rate: -1\n", "bad.yaml:3: grpo.learning_rate: Input should be greater than 0"),
    ("steps: 2\ngrpo:\n  lr: 0.1\n", "bad.yaml:3: grpo.lr: unknown field"),
    ("steps: [1, 2\n", "bad.yaml:1: not valid YAML"),
    ("- 1\n- 2\n", "bad.yaml:1: expected a mapping"),
    ("env: {reward: rewards/nope.yaml}\n", "bad.yaml: env.reward: rewards/nope.yaml does not exist"),
    ("env: {tasks: nope.jsonl}\n", "bad.yaml: env.tasks: nope.jsonl does not exist"),
    # the world is said in `env:` alone
    ("suite: orchestra-choice\n", "bad.yaml:1: suite: unknown field"),
    ("tasks: my.jsonl\n", "bad.yaml:1: tasks: unknown field"),
    ("env: nowhere\n", "bad.yaml:1: env.name: Value error, 'nowhere' is not one of ['airline', 'orchestra-choice', "
                       "'orchestra-mini', 'orchestra-read', 'shop', 'toy']"),
    ("env: {name: airline, n_train: 4}\n", "bad.yaml:1: env: Value error, n_train: world 'airline' takes no such "
                                           "option (its options: none)"),
    ("env:\n  name: shop\n  options: {colour: red}\n", "bad.yaml:1: env: Value error, colour: world 'shop' takes no "
                                                       "such option (its options: n_train, n_test)"),
    ("env: {name: shop, tasks: my.jsonl}\n", "bad.yaml:1: env: Value error, give one of name, tasks and factory, not "
                                             "name and tasks"),
    ("env: {tasks: my.jsonl, n_train: 3}\n", "env: Value error, n_train: for a named world or a factory"),
    ("env: {factory: nocolon}\n", "env: Value error, factory: 'nocolon' is not 'package.module:function'"),
    ("env: {name: shop, colour: red}\n", "bad.yaml:1: env.colour: unknown field"),
    ("env: mypkg.worlds:make\n", "bad.yaml: env.factory: 'mypkg.worlds:make' is code of one's own; run it only if "
                                 "you trust it, with --trust-code"),
    ("hooks: {from: 'subprocess run'}\n", "bad.yaml:1: hooks.from: Value error, expected 'package.module:factory'"),
    ("hooks: {from: os:system, with: {command: !!binary aGk=}}\n", "bad.yaml:1: hooks.with: Value error, command: "
     "expected plain data"),
    ("hooks: {from: orchlib.experiments.variants:VariantConfig}\n", "bad.yaml: hooks: "
     "'orchlib.experiments.variants:VariantConfig' would be imported and run; a config file is data, so pass "
     "--trust-code"),
])
def test_train_bad_config_is_one_clear_line_and_exit_2(tmp_path, capsys, monkeypatch, text, expected):
    monkeypatch.chdir(REPO)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err


@pytest.mark.parametrize("text, expected", [
    ("hooks: {from: nosuch_module:hooks}\n", "bad.yaml: hooks.from: cannot import nosuch_module"),
    ("hooks: {from: orchlib.experiments.variants:Nope}\n",
     "bad.yaml: hooks.from: orchlib.experiments.variants has no attribute Nope"),
    ("hooks: {from: builtins:dict}\n", "bad.yaml: hooks: builtins:dict returned dict, not Hooks"),
    ("hooks:\n  from: orchlib.experiments.variants:VariantConfig\n  with: {paired_profiles: [accuracy, frugal]}\n",
     "bad.yaml: hooks.with: paired_profiles: unknown profile 'frugal'"),
])
def test_train_hooks_that_cannot_be_built_are_one_line_with_trust_code(tmp_path, capsys, monkeypatch, text,
                                                                       expected):
    """With --trust-code the hooks are imported and built when training starts, before the policy loads."""
    monkeypatch.chdir(REPO)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + f"out: {tmp_path / 'run'}\n")
    assert main(["train", "--config", str(bad), "--trust-code"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err


def test_train_from_config_then_resume(tmp_path, policy_cache, monkeypatch, capsys):
    from orchlib.envs.toy import toy_tasks
    from orchlib.tasks import save_tasks

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    save_tasks(toy_tasks(8), tmp_path / "tasks.jsonl")
    cards = tmp_path / "cards"
    cards.mkdir()
    from orchlib.cards import save_card
    from orchlib.envs.toy import toy_toolbox

    for card in toy_toolbox().cards:
        save_card(card, cards / f"{card.name}.yaml")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""policy: tiny
env:
  tasks: {tmp_path / 'tasks.jsonl'}
  cards: {cards}
  reward: rewards/outcome.yaml
steps: 2
save_every: 1
warm_start: {{epochs: 1}}
grpo:
  tasks_per_step: 2
  group_size: 2
  rollout: {{max_new_tokens: 8, tool_schema: compact, tool_latency: declared}}
out: {tmp_path / 'run'}
""")
    assert main(["train", "--config", str(cfg)]) == 0
    state = json.loads((tmp_path / "run" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 2 and len(state["history"]) == 2
    assert main(["train", "--config", str(cfg), "--steps", "3"]) == 0  # resumes from step 2
    state = json.loads((tmp_path / "run" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 3 and [h["step"] for h in state["history"]] == [1.0, 2.0, 3.0]
    assert "trained 3 steps" in capsys.readouterr().out


@pytest.mark.parametrize("world, options", [("shop", "n_train: 2, n_test: 0, "), ("airline", "")])
def test_every_shipped_world_trains_from_the_command_line(world, options, tmp_path, policy_cache, monkeypatch,
                                                          capsys):
    """The stateful domains (a database per episode; airline's scripted users) train from `env:` as the suites
    do: a warm start on their golden conversations, then one GRPO step (tiny policy, tiny sizes)."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""policy: tiny
env: {{name: {world}, seed: 0, {options}reward: rewards/outcome.yaml}}
steps: 1
warm_start: {{max_steps: 1, batch_size: 2}}
grpo:
  tasks_per_step: 1
  group_size: 2
  rollout: {{max_turns: 2, max_new_tokens: 8, tool_schema: compact, tool_latency: declared}}
out: {tmp_path / 'run'}
""")
    assert main(["train", "--config", str(cfg)]) == 0
    state = json.loads((tmp_path / "run" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 1 and len(state["history"]) == 1
    from orchlib.envs import make_environment

    history = state["history"][0]
    offered = set(make_environment(world).tools.names)
    assert {k.split("/", 1)[1] for k in history if k.startswith("share/")} <= offered
    assert "trained 1 steps" in capsys.readouterr().out


FACTORY = """
from pathlib import Path

Path(__file__).with_name("imported").write_text("yes")


def make(seed=0, reward=None, n_train=2, n_test=0):
    from orchlib.envs.toy import environment

    Path(__file__).with_name("called").write_text(f"{seed} {n_train}")
    return environment(seed=seed, reward=reward, n_train=n_train, n_test=n_test)
"""


def test_a_factory_in_a_config_runs_only_when_trusted(tmp_path, policy_cache, monkeypatch, capsys):
    """Loading and checking a config that names a factory imports nothing; the run refuses it without
    --trust-code, and with it imports the factory and calls it with the entry's seed and options."""
    from orchlib.configfile import load_config
    from orchlib.train.run import RunConfig, run_training

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    (tmp_path / "myworlds.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""policy: tiny
env: {{factory: "myworlds:make", seed: 3, n_train: 2, reward: rewards/outcome.yaml}}
steps: 0
warm_start: null
out: {tmp_path / 'run'}
""")
    run = load_config(cfg, RunConfig)
    assert run.env.factory == "myworlds:make" and not (tmp_path / "imported").exists()
    with pytest.raises(ValueError, match="env.factory: 'myworlds:make' is code of one's own"):
        run_training(run)
    assert main(["train", "--config", str(cfg)]) == 2
    assert "--trust-code" in capsys.readouterr().err
    assert not (tmp_path / "imported").exists() and "myworlds" not in sys.modules
    assert main(["train", "--config", str(cfg), "--trust-code"]) == 0
    assert (tmp_path / "called").read_text() == "3 2"
    assert "trained 0 steps" in capsys.readouterr().out


def test_eval_writes_reports(tmp_path, policy_cache, monkeypatch, capsys):
    from orchlib.envs import make_suite
    from orchlib.tasks import save_tasks

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    suite = make_suite(0, n_train=5, n_test=5, categories=("arithmetic",))
    save_tasks(suite.test, tmp_path / "test.jsonl")
    out = tmp_path / "eval"
    assert main(["eval", "--tasks", str(tmp_path / "test.jsonl"), "--baselines", "--tool-schema", "compact",
                 "--out", str(out)]) == 0
    for name in ("policy", "oracle", "strongest"):
        m = json.loads((out / name / "metrics.json").read_text())
        assert m["metrics"]["overall"]["n"] == 5
    assert json.loads((out / "oracle" / "metrics.json").read_text())["metrics"]["overall"]["accuracy"] == 1.0
    assert "oracle" in capsys.readouterr().out


def test_eval_runs_a_shipped_environment_by_name(tmp_path, policy_cache, monkeypatch, capsys):
    """`--env toy`: the toy world's test tasks and tools (not the default suite's), the oracle scoring
    every one; an environment and a tasks file together, or an unknown name, are one-line usage errors."""
    from orchlib.envs.toy import environment

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    out = tmp_path / "eval"
    assert main(["eval", "--env", "toy", "--baselines", "--out", str(out)]) == 0
    want = len(environment().test)
    oracle = json.loads((out / "oracle" / "metrics.json").read_text())["metrics"]["overall"]
    assert (oracle["n"], oracle["accuracy"]) == (want, 1.0)
    lines = (out / "oracle" / "trajectories.jsonl").read_text().splitlines()
    calls = {json.loads(line)["turns"][0]["calls"][0]["name"] for line in lines}
    assert calls <= {t.name for t in environment().tools}  # the toy's own tools, not the shipped cards
    capsys.readouterr()
    assert main(["eval", "--env", "toy", "--tasks", "x.jsonl", "--out", str(out)]) == 2
    assert "env or tasks, not both" in capsys.readouterr().err
    assert main(["eval", "--env", "nowhere", "--out", str(out)]) == 2
    assert "unknown environment 'nowhere'" in capsys.readouterr().err


def test_eval_bad_tasks_file_exit_2(tmp_path, capsys):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"id": "a", "prompt": "x"}\n{"id": "b"}\n')
    assert main(["eval", "--tasks", str(bad)]) == 2
    assert "t.jsonl:2: prompt" in capsys.readouterr().err
