"""Run: .venv/bin/python benchmarks/bench_fuzz.py [--cases 10000] [--seed 0] [--readers chat-bytes,cards,...]

Fuzzes every reader of outside input with hypothesis and prints one row per reader: cases run, how
many were read without error, how many ended in the reader's documented error, how many raised
anything else (each such case is printed), and the slowest case in seconds. The target: 0 other
exceptions and no case over 5 s.

Readers, with the errors they document:
- chat-bytes    parse_tool_calls on random bytes (decoded as UTF-8 with replacement), bare and
                wrapped in <tool_call> tags                           ToolCallParseError
- chat-json     parse_tool_calls on structured JSON: name/arguments/extra keys holding random JSON,
                deep nesting, huge integers, lone surrogates         ToolCallParseError
- cards         load_card on random text, and on YAML of card-shaped mappings (random values,
                anchors and aliases, deep flow nesting, cut at a random point)   CardError
- rewards       Reward.from_string on random text, and on YAML of reward-shaped mappings (random
                expressions built from the language's tokens)    RewardFileError, RewardSyntaxError
- tasks         load_tasks on random bytes lines, and on JSONL of task-shaped objects   TaskFileError
- recordings    read_recording on JSONL rows of recording-shaped objects (random values, NaN counts,
                nested and deep rows), CSV (duplicate headers, short rows, fields over 128 KiB, stray
                quotes) and Parquet (written, then cut at a random point)          RecordingError
- conversations read_openai_jsonl on mutated OpenAI-format conversations (ids of the wrong type or
                missing, NaN and huge integers in arguments, call markup and unclosed tags in text,
                deep nesting, messages out of order)  ConversationError, one line naming the place
- run-configs   load_config(FILE, RunConfig) on YAML run configs: a valid one mutated (wrong types, .inf,
                .nan, 1e400, true/false for numbers, unknown fields, deep nesting, cuts), `env:` entries
                (a world by name with its options, task files, a factory, mixes of them, wrong types),
                and `hooks:` / `env:` entries naming odd or dangerous targets (subprocess:run,
                os:system). A case is also undocumented if it ran code (its `touch` marker exists), or
                ended in a config holding a non-finite number or a true/false where a number belongs
                                                                                   ConfigFileError

The default test suite runs a few hundred cases of each (tests/test_hardening_fuzz.py); exits 1 if a
reader raised anything undocumented or a case took over 5 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from orchlib.cards import CardError, load_card
from orchlib.chat import TOOL_CALL, TOOL_CALL_END, ToolCallParseError, parse_tool_calls
from orchlib.configfile import ConfigFileError, load_config
from orchlib.openai_messages import ConversationError, read_openai_jsonl, to_openai_messages
from orchlib.recordings import RecordingError, read_recording
from orchlib.reward import Reward, RewardFileError, RewardSyntaxError
from orchlib.tasks import TaskFileError, load_tasks
from orchlib.train.run import RunConfig

HANG_S = 5.0

# ------------------------------------------------------------------------------------------ values
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20)
           | st.sampled_from(["", "\ud800", "NaN", "1e999", "9" * 5000, "function", "llm", "python"]))
json_values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                                                             max_size=4),
                           max_leaves=25)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# ------------------------------------------------------------------------------------------- chat
def chat_bytes(raw: bytes, tag: bool) -> None:
    text = raw.decode("utf-8", errors="replace")
    parse_tool_calls(f"{TOOL_CALL}{text}{TOOL_CALL_END}" if tag else text)


chat_bytes_cases = st.tuples(st.binary(max_size=300), st.booleans())


def chat_json(obj: Any, raw_suffix: str) -> None:
    body = json.dumps(obj, ensure_ascii=bool(raw_suffix)) + raw_suffix
    parse_tool_calls(f"{TOOL_CALL}\n{body}\n{TOOL_CALL_END}")


chat_json_cases = st.tuples(
    st.dictionaries(st.sampled_from(["name", "arguments", "extra"]), json_values, max_size=3)
    | st.builds(lambda d, n: {"name": "f", "arguments": {"x": json.loads(nested(d))} if d < 900 else {}},
                st.integers(1, 200), st.integers(0, 1)),
    st.sampled_from(["", " ", "}", ',"x":' + nested(2000) + "}", ',"x":' + "9" * 5000 + "}", ',"x":"\\ud800"}']))

# ------------------------------------------------------------------------------------------ cards
CARD_KEYS = ["name", "kind", "description", "parameters", "backend", "price", "latency", "tags", "input", "final",
             "label", "bogus"]


def yaml_of(value: Any) -> str:
    """Flow-style YAML of a plain value, written by hand so anchors and cuts can be spliced in."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {yaml_of(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(yaml_of(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, float) else repr(value)


