"""What the web surface reads: the fleet fold's state plus a driver's own counters.

`FleetView` is the protocol; `LiveFleet` is the one every driver uses (the embedded
`serve`/`fleet` commands, `classify --fleet`, `run`, and a Faust worker's fleet agent):
it runs the pure fold (app/core/fleet.py) over output records and counts inputs.
No aiohttp here, so the terminal commands work on a core install.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Protocol

import msgspec

from app.core.emit import Emit
from app.core.fleet import DEFAULT_FLEET, FleetSettings, FleetState, FleetSummary, PodEvidence, fleet_summary, fold_fleet


class Lag(msgspec.Struct, frozen=True):
    """Records not yet read on one input partition."""

    topic: str
    partition: int
    lag: int


class Watermark(msgspec.Struct, frozen=True):
    """How far the driver knows a source topic of a cluster (SPEC R12.3): every record
    of it observed before `at` has been read."""

    cluster: str
    topic: str
    at: datetime


class Counters(msgspec.Struct, frozen=True):
    """What only the driver knows: input records per topic, consumer lag when it has
    one, and its watermarks (R12.6)."""

    records: dict[str, int]
    lag: list[Lag] = []
    watermarks: list[Watermark] = []


class FleetView(Protocol):
    @property
    def state(self) -> FleetState: ...

    @property
    def settings(self) -> FleetSettings: ...

    def counters(self) -> Counters: ...

    def pods_of(self, attempt_key: str) -> list[PodEvidence]:
        """Pods of an attempt the driver knows beyond the fault records ([] if none)."""
        ...


class LiveFleet:
    """The fleet fold with its state, fed one output record at a time."""

    def __init__(
        self,
        settings: FleetSettings = DEFAULT_FLEET,
        *,
        state: FleetState | None = None,
        records: Callable[[], Mapping[str, int]] | None = None,
        lag: Callable[[], list[Lag]] | None = None,
        pods: Callable[[str], list[PodEvidence]] | None = None,
        watermarks: Callable[[], list[Watermark]] | None = None,
    ) -> None:
        """`records`, `lag` and `pods` let a driver that keeps those itself (a Faust
        worker) answer for them; by default inputs are counted with `count_input`."""
        self._settings = settings
        self._state = state if state is not None else FleetState()
        self._records = records
        self._lag = lag
        self._pods = pods
        self._watermarks = watermarks
        self.records: Counter[str] = Counter()

    @property
    def state(self) -> FleetState:
        return self._state

    @property
    def settings(self) -> FleetSettings:
        return self._settings

    def restore(self, state: FleetState) -> None:
        """Continue from a stored state (a worker restarting); the web app keeps this object."""
        self._state = state

    def observe(self, emit: Emit) -> list[Emit]:
        """Fold one output record; return the derived records it changed."""
        self._state, derived = fold_fleet(self._state, emit, self._settings)
        return derived

    def watch(self, emits: Iterable[Emit]) -> Iterator[Emit]:
        """Pass output records through unchanged, folding each on the way."""
        for emit in emits:
            self.observe(emit)
            yield emit

    def count_input(self, topic: str, n: int = 1) -> None:
        self.records[topic] += n

    def counters(self) -> Counters:
        records = self._records() if self._records is not None else self.records
        return Counters(
            dict(sorted(records.items())),
            self._lag() if self._lag is not None else [],
            self._watermarks() if self._watermarks is not None else [],
        )

    def pods_of(self, attempt_key: str) -> list[PodEvidence]:
        return self._pods(attempt_key) if self._pods is not None else []

    def summary(self, top: int = 10) -> FleetSummary:
        return fleet_summary(self._state, self._settings, top)
