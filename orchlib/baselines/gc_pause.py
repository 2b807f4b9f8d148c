"""Automatic garbage collection paused while a batch of episodes runs: the collector's walks over
every trajectory's long id lists cost more than the episodes (benchmarks/bench_replay.py)."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator, TypeVar

__all__ = ["collector_paused", "paused_batches"]

T = TypeVar("T")


@contextmanager
def collector_paused() -> Iterator[None]:
    """Automatic garbage collection off for one batch of episodes, then back as it was.

    Every trajectory holds its prompt's ids three times over (ids, mask, log-probs), and the collector
    walks every element of every list it finds among young objects: on replayed routes that walk cost
    more than the episodes themselves (benchmarks/bench_replay.py). Reference counting still frees
    everything that is not a cycle; the cycles a batch leaves are collected once it is done. Only
    automatic collection is paused (process-wide, for the batch); a collector someone turned off
    stays off."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def paused_batches(batches: Iterator[T]) -> Iterator[T]:
    """Each item of `batches` produced, and then used by the caller, with the collector paused; it
    runs between items (see collector_paused)."""
    while True:
        with collector_paused():
            item = next(batches, None)
            if item is None:
                return
            yield item
            del item