def card_text(fields: dict[str, Any], extra: str, cut: float | None) -> str:
    text = "".join(f"{k}: {yaml_of(v)}\n" for k, v in fields.items()) + extra
    return text[: int(len(text) * cut)] if cut is not None else text


EXTRAS = ["", "x: &a [1, 2]\ny: [*a, *a, *a]\n", "x: &a [*a]\n", "x: *undefined\n", "x: " + nested(5000) + "\n",
          "x: !!python/object:os.system {}\n", "x: \"unclosed\n", "\t- tab\n", "x: 1\nx: 2\n", "%YAML 9.9\n---\n",
          "--- a\n--- b\n", "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 8))]


def card_cases():
    fields = st.dictionaries(st.sampled_from(CARD_KEYS), json_values | st.sampled_from(["function", "python", "llm"]),
                             max_size=8)
    structured = st.builds(card_text, fields, st.sampled_from(EXTRAS), st.none() | st.floats(0, 1))
    return st.one_of(structured, st.text(max_size=300))


def read_card(text: str, folder: Path) -> None:
    path = folder / "card.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    load_card(path)


# ---------------------------------------------------------------------------------------- rewards
TOKENS = ["outcome", "cost", "latency", "turns", "calls['a']", "P.cost", "P.tools['a']", "minmax(", "zscore(", "rank(",
          "mean(", "where(", "sum(", "for t in tools", ")", "(", "+", "-", "*", "/", "**", ",", "1", "0.5", "1e309",
          "x", "__import__", "'a'", "[", "]", "if", "else", "<", "and", "G"]
expressions = st.lists(st.sampled_from(TOKENS), max_size=12).map(" ".join)


def reward_text(fields: dict[str, Any], extra: str, cut: float | None) -> str:
    text = "".join(f"{k}: {yaml_of(v)}\n" for k, v in fields.items()) + extra
    return text[: int(len(text) * cut)] if cut is not None else text


def reward_cases():
    value = json_values | expressions | st.dictionaries(st.text(max_size=6) | st.sampled_from(["a", "b", "cost"]),
                                                        expressions | scalars, max_size=3)
    fields = st.dictionaries(st.sampled_from(["name", "doc", "reward", "terms", "preference", "tools", "rewrd"]),
                             value, max_size=5)
    structured = st.builds(reward_text, fields, st.sampled_from(EXTRAS), st.none() | st.floats(0, 1))
    return st.one_of(structured, st.text(max_size=300))


def read_reward(text: str, folder: Path) -> None:
    Reward.from_string(text, path="fuzz.yaml")


# ------------------------------------------------------------------------------------------ tasks
TASK_KEYS = ["id", "prompt", "tools", "checker", "answer", "preference", "category", "golden", "env", "meta", "x"]


def task_line(obj: dict[str, Any], suffix: str) -> bytes:
    return (json.dumps(obj) + suffix).encode("utf-8", errors="surrogatepass")


def task_cases():
    obj = st.dictionaries(st.sampled_from(TASK_KEYS), json_values | st.sampled_from(["exact", "numeric", "a:b"]),
                          max_size=7)
    line = st.builds(task_line, obj, st.sampled_from(["", "}", ' ', '\x00', ',"meta":' + nested(3000) + "}"]))
    return st.lists(line | st.binary(max_size=120), max_size=4).map(lambda lines: b"\n".join(lines))


def read_tasks(content: bytes, folder: Path) -> None:
    path = folder / "tasks.jsonl"
    path.write_bytes(content)
    load_tasks(path)


# ------------------------------------------------------------------------------------- recordings
RECORDING_KEYS = ["prompt", "model", "response", "grade", "input_tokens", "output_tokens", "reasoning_tokens",
                  "cached_tokens", "latency_s", "cost_usd", "usage"]
recording_values = json_values | st.sampled_from([float("nan"), float("inf"), -1, 2**63, 1e12, "12", "q", "m"])


def recording_line(obj: dict[str, Any], suffix: str) -> bytes:
    return (json.dumps(obj) + suffix).encode("utf-8", errors="surrogatepass")


def csv_text(header: list[str], rows: list[list[str]], big: bool, quote: bool) -> bytes:
    lines = [",".join(header)] + [",".join(r) for r in rows]
    if big:
        lines.append(",".join(["q", "m", "x" * 140_000]))
    if quote:
        lines.append('"q,m,"a')
    return "\n".join(lines).encode("utf-8", errors="surrogatepass")


def recording_cases():
    obj = st.dictionaries(st.sampled_from(RECORDING_KEYS), recording_values, max_size=8)
    line = st.builds(recording_line, obj, st.sampled_from(["", "}", " ", ',"usage":' + nested(100_000) + "}"]))
    jsonl = st.tuples(st.just("jsonl"), st.lists(line | st.binary(max_size=80), max_size=4).map(b"\n".join))
    cell = st.text(max_size=6) | st.sampled_from(["NaN", "-1", "1e999", "", "q", "m"])
    header = st.lists(st.sampled_from(["prompt", "model", "response", "grade", "output_tokens"]), min_size=1,
                      max_size=5)
    table = st.builds(csv_text, header, st.lists(st.lists(cell, max_size=6), max_size=3), st.booleans(),
                      st.booleans())
    parquet = st.tuples(st.just("parquet"), st.lists(st.fixed_dictionaries(
        {"prompt": st.sampled_from(["q1", "q2"]), "model": st.sampled_from(["m", "n"]), "response": st.text(max_size=8),
         "output_tokens": st.integers(-2, 5)}), min_size=1, max_size=4), st.floats(0, 1))
    return st.one_of(jsonl, st.tuples(st.just("csv"), table), parquet)


def read_recording_case(case: tuple, folder: Path) -> None:
    kind = case[0]
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = folder / "r.parquet"
        pq.write_table(pa.Table.from_pylist(case[1]), path)
        data = path.read_bytes()
        path.write_bytes(data[: max(1, int(len(data) * case[2]))] if case[2] < 0.98 else data)
    else:
        path = folder / f"r.{kind}"
        path.write_bytes(case[1])
    read_recording(path)


# ---------------------------------------------------------------------------------- conversations
def _conversation(calls: list[tuple[Any, Any, Any, Any]], texts: list[Any], answer: Any) -> list[dict[str, Any]]:
    """A conversation of the OpenAI format, each part from the generator: per call its id, name, arguments
    and the id its tool message answers with; the assistant's texts; its last answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You help."}, {"role": "user", "content": "Hi"}]
    for (call_id, name, arguments, answered), text in zip(calls, texts + [None] * len(calls)):
        messages.append({"role": "assistant", "content": text,
                         "tool_calls": [{"id": call_id, "type": "function",
                                         "function": {"name": name, "arguments": arguments}}]})
        messages.append({"role": "tool", "tool_call_id": answered, "content": "ok"})
    messages.append({"role": "assistant", "content": answer})
    return messages


MARKUP = [TOOL_CALL, TOOL_CALL_END, f"{TOOL_CALL}\n{{\"name\": \"f\", \"arguments\": {{}}}}\n{TOOL_CALL_END}",
          f"x {TOOL_CALL} {{\"name\"", "<|im_end|>", "\ud800", "done ###STOP###"]
texts = st.none() | st.text(max_size=20) | st.sampled_from(MARKUP) | json_values
argument_texts = (st.sampled_from(['{"x": NaN}', '{"x": Infinity}', '{"x": ' + "9" * 5000 + "}", '{"x": "\\ud800"}',
                                   '{"x": ' + nested(3000) + "}", '{"x": "' + TOOL_CALL_END + '"}', "", "[1]", "{"])
                  | json_values.map(lambda v: json.dumps({"x": v})))
ids = st.sampled_from(["c1", "c2"]) | st.none() | json_values


def conversation_cases():
    call = st.tuples(ids, st.sampled_from(["f", "g", "", TOOL_CALL]) | json_values, argument_texts | json_values,
                     ids)
    conversation = st.builds(_conversation, st.lists(call, max_size=3), st.lists(texts, max_size=3), texts)
    mutate = st.sampled_from(["", "drop-first", "swap", "role", "deep", "task-id"])
    row = st.tuples(conversation, mutate, st.sampled_from(["t1", "t2", 3, None, ["t"]]))
    return st.lists(row, min_size=1, max_size=3)


def _conversation_line(messages: list[dict[str, Any]], mutation: str, task_id: Any) -> bytes:
    if mutation == "drop-first" and len(messages) > 2:
        messages = messages[1:]
    elif mutation == "swap" and len(messages) > 3:
        messages[2], messages[3] = messages[3], messages[2]
    elif mutation == "role":
        messages[-1] = {**messages[-1], "role": "robot"}
    if mutation == "deep":
        return ('{"task_id": "t", "messages": ' + nested(100_000) + "}").encode()
    row = {"task_id": task_id, "messages": messages} if mutation != "task-id" else {"messages": messages}
    return json.dumps(row, ensure_ascii=False).encode("utf-8", errors="surrogatepass")


def read_conversations_case(case: list, folder: Path) -> None:
    """read_openai_jsonl, then each trajectory written back out; a documented error must be one line and
    name a place (the file and line)."""
    path = folder / "c.jsonl"
    path.write_bytes(b"\n".join(_conversation_line(*row) for row in case))
    try:
        for traj in read_openai_jsonl(path):
            json.dumps(to_openai_messages(traj), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ConversationError as e:
        if "\n" in str(e) or not str(e).startswith(f"{path}:"):
            raise AssertionError(f"not a one-line error naming the file and line: {e!s:.300}") from None
        raise


# ------------------------------------------------------------------------------------- run configs
class Raw(str):
    """YAML written as it is (`.inf`, `1e400`, an anchor), not quoted."""


def run_yaml(value: Any) -> str:
    """Flow-style YAML of a plain value, with Raw pieces spliced in unquoted."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {run_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(run_yaml(v) for v in value) + "]"
    return yaml_of(value)


