"""Where each kind's watch stands, kept by the sink so a restarted bridge resumes there.

A position is saved only after every record published before it is durable in the same
sink (each watch hands records and positions to one thread, in order, and the bridge
flushes the sink before it saves). On a restart the watch resumes from the saved
resourceVersion: the changes since then are replayed by the API server, and the ones
published after the last checkpoint before the stop are published again (at least once).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import msgspec

from app.bridge.records import BridgePosition

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(BridgePosition)


def position_key(cluster: str, kind: str) -> str:
    return f"{cluster}/{kind}"


def encode_position(position: BridgePosition) -> bytes:
    return _encoder.encode(position)


def decode_position(value: bytes) -> BridgePosition | None:
    """None for a value that is not a position (a tombstone, or foreign data)."""
    if not value:
        return None
    try:
        return _decoder.decode(value)
    except msgspec.DecodeError:
        return None


class PositionStore(Protocol):
    where: str | None  # where positions outlive the process (e.g. a topic); None: they do not

    def load(self, cluster: str) -> dict[str, BridgePosition]:
        """The last saved position of each kind of `cluster`, by kind name."""
        ...

    def save(self, positions: Iterable[BridgePosition]) -> None:
        """Record these positions; durable once the sink's next flush returns."""
        ...


class MemoryPositions:
    """Positions for one process's lifetime: `record` and `run` start from a fresh list
    each time (a trace or a live run is a snapshot plus what follows)."""

    where: str | None = None

    def __init__(self) -> None:
        self.saved: dict[str, BridgePosition] = {}

    def load(self, cluster: str) -> dict[str, BridgePosition]:
        return {p.kind: p for key, p in self.saved.items() if key.startswith(cluster + "/")}

    def save(self, positions: Iterable[BridgePosition]) -> None:
        for position in positions:
            self.saved[position_key(position.cluster, position.kind)] = position
