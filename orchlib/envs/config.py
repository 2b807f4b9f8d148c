"""`EnvConfig`: the one entry of a run config that names its world (`env:` in `orchlib train --config`).

A world is said one of three ways:

    env: shop                                   # a world of orchlib.envs.ENVIRONMENTS, with its defaults
    env: {name: orchestra-choice, seed: 0, n_train: 40, n_test: 20, reward: rewards/outcome.yaml}
    env: {tasks: my_tasks.jsonl, test_tasks: my_test.jsonl, cards: mycards/, reward: rewards/outcome.yaml}
    env: {factory: "mypkg.worlds:make", seed: 0, options: {hard: true}}   # code of one's own: --trust-code

Checking a config runs nothing: a shipped world's name and options are checked against its maker's
signature, files are only named, and a `factory` stays a string until the run starts, where it is imported
and called only with `trust_code=True` (`orchlib train --trust-code`), as a model's own code is only run
with `trust_remote_code`. A factory is called as the shipped makers are, `factory(seed=..., reward=...,
**options)`, and must return an `orchlib.Environment`.
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import Field, field_validator, model_validator

from orchlib.env import Environment
from orchlib.settings import Settings, UntrustedCodeError

__all__ = ["EnvConfig", "EnvConfigError"]

DEFAULT_REWARD = "rewards/toolorchestra.yaml"


class EnvConfigError(ValueError):
    """The world an `env:` entry names cannot be made (one line, naming the field)."""


class EnvConfig(Settings):
    """The run's world: a shipped one by `name`, task files of one's own (`tasks`), or a `factory` of one's
    own — exactly one of the three. A bare string is a name, or a factory when it holds a ':'."""

    name: str | None = Field(None, description="a world of orchlib.envs.ENVIRONMENTS (orchestra-mini, "
                                               "orchestra-choice, orchestra-read, shop, airline, toy); "
                                               "orchestra-mini when neither `tasks` nor `factory` is given")
    tasks: str | None = Field(None, description="train tasks JSONL of one's own (orchlib.tasks.save_tasks "
                                                "writes it), instead of a named world")
    test_tasks: str | None = Field(None, description="test tasks JSONL beside `tasks` (what `evaluation:` "
                                                     "runs on); empty: no test split")
    factory: str | None = Field(None, description="'package.module:function' returning an orchlib.Environment, "
                                                  "called as factory(seed=, reward=, **options); imported only "
                                                  "when the run starts, and only with --trust-code")
    seed: int = Field(0, description="the world's draw (its questions, its database); the same seed gives the "
                                     "same splits")
    n_train: int | None = Field(None, ge=1, description="train tasks of a named world or factory (None: its "
                                                        "default)")
    n_test: int | None = Field(None, ge=0, description="test tasks of a named world or factory (None: its "
                                                       "default)")
    options: dict[str, Any] = Field(default_factory=dict, description="other keyword arguments of the world's "
                                    "maker, e.g. {categories: [arithmetic, gsm8k]} for orchestra-mini")
    cards: str | list[str] | None = Field(None, description="folder, file or list of files of tool cards; empty: "
                                          "the world's own (with `tasks`: the shipped toolcards)")
    reward: str = Field(DEFAULT_REWARD, description="reward file in the reward DSL (the paper's by default)")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):  # `env: shop`, or `env: "pkg.mod:make"`
            return {"factory": value} if ":" in value else {"name": value}
        return value

    @field_validator("name")
    @classmethod
    def _shipped(cls, name: str | None) -> str | None:
        from orchlib.envs import ENVIRONMENTS

        if name is not None and name not in ENVIRONMENTS:
            raise ValueError(f"{name!r} is not one of {sorted(ENVIRONMENTS)}")
        return name

    @model_validator(mode="after")
    def _one_world(self) -> EnvConfig:
        given = [k for k in ("name", "tasks", "factory") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of name, tasks and factory, not {' and '.join(given)}")
        if self.test_tasks is not None and self.tasks is None:
            raise ValueError("test_tasks goes with tasks (a named world has its own test split)")
        if self.tasks is not None:
            sized = [k for k in ("n_train", "n_test") if getattr(self, k) is not None] + (["options"] if self.options
                                                                                         else [])
            if sized:
                raise ValueError(f"{', '.join(sized)}: for a named world or a factory; a tasks file is used whole")
        if self.factory is not None:
            module, _, attr = self.factory.partition(":")
            if not module or not attr:
                raise ValueError(f"factory: {self.factory!r} is not 'package.module:function'")
        if self.tasks is None and self.factory is None:
            self._check_named()
        return self

    @property
    def world(self) -> str:
        """The shipped world's name (orchestra-mini when none is given), or None for tasks and factories."""
        return None if self.tasks is not None or self.factory is not None else (self.name or "orchestra-mini")

    def maker_options(self) -> dict[str, Any]:
        """The keyword arguments a maker gets besides seed and reward."""
        sizes = {k: v for k, v in (("n_train", self.n_train), ("n_test", self.n_test)) if v is not None}
        return {**self.options, **sizes}

    def _check_named(self) -> None:
        from orchlib.envs import ENVIRONMENTS

        name = self.world
        params = inspect.signature(ENVIRONMENTS[name]).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return  # the maker passes its options on (to make_suite, ...): checked when it is called
        known = [n for n in params if n not in ("seed", "reward")]
        for key in self.maker_options():
            if key not in known:
                raise ValueError(f"{key}: world {name!r} takes no such option (its options: "
                                 f"{', '.join(known) or 'none'})")

    def environment(self, trust_code: bool = False) -> Environment:
        """The Environment this entry names, its reward loaded. A factory is imported and called only with
        `trust_code` (UntrustedCodeError otherwise)."""
        from orchlib.reward import Reward

        reward = Reward.load(self.reward)
        if self.tasks is not None:
            from orchlib.tasks import load_tasks

            test = load_tasks(self.test_tasks) if self.test_tasks else []
            return Environment(name=self.tasks, train=load_tasks(self.tasks), test=test,
                               tools=self.cards or "toolcards", reward=reward)
        if self.factory is not None:
            env = self._call_factory(trust_code, reward)
        else:
            from orchlib.envs import make_environment

            try:
                env = make_environment(self.world, seed=self.seed, reward=reward, **self.maker_options())
            except TypeError as e:  # an option the maker's own maker (make_suite, ...) does not take
                raise EnvConfigError(f"env: world {self.world!r}: {e}") from None
        return env.replace(tools=self.cards) if self.cards else env

    def _call_factory(self, trust_code: bool, reward) -> Environment:
        if not trust_code:
            raise UntrustedCodeError(f"env.factory: {self.factory!r} is code of one's own; run it only if you trust "
                                     f"it, with `orchlib train --trust-code` (run_training(..., trust_code=True))")
        import importlib

        module, _, attr = self.factory.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise EnvConfigError(f"env.factory: cannot import {self.factory!r} ({type(e).__name__}: {e})") from None
        env = obj(seed=self.seed, reward=reward, **self.maker_options())
        if not isinstance(env, Environment):
            raise EnvConfigError(f"env.factory: {self.factory!r} returned a {type(env).__name__}, not an "
                             f"orchlib.Environment")
        return env