MARKER_NAME = "code-ran"  # a hook or env target that runs would create this file in the case's folder
ODD_NUMBERS = [Raw(x) for x in (".inf", "-.inf", ".nan", ".NaN", "1e400", "-1e400", "true", "false", "null", "0x10",
                                "1_000", "0o17", "2e-400", "9" * 400, "~", "[]", "{}", "!!binary aGk=", "!!float 1",
                                "!!float", "!!int abc", "!!bool maybe", "!!timestamp 2020-13-45")]
# in range for most fields half the time, so that a good share of the cases are valid configs
numbers = (st.integers(1, 40) | st.floats(0.01, 0.9) | st.sampled_from(ODD_NUMBERS)
           | st.integers(-5, 2**70) | st.floats())
run_values = numbers | json_values
targets = st.sampled_from(["subprocess:run", "os:system", "builtins:eval", "builtins:exec", "shutil:rmtree",
                           "orchlib.experiments.variants:VariantConfig", "orchlib.train.plugin:importlib.import_module",
                           "nosuch_module:make", "os.path:join.x", "a..b:c", ":", "x:", ":y", "", "subprocess run",
                           "os:system; rm -rf /", "__import__('os')", "orchestra-mini", "shop", "\ud800:x"])


def hook_entry(target: str, args: Any, extra: dict[str, Any]) -> Any:
    """A `hooks:` / `env:` entry whose target would create the marker if it were run."""
    touch = {"args": ["touch", MARKER_NAME]} if target == "subprocess:run" else {"command": f"touch {MARKER_NAME}"}
    return {"from": target, "with": {**touch, "more": args}, **extra}


