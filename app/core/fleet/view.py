"""What the web surface reads: the fleet read model plus a driver's own counters.

`FleetView` is the protocol; `LiveFleet` is the one every driver uses (the embedded
`serve`/`fleet` commands, `classify --fleet`, `run`, and a Faust worker's read model):
it reads the derived records, verdicts and dead letters into `fleet_read_model.FleetState`.
No aiohttp here, so the terminal commands work on a core install.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Protocol

import msgspec

from app.core.base.emit import Emit
from app.core.fleet.evidence import AttemptEvidence
from app.core.fleet.read_model import FleetState, read
from app.core.fleet.summary import FleetSummary, fleet_summary
from app.core.base.rules import DEFAULT_FLEET, FleetSettings


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


class Waiting(msgspec.Struct, frozen=True):
    """A source topic of a cluster some stage has no watermark of yet, while it has heard
    progress of the cluster (SPEC R12.5): that stage's stream time waits for it."""

    cluster: str
    topic: str


class Counters(msgspec.Struct, frozen=True):
    """What only the driver knows: input records per topic, consumer lag when it has
    one, its watermarks (R12.6) and the topics its stream time waits for (R12.5)."""

    records: dict[str, int]
    lag: list[Lag] = []
    watermarks: list[Watermark] = []
    waiting: list[Waiting] = []


class FleetView(Protocol):
    @property
    def state(self) -> FleetState: ...

    @property
    def settings(self) -> FleetSettings: ...

    def counters(self) -> Counters: ...

    def evidence(self, attempt_key: str) -> AttemptEvidence | None:
        """The attempt's evidence, where the driver keeps it (None: not kept, or not here)."""
        ...

    def owner_of(self, attempt_key: str) -> str | None:
        """The web address of another worker holding the attempt's evidence, if any."""
        ...

    def reports_fleet(self) -> bool:
        """Whether /metrics here reports the fleet's gauges (one reader of a group does)."""
        ...


class LiveFleet:
    """The fleet read model, fed one record at a time."""

    def __init__(
        self,
        settings: FleetSettings = DEFAULT_FLEET,
        *,
        records: Callable[[], Mapping[str, int]] | None = None,
        lag: Callable[[], list[Lag]] | None = None,
        evidence: Callable[[str], AttemptEvidence | None] | None = None,
        watermarks: Callable[[], list[Watermark]] | None = None,
        waiting: Callable[[], list[Waiting]] | None = None,
    ) -> None:
        """`records`, `lag`, `evidence`, `watermarks` and `waiting` let a driver that keeps
        those itself answer for them; by default inputs are counted with `count_input`."""
        self._settings = settings
        self._state = FleetState()
        self._records = records
        self._lag = lag
        self._evidence = evidence
        self._watermarks = watermarks
        self._waiting = waiting
        self.records: Counter[str] = Counter()

    @property
    def state(self) -> FleetState:
        return self._state

    @property
    def settings(self) -> FleetSettings:
        return self._settings

    def observe(self, emit: Emit) -> None:
        """Read one record (derived records, verdicts and dead letters count; others not)."""
        read(self._state, emit, self._settings)

    def watch(self, emits: Iterable[Emit]) -> Iterator[Emit]:
        """Pass records through unchanged, reading each on the way."""
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
            self._waiting() if self._waiting is not None else [],
        )

    def evidence(self, attempt_key: str) -> AttemptEvidence | None:
        return self._evidence(attempt_key) if self._evidence is not None else None

    def owner_of(self, attempt_key: str) -> str | None:
        return None  # one process holds everything

    def reports_fleet(self) -> bool:
        return True

    def summary(self, top: int = 10) -> FleetSummary:
        return fleet_summary(self._state, self._settings, top)
