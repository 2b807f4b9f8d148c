"""Load a YAML file into a frozen pydantic config, with errors that name the file, line and field."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from orchlib import safeyaml

__all__ = ["ConfigFileError", "load_config", "merged", "dotted", "located"]

M = TypeVar("M", bound=BaseModel)


class ConfigFileError(ValueError):
    """`FILE:LINE: field: problem` — one line a person can act on."""


def load_config(path: str | os.PathLike, model: type[M], base: M | None = None) -> M:
    """The file's settings as a `model`. With `base`, the file's settings are merged into base's, nested configs
    included, so `grpo: {learning_rate: 1e-3}` changes that one field of base's GRPOConfig and keeps the rest
    of it (without `base` every field the file leaves out takes the class default)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigFileError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigFileError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    try:
        tree = safeyaml.load(YAML(typ="rt"), text)
    except safeyaml.YAMLInputError as e:
        raise ConfigFileError(f"{path}:{e.line}: not valid YAML: {e.problem}") from None
    if not isinstance(tree, dict):
        raise ConfigFileError(f"{path}:1: expected a mapping of settings, got {type(tree).__name__}")
    try:
        settings = _plain(tree)
        return model.model_validate(_merge(model, base.model_dump(), settings) if base is not None else settings)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        field = ".".join(str(x) for x in loc) or "(file)"
        raise ConfigFileError(f"{path}:{_line(tree, loc)}: {field}: {msg}") from None


def located(path: str | os.PathLike, loc: tuple[Any, ...], problem: str) -> ConfigFileError:
    """`FILE:LINE: field: problem` for a problem found after loading (a value the file's world rejects),
    the line that of the deepest part of `loc` the file holds."""
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "(file)"
    try:
        tree = safeyaml.load(YAML(typ="rt"), Path(path).read_text(encoding="utf-8"))
        line = _line(tree, tuple(loc)) if isinstance(tree, dict) else 1
    except (OSError, UnicodeDecodeError, safeyaml.YAMLInputError):
        line = 1
    return ConfigFileError(f"{path}:{line}: {field}: {problem}")


def merged(config: M, updates: dict[str, Any]) -> M:
    """`config` with `updates` merged in, nested mappings field by field, and validated (unlike `model_copy`,
    which neither validates nor merges a nested config)."""
    return type(config).model_validate(_merge(type(config), config.model_dump(), updates))


def dotted(key: str, value: Any) -> dict[str, Any]:
    """`"grpo.rollout.temperature", 0.5` -> `{"grpo": {"rollout": {"temperature": 0.5}}}`, for `merged`."""
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def _merge(model: type[BaseModel], base: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """Nested configs merge field by field; any other value, a mapping-valued setting included, is replaced."""
    out = dict(base)
    for k, v in updates.items():
        sub = _config_class(model.model_fields[k].annotation) if k in model.model_fields else None
        nested = sub is not None and isinstance(v, dict) and isinstance(out.get(k), dict)
        out[k] = _merge(sub, out[k], v) if nested else v
    return out


def _config_class(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (`X` or `X | None`), if any."""
    for t in (annotation, *get_args(annotation)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    for t in (bool, int, float, str):
        if isinstance(obj, t):
            return t(obj)
    return obj


def _line(tree: Any, loc: tuple[Any, ...]) -> int:
    """1-based line of the deepest part of `loc` present in the file."""
    line, node = tree.lc.line, tree
    for part in loc:
        if isinstance(node, CommentedMap) and part in node:
            line, node = node.lc.key(part)[0], node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line, node = node.lc.item(part)[0], node[part]
        else:
            break
    return line + 1