hook_entries = (st.builds(hook_entry, targets, run_values, st.dictionaries(st.sampled_from(["x", "with", "name"]),
                                                                           run_values, max_size=1))
                | targets | run_values)
SFT_KEYS = ["epochs", "learning_rate", "warmup_fraction", "batch_size", "max_steps", "seed", "schedule", "lr"]
ROLLOUT_KEYS = ["max_turns", "max_new_tokens", "temperature", "top_p", "tool_timeout_s", "tool_schema",
                "max_total_tokens", "policy_price_in", "bogus"]
GRPO_KEYS = ["learning_rate", "tasks_per_step", "group_size", "kl_coef", "clip_low", "clip_high", "min_reward_spread",
             "max_grad_norm", "decay_steps", "warmup_steps", "engine", "mixed_precision", "lr"]


def section(keys: list[str], inner: Any = None) -> Any:
    entries = st.dictionaries(st.sampled_from(keys), run_values, max_size=4)
    if inner is not None:
        entries = st.builds(lambda d, r: {**d, **r}, entries, inner)
    return entries | run_values


WORLDS = ["orchestra-mini", "orchestra-choice", "orchestra-read", "shop", "airline", "toy"]
ENV_KEYS = ["name", "tasks", "test_tasks", "factory", "seed", "n_train", "n_test", "options", "cards", "reward",
            "suite", "from", "with"]
