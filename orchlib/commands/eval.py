"""`orchlib eval`: run policies (and the baselines) over a task set; print one table, save the numbers.

Policies are a local one (`--policy`: a trained checkpoint, a model folder or a hub id) and any number
of prompted ones served over an OpenAI-compatible API (`--policy-endpoint URL --model NAME`, or several
in a `--config` file), so one table compares a trained orchestrator with GPT-5, Claude or a model
behind vLLM on the same tasks, tools, preferences and reward. Tasks with `checker: judge` are graded
by the judge given with `--judge-endpoint`/`--judge-model` (or `judge:` in the file); its cost is
printed apart from the policies'.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchlib.cards import Price
from orchlib.configurations import ConfigurationSpace
from orchlib.engines.openai import APIPolicyConfig
from orchlib.judge import JudgeConfig


class PolicySpec(BaseModel):
    """One row of the table: a local policy (`local`) or one served over an API (`api`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(description="the row's label and the folder its report is saved in")
    local: str | None = Field(None, description="'tiny'/'small', a model folder, a hub id or a checkpoint folder")
    api: APIPolicyConfig | None = Field(None, description="an OpenAI-compatible endpoint (see APIPolicyConfig)")

    @model_validator(mode="after")
    def _one_kind(self) -> PolicySpec:
        if (self.local is None) == (self.api is None):
            raise ValueError("give exactly one of local or api")
        return self


class EvalFileConfig(BaseModel):
    """`orchlib eval --config FILE`: the command's settings as YAML (the flags are then not used)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policies: list[PolicySpec] = Field(min_length=1, description="rows of the table, in order")
    env: str | None = Field(None, description="a shipped environment by name (`orchlib.envs.ENVIRONMENTS`): its "
                                              "test tasks and tools; `tasks`/`cards` are then unused")
    tasks: str | None = Field(None, description="tasks JSONL; default the orchestra-mini test split")
    suite_seed: int = Field(0, description="which draw of the default suite, when `tasks` is not given")
    cards: str = Field("toolcards", description="folder of tool cards (default: the shipped ones)")
    reward: str = Field("rewards/toolorchestra.yaml", description="reward file scoring every policy alike")
    baselines: bool = Field(False, description="also the four fixed-routing baselines")
    tool_schema: Literal["full", "compact", "brief"] | None = Field(
        None, description="how tools are listed to local policies (None: 'full'; orchestra-read is "
                    "meant to be read with 'brief')")
    judge: JudgeConfig | None = Field(None, description="grades the tasks whose checker is 'judge'")
    out: str = Field("out/eval", description="folder for the table, metrics and trajectories")
    configurations: ConfigurationSpace | None = Field(None, description="per-episode tool configurations "
                                                      "(docs/configurations.md): the training space, against which "
                                                      "`test_configurations` declares what is held out")
    test_configurations: ConfigurationSpace | None = Field(None, description="those the evaluated (test) tasks "
                                                           "draw; empty: `configurations`")

    @model_validator(mode="after")
    def _one_task_source(self) -> EvalFileConfig:
        if self.env is not None and self.tasks is not None:
            raise ValueError("give env or tasks, not both: an environment brings its own test tasks")
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> EvalFileConfig:
        names = [p.name for p in self.policies]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"policy names must be unique: {', '.join(twice)} used twice")
        return self


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate policies (local and API) and the baselines on tasks",
                       description="Runs each policy on every task (default: the orchestra-mini test split) "
                                   "and, with --baselines, always-strongest, always-cheapest, random and the "
                                   "oracle. Writes metrics.json, table.txt and trajectories.jsonl per policy. "
                                   "Example with an API model: orchlib eval --policy-endpoint "
                                   "https://api.openai.com/v1 --model gpt-5 --api-key-env OPENAI_API_KEY")
    p.add_argument("--config", default=None, help="YAML file with the settings below and several policies "
                                                  "(examples/eval_api.yaml); the other flags are then not used")
    p.add_argument("--policy", default="tiny",
                   help="'tiny'/'small', a model folder, a Hugging Face id, a training checkpoint folder, "
                        "or 'none' for API policies only")
    p.add_argument("--policy-endpoint", default=None, metavar="URL",
                   help="an OpenAI-compatible endpoint serving a policy to compare (e.g. http://127.0.0.1:8000/v1)")
    p.add_argument("--model", default=None, help="the model name at --policy-endpoint")
    p.add_argument("--api-key-env", default=None, help="environment variable holding its API key")
    p.add_argument("--price-in", type=float, default=0.0, help="its USD per million input tokens")
    p.add_argument("--price-out", type=float, default=0.0, help="its USD per million output tokens")
    p.add_argument("--tool-calling", choices=["native", "text"], default="native",
                   help="native: the API's function calling; text: <tool_call> text for servers without it")
    p.add_argument("--max-in-flight", type=int, default=64, help="its episodes running at once")
    p.add_argument("--judge-endpoint", default=None, metavar="URL", help="an OpenAI-compatible endpoint "
                                                                       "for the judge of checker 'judge'")
    p.add_argument("--judge-model", default=None, help="the judge's model name")
    p.add_argument("--judge-api-key-env", default=None, help="environment variable holding the judge's key")
    p.add_argument("--env", default=None, help="a shipped environment by name (orchestra-mini, orchestra-choice, "
                                               "shop, airline, toy): its test tasks, tools and prompt settings")
    p.add_argument("--tasks", default=None, help="tasks JSONL (default: orchestra-mini test split)")
    p.add_argument("--suite-seed", type=int, default=0)
    p.add_argument("--cards", default="toolcards", help="folder of tool cards")
    p.add_argument("--reward", default="rewards/toolorchestra.yaml")
    p.add_argument("--baselines", action="store_true", help="also run the four baselines")
    p.add_argument("--tool-schema", choices=["full", "compact", "brief"], default="full",
                   help="how tools are listed to the policy (use what it was trained with)")
    p.add_argument("--out", default="out/eval")
    p.set_defaults(handler=run)


def settings(args: argparse.Namespace) -> EvalFileConfig:
    """The flags (or the --config file) as one validated settings object; bad input is a UsageError."""
    from orchlib.cli import UsageError
    from orchlib.configfile import ConfigFileError, load_config

    if args.config:
        try:
            return load_config(args.config, EvalFileConfig)
        except ConfigFileError as e:
            raise UsageError(str(e)) from None
    if (args.policy_endpoint is None) != (args.model is None):
        raise UsageError("--policy-endpoint and --model go together")
    if (args.judge_endpoint is None) != (args.judge_model is None):
        raise UsageError("--judge-endpoint and --judge-model go together")
    if args.policy == "none" and not args.policy_endpoint:
        raise UsageError("--policy none: no policy left to evaluate; add --policy-endpoint URL --model NAME, or "
                         "give --policy a model ('tiny', a folder, a checkpoint or a hub id)")
    policies = [PolicySpec(name="policy", local=args.policy)] if args.policy != "none" else []
    if args.policy_endpoint:
        api = _from_flags(lambda: APIPolicyConfig(
            base_url=args.policy_endpoint, model=args.model, api_key_env=args.api_key_env,
            price=Price(per_m_input=args.price_in, per_m_output=args.price_out), tool_calling=args.tool_calling,
            max_in_flight=args.max_in_flight), {"base_url": "--policy-endpoint", "model": "--model",
                                                "max_in_flight": "--max-in-flight", "per_m_input": "--price-in",
                                                "per_m_output": "--price-out"})
        policies.append(_from_flags(lambda: PolicySpec(name=args.model, api=api), {"name": "--model"}))
    judge = _from_flags(lambda: JudgeConfig(base_url=args.judge_endpoint, model=args.judge_model,
                                            api_key_env=args.judge_api_key_env),
                        {"base_url": "--judge-endpoint", "model": "--judge-model"}) if args.judge_endpoint else None
    return _from_flags(lambda: EvalFileConfig(policies=policies, env=args.env, tasks=args.tasks,
                                              suite_seed=args.suite_seed,
                                              cards=args.cards, reward=args.reward, baselines=args.baselines,
                                              tool_schema=args.tool_schema, judge=judge, out=args.out),
                       {"policies": "--policy", "out": "--out", "tasks": "--tasks", "cards": "--cards", "env": "--env"})


def _from_flags(build: Any, flags: dict[str, str]) -> Any:
    """`build()`, with a pydantic error turned into one line naming the flag that gave the field."""
    from pydantic import ValidationError

    from orchlib.cli import UsageError

    try:
        return build()
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        where = flags.get(field) or (f"--{field.replace('_', '-')}" if field else "")
        msg = err["msg"].removeprefix("Value error, ")
        raise UsageError(f"{where}: {msg}" if where else msg) from None


def run(args: argparse.Namespace) -> int:
    from orchlib.cli import UsageError
    from orchlib.commands._output import writable_folder
    from orchlib.evaluate import EVAL_ROLLOUT, compare, evaluate, reward_across
    from orchlib.models import PolicyLoadError
    from orchlib.reward import RewardFileError
    from orchlib.tasks import TaskFileError
    from orchlib.tools import CardError

    cfg = settings(args)
    writable_folder(cfg.out, "--out")  # before loading policies and minutes of rollouts, not at the first save
    try:
        env = _configured(_environment(cfg), cfg, args.config)
        policies = {p.name: _policy(p) for p in cfg.policies}
        judge = _judge(cfg.judge, cfg.out)  # reads its cache file: a corrupt one is bad input, named here
    except (TaskFileError, CardError, RewardFileError, PolicyLoadError, FileNotFoundError, ValueError) as e:
        raise UsageError(_one_line(e)) from None
    config = EVAL_ROLLOUT.model_copy(update={"tool_schema": cfg.tool_schema} if cfg.tool_schema else {})
    tasks, toolbox, reward = env.test, env.tools, env.reward
    with _judging(judge):
        reports = {name: evaluate(engine, env, config=config, name=name) for name, engine in policies.items()}
        if cfg.baselines:
            from orchlib.baselines import make_baselines

            tok = next((e.tokenizer for e in policies.values() if hasattr(e, "tokenizer")), None)
            if tok is None:  # API policies only: the baselines write their calls with the tiny tokenizer
                from orchlib.models import build_default_policy

                tok = build_default_policy("tiny")[1]
            engines = make_baselines(tasks, toolbox, tok, config=config)
            reports.update({n: evaluate(e, env, config=config, name=n) for n, e in engines.items()})
    out = Path(cfg.out)
    for name, report in reports.items():
        report.save(out / name)
    print(compare(reports, extra={"reward*": reward_across(reports, reward)}))
    print(f"\n* ToolOrchestra-style reward grouped across the policies per task. Saved under {out}/")
    if judge is not None:
        judge.save_cache()
        print(f"judge {judge.name}: {judge.stats} — not in the policies' cost. Cache: {judge.config.cache}")
        if judge.errors:
            print(f"  {len(judge.errors)} grades failed and were scored 0, e.g.: {judge.errors[0]['error']}")
    return 0


def _environment(cfg: EvalFileConfig):
    """The Environment the settings name: a shipped one by name (its reward replaced by `cfg.reward`), or
    the tasks file (default: orchestra-mini's test split) with the cards and reward given."""
    from orchlib.env import Environment
    from orchlib.reward import Reward
    from orchlib.tasks import load_tasks
    from orchlib.tools import Toolbox

    reward = Reward.load(cfg.reward)
    if cfg.env:
        from orchlib.envs import make_environment

        return make_environment(cfg.env, seed=cfg.suite_seed, reward=reward)
    if cfg.tasks:
        tasks = load_tasks(cfg.tasks)
    else:
        from orchlib.envs import make_suite

        tasks = make_suite(cfg.suite_seed).test
    return Environment(train=[], test=tasks, tools=Toolbox.load(cfg.cards), reward=reward,
                       name=Path(cfg.tasks).stem if cfg.tasks else "orchestra-mini")


def _configured(env: Any, cfg: EvalFileConfig, path: str | None) -> Any:
    """`env` with the file's configuration spaces; one that does not fit its tools is `FILE:LINE: field`."""
    from orchlib.configfile import located
    from orchlib.configurations import ConfigurationError

    spaces = {k: getattr(cfg, k) for k in ("configurations", "test_configurations") if getattr(cfg, k) is not None}
    try:
        return env.replace(**spaces) if spaces else env
    except ConfigurationError as e:
        raise ValueError(str(located(path, e.loc, e.problem)) if path else str(e)) from None


def _one_line(e: Exception) -> str:
    """A pydantic error (several lines) as `field: problem`; any other error as its message."""
    errors = getattr(e, "errors", None)
    if callable(errors) and errors():
        err = errors()[0]
        return f"{'.'.join(map(str, err['loc']))}: {err['msg'].removeprefix('Value error, ')}"
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _policy(spec: PolicySpec) -> Any:
    """The engine of one row: a TransformersEngine over the local model, or an OpenAIPolicy."""
    if spec.api is not None:
        from orchlib.engines.openai import OpenAIPolicy

        return OpenAIPolicy(spec.api.model_copy(update={"name": spec.api.name or spec.name}))
    from orchlib.engines import TransformersEngine
    from orchlib.models import build_default_policy, load_policy

    policy = Path(spec.local)
    if (policy / "policy").is_dir():  # a training checkpoint
        policy = policy / "policy"
    model, tok = (build_default_policy(spec.local) if spec.local in ("tiny", "small")
                  else load_policy(policy if policy.exists() else spec.local))
    return TransformersEngine(model, tok)


def _judge(config: JudgeConfig | None, out: str) -> Any:
    """The judge of checker 'judge' for the run, its grades cached beside the results by default."""
    if config is None:
        return None
    from orchlib.judge import Judge

    if config.cache is None:
        config = config.model_copy(update={"cache": str(Path(out) / "judge_cache.json")})
    return Judge(config)


@contextlib.contextmanager
def _judging(judge: Any) -> Iterator[None]:
    """`judge` grades checker 'judge' while the policies run."""
    if judge is None:
        yield
        return
    from orchlib.judge import use_judge

    with use_judge(judge):
        yield
