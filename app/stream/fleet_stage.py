"""The fleet stage on a worker: the output topics, folded by app/core/fleet.py into fleet
health, published to the derived topics and served by the worker's web server.

    faults, classified-failures,      --(re-key: one partition, one key)-->  fleet-inputs
    gang-transitions, dead-letter
    fleet-inputs --> fleet stage [table fleet] --> node/gpu-fault-rates, quarantine-candidates,
                                                   failure-rates, preemption-waits

The fold is over the whole fleet (top nodes, quarantine candidates), so its input is one
partition and its state one table entry: the worker that owns `fleet-inputs` partition 0
holds it and serves the page; /metrics on every worker counts that worker's own records.
Delivery is the other stages' (delivery.py): a redelivered output record is recognised
by its origin, so no fault or verdict is counted twice.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import faust
import msgspec
from faust.streams import current_event

from app.core.emit import Emit
from app.core.fleet import FleetSettings, FleetState, PodEvidence, attempt_pods, fold_fleet
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, FAULTS, GANG_TRANSITIONS, OutputRecord
from app.model.fleet_records import DERIVED_TOPICS
from app.stream.agents import Stages
from app.stream.codecs import Origin, Position, encode
from app.stream.delivery import Batch, origin_of, upstream_origin
from app.stream.tables import StateTable
from app.kafka.topics import FLEET_INPUTS
from app.web.faust_mount import consumer_lag
from app.web.view import Counters

log = logging.getLogger("faultline.stream")

FLEET_KEY = "fleet"
# The fleet state is one value that grows with the fleet: it is decoded and encoded once
# per batch, and a batch stays open this long (the derived records are that much later).
FLEET_LINGER = 1.0
FLEET_SOURCES = (FAULTS, CLASSIFIED_FAILURES, GANG_TRANSITIONS, DEAD_LETTER)


class _Queued(NamedTuple):
    event: faust.types.EventT
    origin: Origin
    emit: Emit


class _Folded(NamedTuple):
    state: FleetState | None
    positions: dict[str, Position]
    derived: list[Emit]
    skipped: int


class _Failed(NamedTuple):
    index: int
    reason: str


class FleetInputRecord(msgspec.Struct, frozen=True):
    """A `faultline.fleet-inputs` value: an output record, unchanged, with where it was."""

    topic: str  # logical output topic
    key: str
    value: msgspec.Raw


_FLEET_INPUT = msgspec.json.Decoder(FleetInputRecord)
_OUTPUT_RECORD = msgspec.json.Decoder(OutputRecord)


class FleetStage:
    """Registers the fleet agents on the stages' app; is the web surface's `FleetView`."""

    def __init__(self, stages: Stages, settings: FleetSettings, *, run: bool = True) -> None:
        """`run=False` (setting fleet_stage): no fleet agents; the web surface then shows
        the worker's counters and an empty fleet."""
        self.stages, self._settings = stages, settings
        self._queued: list[_Queued] = []
        self.table: StateTable[FleetState] | None = None
        if not run:
            return
        d = stages.delivery
        d.output(FLEET_INPUTS, partitions=1, rekey=True)
        for name in DERIVED_TOPICS:
            d.output(name)
        # Never expires: the fold drops what falls out of its own history.
        self.table = StateTable(d.table("fleet", partitions=1), FleetState, lambda state, now: False, compressed=True)
        d.register(d.source(*FLEET_SOURCES), "fleet_router", self.on_output)
        d.register(
            d.source(FLEET_INPUTS, partitions=1), "fleet_stage", self.on_fleet_input, self.table, self.fold_batch, linger=FLEET_LINGER
        )

    # --- the agents' bodies -------------------------------------------------------------------

    async def on_output(self, message: faust.types.Message, batch: Batch) -> None:
        d = self.stages.delivery
        logical = d.logical[message.topic]
        key = (message.key or b"").decode("utf-8", "replace")
        record = FleetInputRecord(logical, key, msgspec.Raw(message.value or b"null"))
        await d.send([Emit(FLEET_INPUTS, FLEET_KEY, encode(record))], origin_of(message), batch)

    async def on_fleet_input(self, message: faust.types.Message, batch: Batch) -> None:
        """Decode and queue: the batch is folded at once in `fold_batch`. The fleet state
        is one value that grows with the fleet, so decoding and encoding it per record
        would cost each record the whole fleet (it made verdicts wait seconds)."""
        try:
            record = _FLEET_INPUT.decode(message.value or b"")
            value = _OUTPUT_RECORD.decode(record.value)
        except msgspec.DecodeError as exc:
            await self.stages.delivery.dead_letter(message, f"fleet input: {exc}", batch)
            return
        event = current_event()
        assert event is not None  # called from the agent, on this message's event
        self._queued.append(_Queued(event, upstream_origin(message), Emit(record.topic, record.key, value)))

    async def fold_batch(self, batch: Batch) -> None:
        """Fold the queued records into the stored state, send the derived records, hold
        the new state (written by the batch's flush, after the sends are acknowledged).
        A record whose fold raises is dead-lettered and the batch folded again without
        it, from the stored state: a fold that raised may have changed the state half way."""
        queued, self._queued = self._queued, []
        failed: dict[int, str] = {}
        while queued:
            folded = self._fold_all(queued, failed)
            if isinstance(folded, _Failed):
                failed[folded.index] = folded.reason
                message = queued[folded.index].event.message
                await self.stages.delivery.dead_letter(message, f"internal error: {folded.reason}", batch)
                continue
            last = queued[-1]
            await self.stages.delivery.send(folded.derived, last.origin, batch)
            if folded.state is not None and self.table is not None:
                self.table.hold(FLEET_KEY, last.event, folded.positions, folded.state)
            self.stages.counts["redelivered"] += folded.skipped
            return

    def _fold_all(self, queued: list[_Queued], failed: dict[int, str]) -> _Folded | _Failed:
        assert self.table is not None  # the agents run only with a table
        entry = self.table.get(FLEET_KEY)
        state = entry.state if entry is not None else None
        positions = dict(entry.positions) if entry is not None else {}
        derived: list[Emit] = []
        skipped = 0
        for index, item in enumerate(queued):
            if index in failed:
                continue
            seen = positions.get(item.origin.stream)
            if seen is not None and item.origin.position <= seen:
                skipped += 1  # a redelivery after a crash: already in the state
                continue
            try:
                state, out = fold_fleet(state, item.emit, self._settings)
            except Exception as exc:  # a bug in the core: dead-lettered, the stream goes on
                message = item.event.message
                log.exception("fleet fold failed on %s[%d]@%d", message.topic, message.partition, message.offset)
                return _Failed(index, f"{type(exc).__name__}: {exc}")
            positions[item.origin.stream] = item.origin.position
            derived.extend(out)
        return _Folded(state, positions, derived, skipped)

    # --- FleetView (app/web/view.py), read by the web routes ----------------------------------

    @property
    def state(self) -> FleetState:
        entry = self.table.get(FLEET_KEY) if self.table is not None else None
        return entry.state if entry is not None else FleetState()

    @property
    def settings(self) -> FleetSettings:
        return self._settings

    def counters(self) -> Counters:
        app, d = self.stages.app, self.stages.delivery
        lag = consumer_lag(app.consumer, app.consumer._read_offset, d.logical) if app.consumer is not None else []
        return Counters(dict(sorted(d.records.items())), lag)

    def pods_of(self, attempt_key: str) -> list[PodEvidence]:
        """Only for attempts whose attempt-stage partition this worker holds."""
        entry = self.stages.attempts.get(attempt_key)
        return attempt_pods(entry.state if entry is not None else None)
