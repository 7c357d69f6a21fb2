"""The Faust driver: one agent per stage of the topology (app/core/topology.py), each a
thin loop — decode, key, fold, send — with the stage's state in a Faust table. No rule,
route or key lives here: the topology says which topics a stage reads and writes, how a
record is keyed and what folds it.

Delivery (batches, at-least-once, redelivery recognised by position, one agent per
table): delivery.py. A stage reading several topics (pods: k8s.pods and k8s.events, both
keyed by pod uid and co-partitioned; jobs: k8s.jobs and k8s.workloads) is one agent
over all of them.

Progress (SPEC R12): each stage keeps, per partition of its inputs, the watermarks of the
progress it has read (in memory: after a restart the next progress, a second later,
rebuilds them, and a decision depends on a watermark only through the times it passes,
so it is the same whenever it is taken). A progress record is forwarded to every
partition of the stage's internal topics and settles the blocked states of its
partition: one input record, outputs for many keys, delivered like any other batch.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime
from typing import Any

import faust

from app.core.clock import CLOCK_FAULT
from app.core.progress import NO_PROGRESS, Watermarks, progress_of
from app.core.rules import Rules
from app.core.topology import (
    INPUT_OF,
    OUTPUT_TOPICS,
    STAGES,
    Failed,
    Stage,
    StageRecord,
    apply,
    decode_record,
    forwarded,
    progress_in,
    settle,
    time_fault,
)
from app.model.decode import BadRecord
from app.model.facts import INTERNAL_TOPICS, Progress
from app.settings import Settings
from app.stream.codecs import Origin
from app.stream.delivery import Batch, Delivery, origin_of, relayed, upstream_origin
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
        # Stage name -> input partition -> the progress it has read there.
        self.marks: dict[str, dict[int, Watermarks]] = {stage.name: {} for stage in STAGES}
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
            waits_until=(lambda state: waits_until(state, rules)) if (waits_until := stage.waits_until) is not None else None,
        )
        self.tables[stage.name] = table
        return table

    @property
    def attempts(self) -> StateTable[Any]:
        return self.tables["attempts"]

    def stream_time(self, stage: str, partition: int, cluster: str) -> datetime | None:
        """R12.5: the stage's watermark in that partition for the cluster, else the latest
        record time it folded there."""
        marks = self.marks[stage].get(partition, NO_PROGRESS).stream_time(cluster)
        table = self.tables.get(stage)
        return marks or (table.latest.get(partition, {}).get(cluster) if table is not None else None)

    def watermark_rows(self) -> list[tuple[str, str, datetime]]:
        """(cluster, source topic, watermark) for /metrics and the page (R12.6): the least,
        over this worker's stages and partitions, of what each knows."""
        least: dict[tuple[str, str], datetime] = {}
        for by_partition in self.marks.values():
            for marks in by_partition.values():
                for cluster, topic, at in marks.known():
                    known = least.get((cluster, topic))
                    least[(cluster, topic)] = at if known is None else min(known, at)
        return sorted((cluster, topic, at) for (cluster, topic), at in least.items())

    def watermarks(self) -> dict[str, dict[str, dict[str, str | None]]]:
        """Stage -> `<cluster>/<topic>` -> input partition -> watermark (R12.6)."""
        out: dict[str, dict[str, dict[str, str | None]]] = {}
        for stage, by_partition in self.marks.items():
            for partition, marks in sorted(by_partition.items()):
                for key in sorted({*marks.latest, *marks.ended}):
                    cluster, _, topic = key.partition("/")
                    at = marks.of(cluster, topic)
                    out.setdefault(stage, {}).setdefault(key, {})[str(partition)] = at.isoformat() if at else None
        return out

    def stats(self) -> dict[str, Any]:
        """GET /faultline/ on the worker's web port: counters, stream time per table
        partition and cluster, and the watermarks of every stage (R12.6)."""
        return {
            "app_id": self.settings.app_id,
            "rules_version": self.rules.version,
            "counts": dict(self.counts),
            "stream_time": {
                t.name: {
                    str(p): {c: at.isoformat() for c, at in sorted(latest.items())} for p, latest in sorted(t.latest.items())
                }
                for t in self.tables.values()
            },
            "watermarks": self.watermarks(),
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
            marks = self.marks[stage.name].get(message.partition, NO_PROGRESS)
            fault = time_fault(topic, record, marks, rules)
            if fault is not None:  # R11.3, R11.4: neither folded nor moving stream time
                self.counts["clock_faults"] += fault.startswith(CLOCK_FAULT)
                await delivery.dead_letter(message, fault, batch)
                return
            # A re-keyed record is recognised by the source record that caused it; a
            # source record by its own position (a header on it is someone else's words).
            origin = upstream_origin(message) if topic in INTERNAL_TOPICS else origin_of(message)
            # What this stage writes is recognised downstream in its own input partition's order.
            sent = relayed(origin, message) if topic in INTERNAL_TOPICS else origin
            if progress_in(record):
                await self._progress(stage, table, topic, message, origin, sent, record, batch)
                return
            reader = INPUT_OF[topic]
            key = reader.key((message.key or b"").decode("utf-8", "replace"), record)
            if key is None:
                return
            entry = None
            if table is not None:
                table.advance(message.partition, record.cluster, record.observed_at)
                entry = table.get(key)
                if entry is not None and entry.applied(origin):
                    self.counts["redelivered"] += 1  # a repeat after a crash: already folded
                    return
            result = apply(stage, reader.fold, entry.state if entry is not None else None, key, record, rules, marks)
            if isinstance(result, Failed):
                log.error("%s[%d]@%d: %s", message.topic, message.partition, message.offset, result.reason)
                await delivery.dead_letter(message, result.reason, batch)
                return
            self.counts.update(result.dropped)
            await delivery.send(result.emits, sent, batch, encoded=result.emit_bytes)
            # A fold that changed nothing and said nothing is not written (most pod updates:
            # a new resourceVersion, the same facts); folded again after a crash, it
            # changes nothing again.
            if table is not None and result.state is not None and (result.state_bytes is not None or result.emits):
                table.put(key, entry, origin, result.state, result.state_bytes)

        return handle

    async def _progress(
        self,
        stage: Stage,
        table: StateTable[Any] | None,
        topic: str,
        message: faust.types.Message,
        origin: Origin,
        sent: Origin,
        record: StageRecord,
        batch: Batch,
    ) -> None:
        """R12.3, R12.4: move the watermark, forward the progress, settle what waited on it.

        A stage reading a source topic reads one partition of it here, and every record of
        the keys it holds comes through that partition: its own watermark is that
        partition's progress. The progress it forwards names the partition and the count,
        so the next stage waits for all of them."""
        if isinstance(record, Progress):
            progress = own = record
        else:
            progress = progress_of(topic, message.partition, self.settings.partitions, record)
            own = progress_of(topic, 0, 1, record)
        by_partition = self.marks[stage.name]
        marks = by_partition.get(message.partition, NO_PROGRESS).observe(own)
        if marks is None:
            return  # nothing new (a repeat, or progress from behind)
        by_partition[message.partition] = marks
        self.counts["progress"] += 1
        index = await self.delivery.send(forwarded(stage, progress), sent, batch)
        if table is None or stage.settle is None:
            return
        now = marks.stream_time(progress.cluster)
        for key in table.waiting_keys(message.partition, progress.cluster, now, self.app.consumer_generation_id):
            entry = table.get(key)
            if entry is None or entry.applied(origin):
                continue
            result = settle(stage, entry.state, key, self.rules, marks)
            if isinstance(result, Failed):
                log.error("%s[%d]@%d: %s", message.topic, message.partition, message.offset, result.reason)
                await self.delivery.dead_letter(message, result.reason, batch)
                continue
            self.counts.update(result.dropped)
            index = await self.delivery.send(result.emits, sent, batch, index, result.emit_bytes)
            table.put(key, entry, origin, result.state, result.state_bytes)

    # --- expiry (SPEC R7.4) --------------------------------------------------------------------

    async def sweep(self) -> None:
        """Drop expired state, judged by each table partition's stream time for the
        entry's cluster (R12.5); the timer only decides how often to look."""
        for name, table in self.tables.items():
            self.counts[f"expired_{table.name}"] += table.sweep(lambda partition, cluster, name=name: self.stream_time(name, partition, cluster))
        if self.counts != self._logged:
            log.info("faultline: %s", " ".join(f"{k}={v}" for k, v in sorted(self.counts.items())))
            self._logged = Counter(self.counts)
