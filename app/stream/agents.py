"""The Faust driver: one agent per stage of the topology (app/core/engine/topology.py), each a
thin loop around the stage's `Runner` (app/core/engine/runner.py, the per-record step the
embedded driver runs too), with the stage's state in a Faust table. No rule, route, key
or progress policy lives here: the topology says which topics a stage reads and writes,
the runner decodes, checks, keys and folds.

Delivery (batches, states durable before their records are sent, repeats recognised by
position and sent again from the outbox, one agent per table): delivery.py; what a new
ownership finds unsent in the outboxes: unsent.py. A stage
reading several topics (pods: k8s.pods and k8s.events, both keyed by pod uid and
co-partitioned; jobs: k8s.jobs and k8s.workloads) is one agent over all of them.

Progress (SPEC R12): each stage keeps one `Scope` per input partition it holds: the
watermarks of the progress read there, the latest record time per cluster, the states
waiting on progress. Scopes live for one ownership of the partition: a rebalance starts
them over (SPEC R12.3), so a partition that comes back is never judged against progress
from an earlier time it was held here. A stage with a table takes up the progress its
table partition was last written with (`_scope`); one without (jobs) starts with none:
until its next progress record, a second later, nothing of it is a clock fault (R11.4).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import faust

from app.core.base.progress import source_topic, waiting_topics
from app.core.base.rules import Rules
from app.core.engine.runner import Runner, Scope, Source
from app.core.engine.topology import OUTPUT_TOPICS, STAGES, Stage, taken_up
from app.model.facts import INTERNAL_TOPICS
from app.settings import Settings
from app.stream.delivery import Batch, Delivery, cause_of, origin_of, relayed, upstream_origin
from app.stream.faust_fixes import hand_fetches_to_stages, in_partition
from app.stream.tables import PartitionStates, StateTable, TableStore
from app.stream.unsent import Unsent

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
        self.unsent: dict[str, Unsent | None] = {}  # stage name -> what its table's outboxes hold unsent (unsent.py)
        self.runners = {stage.name: Runner(stage, rules, self.counts) for stage in STAGES}
        # Stage name -> input partition -> its scope, for this ownership (`_scopes`).
        self.scopes: dict[str, dict[int, Scope]] = {stage.name: {} for stage in STAGES}
        self._generation: int | None = None
        for stage in STAGES:
            table = self._table(stage) if stage.state is not None else None
            d = self.delivery
            unsent = self.unsent[stage.name] = Unsent(self.app, table, d.committed, self.counts) if table is not None else None
            d.register(d.source(*stage.topics), f"{stage.name}_stage", self._handler(stage, table), table, unsent=unsent)
        hand_fetches_to_stages(self.app, self.delivery.inboxes)
        self.app.timer(self.settings.sweep_interval, name="faultline-expiry")(self.sweep)

        async def stats(view: Any, request: Any) -> Any:  # Faust binds a page function to its View
            return view.json(self.stats())

        self.app.page("/faultline/")(stats)

    def _table(self, stage: Stage) -> StateTable[Any]:
        table: StateTable[Any] = StateTable(self.delivery.table(stage.name), stage.state, self.counts)
        self.tables[stage.name] = table
        return table

    @property
    def attempts(self) -> StateTable[Any]:
        return self.tables["attempts"]

    def _scopes(self, stage: str) -> dict[int, Scope]:
        """A stage's scopes for the partitions held now: begun anew with each rebalance."""
        generation = self.app.consumer_generation_id
        if generation != self._generation:
            self._generation = generation
            for scopes in self.scopes.values():
                scopes.clear()
        return self.scopes[stage]

    def _scope(self, stage: str, partition: int) -> Scope:
        """The stage's scope of an input partition: for a new ownership, taken up from
        the progress its table partition was last written with (by whichever worker held
        it), so decisions that wait on progress are taken without waiting for more of it,
        and nothing is judged against progress this worker saw when it held it before."""
        scopes = self._scopes(stage)
        scope = scopes.get(partition)
        if scope is None:
            scope = scopes[partition] = Scope(whole=False)
            table = self.tables.get(stage)
            saved = table.progressed(partition) if table is not None else None
            if saved is not None:
                scope.restore(saved)
                scope.marks = taken_up(stage, scope.marks)
        return scope

    def stream_time(self, stage: str, partition: int, cluster: str) -> datetime | None:
        """R12.5: the stage's stream time in that partition for the cluster."""
        scope = self.scopes[stage].get(partition)
        return scope.stream_time(cluster) if scope is not None else None

    def watermark_rows(self) -> list[tuple[str, str, datetime]]:
        """(cluster, source topic, watermark) for /metrics and the page (R12.6)."""
        return source_watermarks(scope for by_partition in self.scopes.values() for scope in list(by_partition.values()))

    def waiting_rows(self) -> list[tuple[str, str]]:
        """(cluster, source topic) some stage partition's stream time waits for (R12.5)."""
        return waiting_topics(scope.marks for by_partition in self.scopes.values() for scope in list(by_partition.values()))

    def watermarks(self) -> dict[str, dict[str, dict[str, str | None]]]:
        """Stage -> `<cluster>/<topic>` -> input partition -> watermark (R12.6)."""
        out: dict[str, dict[str, dict[str, str | None]]] = {}
        for stage, by_partition in self.scopes.items():
            for partition, scope in sorted(by_partition.items()):
                marks = scope.marks
                for key in sorted({*marks.latest, *marks.ended}):
                    cluster, _, topic = key.partition("/")
                    at = marks.of(cluster, topic)
                    out.setdefault(stage, {}).setdefault(key, {})[str(partition)] = at.isoformat() if at else None
        return out

    def stats(self) -> dict[str, Any]:
        """GET /faultline/ on the worker's web port: counters, stream time per input
        partition and cluster, and the watermarks of every stage (R12.6)."""
        return {
            "app_id": self.settings.app_id,
            "rules_version": self.rules.version,
            "counts": dict(self.counts),
            "stream_time": {  # what expiry and waits run on (R12.5): null while a topic it hears is waited for
                name: {str(p): {c: _iso(s.stream_time(c)) for c in sorted(s.latest)} for p, s in sorted(by_partition.items())}
                for name, by_partition in self.scopes.items()
                if name in self.tables
            },
            "watermarks": self.watermarks(),
        }

    def _handler(self, stage: Stage, table: StateTable[Any] | None) -> Any:
        def handle(tp: Any, record: Any, batch: Batch) -> None:
            self.handle(stage, table, record, batch)

        return handle

    def handle(self, stage: Stage, table: StateTable[Any] | None, message: Any, batch: Batch) -> None:
        """One record (aiokafka's, as fetched) through the stage's runner; its states
        held with the records their folds caused, the records held in the batch
        (delivery.py sends them after). A repeat sends nothing: what it caused was sent
        before this ownership began (unsent.py), or in it."""
        delivery = self.delivery
        topic = delivery.logical[message.topic]
        self.counts["records"] += 1
        # A re-keyed record is recognised by the source record that caused it; a
        # source record by its own position (a header on it is someone else's words).
        internal = topic in INTERNAL_TOPICS
        origin = upstream_origin(message) if internal else origin_of(message)
        # What this stage writes is recognised downstream in its own input partition's order.
        sent = relayed(origin, message) if internal else origin
        store = TableStore(table, message.partition, origin) if table is not None else None
        key = (message.key or b"").decode("utf-8", "replace")
        source = Source(topic, message.topic, key, message.partition, message.offset, self.settings.partitions)
        scope = self._scope(stage.name, message.partition)
        marks = scope.marks
        event = in_partition(message.partition)  # the table partition, for its reads and writes
        outcome = self.runners[stage.name].receive(scope, store, source, message.value or b"")
        if table is not None and scope.marks is not marks:  # kept with the states it reflects
            table.hold_progress(event, scope.snapshot())
        records, starts = delivery.kafka_records(outcome.out, sent, cause_of(message), batch)
        if outcome.writes:
            assert table is not None and store is not None
            for write in outcome.writes:
                table.hold(write.key, event, store.positions(write.key), write.state, write.raw, records[starts[write.first] : starts[write.end]])
        batch.outputs.extend(records)

    # --- expiry (SPEC R7.4) --------------------------------------------------------------------

    async def sweep(self) -> None:
        """Drop expired state, judged by each input partition's stream time for the
        entry's cluster (R12.5); the timer only decides how often to look. Each stage is
        swept between two of its fetches, its batch written first: no state it judges is
        held to be written, and none holds records unsent since its ownership began (they
        left before anything was folded: unsent.py), so what has expired is dropped at
        once and neither waits nor expires any more, as the embedded driver drops it."""
        for name, table in self.tables.items():
            batch = self.delivery.batches.get(f"{name}_stage")
            if batch is None:
                continue
            async with batch.lock:
                if batch.count:
                    try:
                        await self.delivery.flush(batch)
                    except Exception as exc:  # the worker must stop with the batch unacked
                        self.delivery.stop.arm(f"a batch could not be written: {type(exc).__name__}: {exc}")
                        await self.app.crash(exc)
                        return
                runner = self.runners[name]
                expired: list[tuple[bytes, int]] = []
                for partition, scope in list(self._scopes(name).items()):
                    for key in runner.expired(scope, PartitionStates(table, partition)):
                        runner.forget(scope, key)
                        expired.append((key.encode(), partition))
                self.counts[f"expired_{table.name}"] += table.delete(expired)
        if self.counts != self._logged:
            log.info("faultline: %s", " ".join(f"{k}={v}" for k, v in sorted(self.counts.items())))
            self._logged = Counter(self.counts)


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def source_watermarks(scopes: Iterable[Scope]) -> list[tuple[str, str, datetime]]:
    """(cluster, source topic, watermark): the least, over these scopes, of what each
    knows. A stage's own watermark forwarded under its name (`<stage>:<source topic>`,
    R12.3) counts for its source topic: the gauge is per source topic, and its slowest
    path is its lag."""
    least: dict[tuple[str, str], datetime] = {}
    for scope in scopes:
        for cluster, name, at in scope.marks.known():
            key = (cluster, source_topic(name))
            known = least.get(key)
            least[key] = at if known is None else min(known, at)
    return sorted((cluster, topic, at) for (cluster, topic), at in least.items())