files = st.sampled_from(["my.jsonl", "cards/", "rewards/outcome.yaml", "", "\ud800", "../../etc/passwd"]) \
    | st.text(max_size=10)
options = st.dictionaries(st.sampled_from(["categories", "profiles", "golden", "toolcards", "hard", "seed", "x"]),
                          run_values, max_size=2)
# `env:` entries: a world by name (a shipped one or not, with options its maker takes or not), task files,
# a factory (code: read as a string, never run), any mix of the three, and what is no entry at all
env_entries = (
    st.sampled_from(WORLDS + ["nope", "", "Shop"])
    | st.fixed_dictionaries({"name": st.sampled_from(WORLDS + ["nope"]) | run_values}, optional={
        "seed": numbers, "n_train": numbers, "n_test": numbers, "options": options | run_values,
        "cards": files | st.lists(files, max_size=2) | run_values, "reward": files | run_values})
    | st.fixed_dictionaries({"tasks": files | run_values}, optional={
        "test_tasks": files | run_values, "cards": files | st.lists(files, max_size=2), "reward": files,
        "n_train": numbers, "options": options})
    | st.fixed_dictionaries({"factory": targets | run_values}, optional={"seed": numbers, "n_test": numbers,
                                                                          "options": options})
    | st.dictionaries(st.sampled_from(ENV_KEYS), run_values | targets | files, max_size=4)
    | hook_entries)
