"""What a fold returns besides its new state: records to write, by logical topic."""

from __future__ import annotations

from typing import Any

import msgspec

# Not a topic: `Emit(DROPPED, counter, n)` tells the drivers that the fold left n things
# out of its state to keep it bounded (SPEC R11.5). `topology.apply` takes these out of
# the records to write; the drivers add them to their counters.
DROPPED = "(dropped)"


class Emit(msgspec.Struct, frozen=True):
    """One output record. `topic` is the logical name; drivers add their prefix."""

    topic: str
    key: str
    value: Any  # a msgspec Struct from app.model (records or internal facts)


def dropped(counter: str, count: int) -> list[Emit]:
    """What a fold reports it dropped (nothing when `count` is 0)."""
    return [Emit(DROPPED, counter, count)] if count else []
