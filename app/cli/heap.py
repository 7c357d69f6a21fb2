"""The garbage collector's settings for a faultline process (measured in docs/benchmarks.md,
*The collector at 100k failures*)."""

from __future__ import annotations

import gc

# A full collection after this many of the middle generation's (CPython's default is 10).
FULL_COLLECTION_EVERY = 100


def settle_heap() -> None:
    """A fold keeps its states for the life of the process and makes almost no reference
    cycles, so each full collection walks every state to free next to nothing: at 100k
    failures that was 28 collections and a sixth of `faultline fleet`'s CPU. The objects
    made at start-up (modules, rules, schemas) are frozen out of every collection, and a
    full collection runs a tenth as often; young objects are collected as before."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