RUN_FIELDS = {
    "policy": st.sampled_from(["tiny", "small", "../../etc", ""]) | run_values,
    "steps": numbers, "save_every": numbers, "out": st.text(max_size=10) | run_values,
    "warm_start": section(SFT_KEYS),
    "grpo": section(GRPO_KEYS, st.dictionaries(st.just("rollout"), section(ROLLOUT_KEYS), max_size=1)
                    | st.dictionaries(st.just("lora"), section(["r", "alpha", "dropout", "rank"]), max_size=1)),
    "evaluation": section(["samples", "baselines", "profiles", "x"]),
    "hooks": hook_entries, "env": env_entries, "bogus": run_values,
    # fields of older configs, which the `env:` entry holds now: unknown fields
    "suite": st.sampled_from(["orchestra-mini", "nope"]) | run_values, "suite_seed": numbers,
    "tasks": st.text(max_size=10) | run_values, "reward": st.text(max_size=10) | run_values,
}
RUN_EXTRAS = ["", "x: " + nested(70) + "\n", "grpo: " + "{a: " * 70 + "1" + "}" * 70 + "\n", "steps: 1\nsteps: 2\n",
              "hooks: !!python/object/apply:os.system [touch code-ran]\n", "&a steps: 1\n", "--- a\n--- b\n",
              "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 8)), "\t- tab\n"]


def run_config_text(fields: dict[str, Any], extra: str, cut: float | None) -> str:
    text = "".join(f"{k}: {run_yaml(v)}\n" for k, v in fields.items()) + extra
    return text[: int(len(text) * cut)] if cut is not None else text


# a valid config to mutate one field of: run code it must not (subprocess:run) with the right shape included
GOOD_FIELDS = {
    "policy": st.just("tiny"), "steps": st.integers(0, 50), "save_every": st.integers(1, 20),
    "env": st.sampled_from(WORLDS)
    | st.fixed_dictionaries({"name": st.sampled_from(WORLDS)}, optional={
        "seed": st.integers(0, 9), "reward": st.sampled_from(["rewards/outcome.yaml", "rewards/toolorchestra.yaml"])})
    | st.fixed_dictionaries({"name": st.sampled_from(["orchestra-choice", "orchestra-read", "shop", "toy"]),
                             "n_train": st.integers(1, 40)}, optional={"n_test": st.integers(0, 20)})
    | st.fixed_dictionaries({"tasks": st.just("my.jsonl")}, optional={
        "test_tasks": st.just("my_test.jsonl"), "cards": st.sampled_from(["cards/", ["cards/a.yaml"]])})
    | st.just({"factory": "subprocess:run", "options": {"args": ["touch", MARKER_NAME]}}),
    "out": st.sampled_from(["runs/x", "out"]),
    "warm_start": st.none() | st.fixed_dictionaries({}, optional={"epochs": st.integers(1, 5),
                                                                  "learning_rate": st.floats(1e-5, 1e-2)}),
    "grpo": st.fixed_dictionaries({}, optional={
        "learning_rate": st.floats(1e-6, 1e-2), "group_size": st.integers(2, 8), "kl_coef": st.floats(0, 1),
        "rollout": st.fixed_dictionaries({}, optional={"temperature": st.floats(0, 2),
                                                       "max_turns": st.integers(1, 4)})}),
    "hooks": st.sampled_from([{"from": "orchlib.experiments.variants:VariantConfig",
                               "with": {"paired_profiles": ["accuracy", "thrifty"]}},
                              {"from": "subprocess:run", "with": {"args": ["touch", MARKER_NAME]}},
                              {"from": "os:system", "with": {"command": f"touch {MARKER_NAME}"}}]),
}
one_bad_field = st.sampled_from(sorted(RUN_FIELDS)).flatmap(lambda k: RUN_FIELDS[k].map(lambda v: {k: v}))


def run_config_cases():
    anything = st.fixed_dictionaries({}, optional=RUN_FIELDS)
    one_wrong = st.builds(lambda good, bad: {**good, **bad}, st.fixed_dictionaries({}, optional=GOOD_FIELDS),
                          st.just({}) | one_bad_field)
    return st.builds(run_config_text, anything | one_wrong, st.just("") | st.sampled_from(RUN_EXTRAS),
                     st.none() | st.none() | st.floats(0, 1))


def read_run_config(text: str, folder: Path) -> None:
    import math

    from pydantic import BaseModel

    path = folder / "run.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    marker = Path.cwd() / MARKER_NAME
    try:
        cfg = load_config(path, RunConfig)
    except ConfigFileError as e:
        if "\n" in str(e):
            raise AssertionError(f"an error of {len(str(e).splitlines())} lines: {e!s:.200}") from None
        raise
    finally:
        if marker.exists():
            marker.unlink()
            raise AssertionError("reading the config ran code (the marker file was created)")
    stack: list[Any] = [cfg]
    while stack:  # the config that came out holds finite numbers only, and no true/false for one
        obj = stack.pop()
        if isinstance(obj, BaseModel):
            for name, info in type(obj).model_fields.items():
                value = getattr(obj, name)
                if isinstance(value, bool) and info.annotation in (int, float, int | None, float | None):
                    raise AssertionError(f"{name}: a true/false read as a number")
                stack.append(value)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, float) and not math.isfinite(obj):
            raise AssertionError(f"a non-finite number in a valid config: {obj}")


