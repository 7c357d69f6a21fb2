"""The Faust driver: one agent per stage of the topology (app/core/topology.py), each a
thin loop — decode, key, fold, send — with the stage's state in a Faust table. No rule,
route or key lives here: the topology says which topics a stage reads and writes, how a
record is keyed and what folds it.

Delivery (batches, at-least-once, redelivery recognised by position, one agent per
table): delivery.py. A stage reading several topics (pods: k8s.pods and k8s.events, both
keyed by pod uid and co-partitioned; jobs: k8s.jobs and k8s.workloads) is one agent
over all of them.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import faust

from app.core.rules import Rules
from app.core.topology import INPUT_OF, OUTPUT_TOPICS, STAGES, Failed, Stage, apply, decode_record
from app.model.decode import BadRecord
from app.model.facts import INTERNAL_TOPICS
from app.settings import Settings
from app.stream.delivery import Batch, Delivery, origin_of, upstream_origin
from app.stream.tables import StateTable

log = logging.getLogger("faultline.stream")


class Stages:
    """Builds the topics, tables, agents and the expiry timer of one Faust app."""

    def __init__(self, app: faust.App, settings: Settings, rules: Rules) -> None:
        self.app, self.settings, self.rules = app, settings, rules
        self.delivery = Delivery(app, settings)
        for name in (*OUTPUT_TOPICS, *INTERNAL_TOPICS):
            self.delivery.output(name, rekey=name in INTERNAL_TOPICS)
        self.counts = self.delivery.counts
        self._logged: Counter[str] = Counter()
        self.tables: dict[str, StateTable[Any]] = {}
        for stage in STAGES:
            table = self._table(stage) if stage.state is not None else None
            d = self.delivery
            d.register(d.source(*stage.topics), f"{stage.name}_stage", self._handler(stage, table), table)
        self.app.timer(self.settings.sweep_interval, name="faultline-expiry")(self.sweep)

        async def stats(view: Any, request: Any) -> Any:  # Faust binds a page function to its View
            return view.json(self.stats())

        self.app.page("/faultline/")(stats)

    def _table(self, stage: Stage) -> StateTable[Any]:
        expired, rules = stage.expired, self.rules
        table: StateTable[Any] = StateTable(
            self.delivery.table(stage.name),
            stage.state,
            (lambda state, now: expired(state, now, rules)) if expired is not None else (lambda state, now: False),
        )
        self.tables[stage.name] = table
        return table

    @property
    def attempts(self) -> StateTable[Any]:
        return self.tables["attempts"]

    def stats(self) -> dict[str, Any]:
        """GET /faultline/ on the worker's web port: counters and stream time per table partition."""
        return {
            "app_id": self.settings.app_id,
            "rules_version": self.rules.version,
            "counts": dict(self.counts),
            "stream_time": {
                t.name: {str(p): at.isoformat() for p, at in sorted(t.stream_time.items())} for t in self.tables.values()
            },
        }

    def _handler(self, stage: Stage, table: StateTable[Any] | None) -> Any:
        delivery, rules = self.delivery, self.rules

        async def handle(message: faust.types.Message, batch: Batch) -> None:
            topic = delivery.logical[message.topic]
            self.counts["records"] += 1
            try:
                record = decode_record(topic, message.value or b"")
            except BadRecord as exc:
                await delivery.dead_letter(message, str(exc), batch)
                return
            reader = INPUT_OF[topic]
            key = reader.key((message.key or b"").decode("utf-8", "replace"), record)
            if key is None:
                return
            # A re-keyed record is recognised by the source record that caused it; a
            # source record by its own position (a header on it is someone else's words).
            origin = upstream_origin(message) if topic in INTERNAL_TOPICS else origin_of(message)
            entry = None
            if table is not None:
                table.advance(message.partition, record.observed_at)
                entry = table.get(key)
                if entry is not None and entry.applied(origin):
                    self.counts["redelivered"] += 1  # a repeat after a crash: already folded
                    return
            result = apply(stage, reader.fold, entry.state if entry is not None else None, key, record, rules)
            if isinstance(result, Failed):
                log.error("%s[%d]@%d: %s", message.topic, message.partition, message.offset, result.reason)
                await delivery.dead_letter(message, result.reason, batch)
                return
            await delivery.send(result.emits, origin, batch)
            if table is not None and result.state is not None:
                table.put(key, entry, origin, result.state)

        return handle

    # --- expiry (SPEC R7.4) --------------------------------------------------------------------

    async def sweep(self) -> None:
        """Drop expired state, judged by each table partition's stream time; the timer
        only decides how often to look."""
        for table in self.tables.values():
            self.counts[f"expired_{table.name}"] += table.sweep()
        if self.counts != self._logged:
            log.info("faultline: %s", " ".join(f"{k}={v}" for k, v in sorted(self.counts.items())))
            self._logged = Counter(self.counts)
