"""Shared fixtures. Everything is offline: HF_HUB_OFFLINE is set before transformers is imported."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory) -> Path:
    """One cache for the session's built default policies (built once, then loaded)."""
    return Path(os.environ.get("ORCHLIB_TEST_CACHE") or tmp_path_factory.mktemp("orchlib-cache"))


@pytest.fixture(scope="session")
def tiny_policy(policy_cache):
    from orchlib.models import build_default_policy

    return build_default_policy("tiny", cache=policy_cache)
