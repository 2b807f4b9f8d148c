"""The base of every run setting (SFTConfig, GRPOConfig, RolloutConfig, RunConfig, ...): a number is a
finite number, and a yes/no is not a number.

A config file is read from outside. `learning_rate: .inf` (or `1e400`, which YAML reads as infinity)
would train to NaN weights and report success; `steps: true` would be read as 1. pydantic's lax mode
accepts both, so every setting refuses them: `allow_inf_nan=False` for floats, and a check that a
`true`/`false` never stands where a field (or the items of a list or mapping field) wants an int or a
float. The error is pydantic's, so `configfile.load_config` names the file, line and field.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

__all__ = ["Settings", "UntrustedCodeError"]


class UntrustedCodeError(ValueError):
    """A config names code to run (`hooks:`, `env: {factory: ...}`) and the user did not opt in to running
    it (`orchlib train --trust-code`, `run_training(..., trust_code=True)`); one line naming the field."""


class Settings(BaseModel):
    """A frozen config whose numbers are finite and whose ints and floats are never booleans."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _bool_where_number(field.annotation, value):
            got = str(value).lower() if isinstance(value, bool) else f"a true/false in {value!r}"
            raise ValueError(f"expected a number, got {got}")
        return value


def _bool_where_number(annotation: Any, value: Any) -> bool:
    """Whether `value` holds a bool where `annotation` wants an int or float (and would take no bool)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _bool_where_number(args[0], value)
    if origin is Union or origin is types.UnionType:
        if isinstance(value, bool):
            return any(a in (int, float) for a in args) and bool not in args and Any not in args
        return any(_bool_where_number(a, value) for a in args)
    if isinstance(value, bool):
        return annotation in (int, float)
    if origin in (list, tuple, set, frozenset) and isinstance(value, (list, tuple)) and args:
        if origin is tuple and Ellipsis not in args:  # tuple[int, str]: each item has its own type
            return any(_bool_where_number(a, v) for a, v in zip(args, value))
        return any(_bool_where_number(args[0], v) for v in value)
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return any(_bool_where_number(args[1], v) for v in value.values())
    return False
