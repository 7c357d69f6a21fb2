"""What a fold returns besides its new state: records to write, by logical topic."""

from __future__ import annotations

from typing import Any

import msgspec


class Emit(msgspec.Struct, frozen=True):
    """One output record. `topic` is the logical name; drivers add their prefix."""

    topic: str
    key: str
    value: Any  # a msgspec Struct from app.model (records or internal facts)
