"""The tool cards, reward files and run recipes that ship inside the package.

They live in `orchlib/toolcards/`, `orchlib/rewards/` and `orchlib/recipes/` (a source checkout also has
`toolcards/` and `rewards/` links at its top, and examples/ links the recipes, for the paths the docs
write). They are found with importlib.resources,
so they are there in a wheel as in a checkout. `shipped_path` lets every loader take the paths the
docs use ("rewards/toolorchestra.yaml", "toolcards") from any folder: a path that exists is taken as
it is; one that does not, and starts with a shipped folder's name, is looked up in the package.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Literal

__all__ = ["SHIPPED", "shipped_dir", "shipped_path"]

SHIPPED: tuple[str, ...] = ("toolcards", "rewards", "recipes")


def shipped_dir(kind: Literal["toolcards", "rewards", "recipes"]) -> Path:
    """The installed folder of shipped tool cards, reward files or recipes."""
    if kind not in SHIPPED:
        raise ValueError(f"no shipped folder {kind!r}: one of {', '.join(SHIPPED)}")
    return Path(str(resources.files("orchlib").joinpath(kind)))


def shipped_path(path: str | os.PathLike) -> Path:
    """`path` itself when it exists (or is absolute); else, when it starts with `toolcards`,
    `rewards` or `recipes`, the same file inside the package; else `path` unchanged (its loader says it is missing)."""
    p = Path(os.path.expanduser(path))
    if p.exists() or p.is_absolute() or not p.parts or p.parts[0] not in SHIPPED:
        return p
    inside = shipped_dir(p.parts[0]).joinpath(*p.parts[1:])  # type: ignore[arg-type]
    return inside if inside.exists() else p
