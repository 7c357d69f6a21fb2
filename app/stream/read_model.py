"""The fleet read model on a worker: every partition of the derived topics (and the
verdicts and dead letters) read from the beginning into a `LiveFleet`, so any worker
serves the whole fleet (docs/fleet.md). The fleet stage itself is a stage like the
others (app/core/engine/topology.py): its state is per key and partitioned.

The reader is a plain consumer with no group: it commits nothing and misses nothing the
topics still hold (the derived topics are compacted and kept for the history).
"""

from __future__ import annotations

import logging
from typing import Any

import faust
import msgspec
from mode import Service

from app.core.base.emit import Emit
from app.core.fleet.evidence import AttemptEvidence, evidence_of
from app.core.fleet.view import Counters, LiveFleet, Waiting, Watermark
from app.core.base.rules import FleetSettings, Rules
from app.kafka import clients
from app.model.fleet_records import DERIVED_TOPICS, DerivedRecord
from app.model import records_v1
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, IDLE_QUOTA, STUCK_READMISSIONS, ClassifiedFailure, DeadLetter, IdleQuota, StuckReadmission
from app.settings import Settings
from app.stream.agents import Stages
from app.stream.faust_fixes import read_offsets
from app.stream.lag import consumer_lag

log = logging.getLogger("faultline.stream")

READ_TOPICS = (*DERIVED_TOPICS, CLASSIFIED_FAILURES, STUCK_READMISSIONS, IDLE_QUOTA, DEAD_LETTER)
_DECODERS: dict[str, Any] = {
    **{topic: DerivedRecord | records_v1.DerivedRecordV1 for topic in DERIVED_TOPICS},  # v1 rates: before SPEC R14.2
    CLASSIFIED_FAILURES: ClassifiedFailure | records_v1.ClassifiedFailure,  # v1: written before SPEC R13
    STUCK_READMISSIONS: StuckReadmission,
    IDLE_QUOTA: IdleQuota,  # SPEC R17.3
    DEAD_LETTER: DeadLetter,
}


class FleetReadModel(Service):
    """A `FleetView` for the worker's web surface; reads while the worker runs."""

    def __init__(self, stages: Stages, settings: Settings, rules: Rules, fleet: FleetSettings) -> None:
        super().__init__()
        self.stages, self._settings, self.rules = stages, settings, rules
        self.live = LiveFleet(fleet)
        self._decoders = {settings.topic(t): (t, _msgspec_decoder(kind)) for t, kind in _DECODERS.items()}

    async def on_start(self) -> None:
        self.add_future(self._read())

    async def _read(self) -> None:
        consumer = clients.aio_consumer(
            self._settings, enable_auto_commit=False, auto_offset_reset="earliest", group_id=None
        )
        consumer.subscribe(list(self._decoders))
        await consumer.start()
        try:
            async for message in consumer:
                topic, decoder = self._decoders[message.topic]
                try:
                    value = decoder.decode(message.value or b"")
                except Exception:  # noqa: BLE001 - a record this version cannot read is skipped, not fatal
                    log.warning("fleet view: %s[%d]@%d is not readable; skipped", message.topic, message.partition, message.offset)
                    continue
                self.live.observe(Emit(topic, (message.key or b"").decode("utf-8", "replace"), value))
        finally:
            await consumer.stop()

    # --- FleetView (app/core/fleet/view.py), read by the web routes ----------------------------

    @property
    def state(self):  # type: ignore[no-untyped-def]
        return self.live.state

    @property
    def settings(self) -> FleetSettings:
        return self.live.settings

    def counters(self) -> Counters:
        app, d = self.stages.app, self.stages.delivery
        lag = consumer_lag(app.consumer, read_offsets(app), d.logical) if app.consumer is not None else []
        marks = [Watermark(cluster, topic, at) for cluster, topic, at in self.stages.watermark_rows()]
        waiting = [Waiting(cluster, topic) for cluster, topic in self.stages.waiting_rows()]
        return Counters(dict(sorted(d.records.items())), lag, marks, waiting)

    def evidence(self, attempt_key: str) -> AttemptEvidence | None:
        """Only for attempts whose attempt-stage partition this worker holds (`owner_of`
        says where the others are)."""
        entry = self.stages.attempts.get(attempt_key)
        return evidence_of(entry.state if entry is not None else None, self.rules.version)

    def owner_of(self, attempt_key: str) -> str | None:
        """The web address of the worker holding the attempt, when it is another one."""
        app: faust.App = self.stages.app
        try:
            url = app.router.key_store("attempts", attempt_key.encode())
        except Exception:  # noqa: BLE001 - no assignment yet, or a rebalance under way
            return None
        if str(url).rstrip("/") == str(app.conf.canonical_url).rstrip("/") or url.host.endswith(".invalid"):
            return None  # here, or a worker named by its id only (app.stream.app._identity): not reachable
        return str(url)

    def reports_fleet(self) -> bool:
        """Every worker reads the same fleet; the group's leader reports its gauges."""
        try:
            return bool(self.stages.app.is_leader())
        except Exception:  # noqa: BLE001 - not assigned yet
            return False


def _msgspec_decoder(kind: Any) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(kind)
