"""Hostile card, reward, task and config files: one error naming the file and line, fast, bounded memory."""

from __future__ import annotations

import re
import time

import pytest

from orchlib.cards import CardError, load_card
from orchlib.configfile import ConfigFileError, load_config
from orchlib.reward import Reward
from orchlib.reward.errors import RewardFileError
from orchlib.safejson import MAX_DEPTH as JSON_DEPTH
from orchlib.safeyaml import MAX_DEPTH, MAX_NODES
from orchlib.tasks import TaskFileError, load_tasks
from orchlib.train.run import RunConfig

CARD = """name: calc
kind: function
description: "adds
parameters: {type: object}
backend: {callable: orchlib.tools.calculator:calculate}
"""

# Nine levels of ten aliases each: 10^9 scalars once expanded; the loader must refuse it, not build it.
LAUGHS = "name: calc\nkind: function\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 10))


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_an_unterminated_quote_is_reported_on_its_own_line(tmp_path):
    with pytest.raises(CardError) as info:
        load_card(write(tmp_path, "calc.yaml", CARD))
    assert info.value.line == 3
    assert "quoted scalar" in info.value.problem and "end of stream" in info.value.problem


def test_a_billion_laughs_card_is_refused_quickly_at_the_alias_that_overflows(tmp_path):
    path = write(tmp_path, "laughs.yaml", LAUGHS)
    t0 = time.perf_counter()
    with pytest.raises(CardError) as info:
        load_card(path)
    assert time.perf_counter() - t0 < 2.0
    # level 4 holds 10^4 lists and 10^5 scalars: the first past MAX_NODES = 10^5
    assert MAX_NODES == 100_000 and info.value.line == 3 + 4
    assert f"more than {MAX_NODES:,} nodes" in str(info.value) and str(path) in str(info.value)


def test_shared_aliases_under_the_limit_still_load(tmp_path):
    text = ("name: calc\nkind: function\ndescription: &d adds two numbers\n"
            "parameters: &p {type: object, properties: {a: {type: number, description: *d}}}\n"
            "backend: {callable: orchlib.tools.calculator:calculate}\n")
    card = load_card(write(tmp_path, "calc.yaml", text))
    assert card.parameters["properties"]["a"]["description"] == "adds two numbers"


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000])
def test_deep_nesting_in_a_card_names_the_line(tmp_path, depth):
    text = "name: calc\nkind: function\nparameters:\n  x: " + "[" * depth + "]" * depth + "\n"
    with pytest.raises(CardError) as info:
        load_card(write(tmp_path, "deep.yaml", text))
    assert info.value.line == 4 and f"nested deeper than {MAX_DEPTH} levels" in info.value.problem


@pytest.mark.parametrize("text, line, needle", [
    ("name: r\nreward: outcome\nterms:\n  x: " + "[" * 5_000 + "]" * 5_000 + "\n", 4, "nested deeper"),
    (LAUGHS.replace("name: calc\nkind: function\n", "name: r\nreward: outcome\n"), 7, "more than"),
    ('name: r\nreward: outcome\ndoc: "never closed\n\n', 3, "end of stream"),
])
def test_hostile_reward_files_give_one_error_with_the_line(tmp_path, text, line, needle):
    with pytest.raises(RewardFileError) as info:
        Reward.load(write(tmp_path, "r.yaml", text))
    assert info.value.line == line and needle in info.value.problem


@pytest.mark.parametrize("line, needle", [
    ('{"id": "a", "prompt": "p", "meta": {"x": ' + "[" * 5_000 + "]" * 5_000 + "}}", "nested deeper"),
    ('{"id": "a", "prompt": "p", "meta": {"x": ' + "[" * JSON_DEPTH + "]" * JSON_DEPTH + "}}", "nested deeper"),
    ('{"id": "a", "prompt": "p", "meta": {"x": ' + "9" * 5_000 + "}}", "4300 digits"),
    ('{"id": "a\\ud800", "prompt": "p"}', "unpaired surrogate"),
])
def test_hostile_task_lines_give_one_error_with_the_line(tmp_path, line, needle):
    path = write(tmp_path, "t.jsonl", '{"id": "ok", "prompt": "p"}\n' + line + "\n")
    with pytest.raises(TaskFileError, match=rf"t\.jsonl:2: .*{needle}"):
        load_tasks(path)


@pytest.mark.parametrize("content, needle", [
    (b"steps: " + b"[" * 5_000 + b"]" * 5_000, ":1: not valid YAML: nested deeper"),
    (b"steps: 3\nout: \xff\n", "not UTF-8 text (byte 0xff"),
])
def test_hostile_config_files_give_one_error(tmp_path, content, needle):
    path = tmp_path / "run.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigFileError, match=re.escape(needle)):
        load_config(path, RunConfig)


def test_a_config_file_merges_into_a_base_field_by_field_and_names_the_line_of_a_bad_nested_value(tmp_path):
    """With `base`, a nested config the file names is merged field by field (what it leaves out keeps
    base's value, not the class default); a mapping-valued setting is replaced whole; errors still name
    the file's line and the dotted field."""
    from orchlib.configfile import dotted, merged
    from orchlib.experiments.variants import VariantConfig
    from orchlib.train.config import GRPOConfig
    from pydantic import BaseModel, ConfigDict

    class Outer(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        grpo: GRPOConfig = GRPOConfig(kl_coef=0.03, group_size=4)
        variants: VariantConfig = VariantConfig(category_quota={"gsm8k": 3, "arithmetic": 1})
        steps: int = 5

    path = tmp_path / "c.yaml"
    path.write_text("steps: 7\ngrpo:\n  learning_rate: 0.001\nvariants:\n  category_quota: {gsm8k: 4}\n")
    got = load_config(path, Outer, base=Outer())
    assert (got.steps, got.grpo.learning_rate, got.grpo.kl_coef, got.grpo.group_size) == (7, 0.001, 0.03, 4)
    assert got.variants.category_quota == {"gsm8k": 4}  # replaced, not merged with arithmetic's quota
    assert load_config(path, Outer).grpo.kl_coef == GRPOConfig().kl_coef  # without base: the class default
    assert merged(Outer(), dotted("grpo.rollout.temperature", 0.5)).grpo.rollout.temperature == 0.5
    assert merged(Outer(), dotted("grpo.rollout.temperature", 0.5)).grpo.kl_coef == 0.03
    path.write_text("steps: 7\ngrpo:\n  learning_rate: 0.001\n  group_size: one\n")
    with pytest.raises(ConfigFileError, match=r"c\.yaml:4: grpo\.group_size: "):
        load_config(path, Outer, base=Outer())
