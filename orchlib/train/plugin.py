"""Hooks named in a run's config file, `hooks: {from: "package.module:factory", with: {...}}`: imported by
name, so the paper's training path imports nothing of what plugs into it."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchlib.train.hooks import Hooks

__all__ = ["HooksPlugin"]


class HooksPlugin(BaseModel):
    """Training hooks from outside the paper's path: the factory `from` names, called with `with` as keyword
    arguments, returns a `Hooks` or an object whose `.hooks()` does (a config such as
    `orchlib.experiments.variants:VariantConfig`). Reading the file calls it once, so a wrong name or option
    is an error that names its line before training starts; `build()` calls it again for the run."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    factory: str = Field(alias="from", description="import path 'package.module:factory' (or "
                         "'package.module:Class.method') of what builds the hooks")
    options: dict[str, Any] = Field(default_factory=dict, alias="with", description="keyword arguments the "
                                    "factory is called with")

    @field_validator("factory")
    @classmethod
    def _importable(cls, path: str) -> str:
        _import(path)
        return path

    @model_validator(mode="after")
    def _builds_hooks(self) -> HooksPlugin:
        self.build()
        return self

    def build(self) -> Hooks:
        """The factory called with the options; a result with `.hooks()` is asked for its hooks."""
        try:
            made = _import(self.factory)(**self.options)
        except ValidationError as e:  # a config factory: name the option, in one line
            err = e.errors()[0]
            where = "".join(f"{part}: " for part in err["loc"])
            raise ValueError(f"with: {where}{err['msg'].removeprefix('Value error, ')}") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"{self.factory}(**with) failed: {_first_line(e)}") from None
        hooks = made.hooks() if not isinstance(made, Hooks) and callable(getattr(made, "hooks", None)) else made
        if not isinstance(hooks, Hooks):
            raise ValueError(f"{self.factory} returned {type(hooks).__name__}, not Hooks (nor an object whose "
                             ".hooks() returns Hooks)")
        return hooks


def _import(path: str) -> Callable[..., Any]:
    """`package.module:attr.attr` -> the object, or a ValueError of one line saying what is missing."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"expected 'package.module:factory', got {path!r}")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"cannot import {module}: {_first_line(e)}") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module} has no attribute {name}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{path} is {type(obj).__name__}, not callable")
    return obj


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