# ---------------------------------------------------------------------------------------- running
@dataclass
class Row:
    reader: str
    cases: int = 0
    valid: int = 0
    documented: int = 0
    other: int = 0
    max_s: float = 0.0
    slowest: str = ""
    examples: list[str] = field(default_factory=list)


READERS: dict[str, tuple[Any, Callable[..., None], tuple[type[BaseException], ...]]] = {
    "chat-bytes": (chat_bytes_cases, lambda case, folder: chat_bytes(*case), (ToolCallParseError,)),
    "chat-json": (chat_json_cases, lambda case, folder: chat_json(*case), (ToolCallParseError,)),
    "cards": (card_cases(), read_card, (CardError,)),
    "rewards": (reward_cases(), read_reward, (RewardFileError, RewardSyntaxError)),
    "tasks": (task_cases(), read_tasks, (TaskFileError,)),
    "recordings": (recording_cases(), read_recording_case, (RecordingError,)),
    "conversations": (conversation_cases(), read_conversations_case, (ConversationError,)),
    "run-configs": (run_config_cases(), read_run_config, (ConfigFileError,)),
}


def warm_up() -> None:
    """Read one valid card and reward file first: the first card imports jsonschema (seconds, once per
    process), which would otherwise be charged to whichever fuzz case came first."""
    from orchlib.shipped import shipped_path

    load_card(shipped_path("toolcards/calculator.yaml"))
    Reward.load(shipped_path("rewards/toolorchestra.yaml"))


def fuzz(reader: str, cases: int, seed: int = 0) -> Row:
    """Run `cases` generated inputs through one reader; count outcomes instead of failing on them."""
    strategy, read, documented = READERS[reader]
    row = Row(reader)
    warm_up()
    with tempfile.TemporaryDirectory(prefix="orchlib-fuzz-") as tmp:
        folder = Path(tmp)

        @settings(max_examples=cases, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck), derandomize=seed == 0)
        @given(strategy)
        def one(case: Any) -> None:
            row.cases += 1
            t0 = time.perf_counter()
            try:
                read(case, folder)
                row.valid += 1
            except documented:
                row.documented += 1
            except Exception as e:  # counted and shown: this is what the benchmark looks for
                row.other += 1
                if len(row.examples) < 5:
                    row.examples.append(f"{type(e).__name__}: {e!s:.200} <- {case!r:.200}\n"
                                        + "".join(traceback.format_tb(e.__traceback__)[-2:]))
            finally:
                if time.perf_counter() - t0 > row.max_s:
                    row.max_s, row.slowest = time.perf_counter() - t0, f"{case!r:.300}"

        (hypothesis_seed(seed)(one) if seed else one)()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0, help="0: hypothesis's derandomized run; else a seed")
    parser.add_argument("--readers", default=",".join(READERS))
    args = parser.parse_args(argv)
    print(f"{'reader':<12} {'cases':>7} {'valid':>7} {'documented errors':>18} {'other exceptions':>17} "
          f"{'max seconds':>12}")
    failed = False
    for reader in args.readers.split(","):
        t0 = time.perf_counter()
        row = fuzz(reader, args.cases, args.seed)
        print(f"{row.reader:<12} {row.cases:>7,} {row.valid:>7,} {row.documented:>18,} {row.other:>17,} "
              f"{row.max_s:>12.3f}"
              f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
        for example in row.examples:
            print("    " + example.replace("\n", "\n    "))
        if row.max_s > HANG_S:
            print(f"    slowest: {row.slowest}")
        failed |= row.other > 0 or row.max_s > HANG_S
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
