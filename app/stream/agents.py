"""The Faust agents: decode, call the core fold, write what it returns. No rule lives here.

Stages (DESIGN.md), each partitioned by the key its state needs; re-keying goes through
Kafka topics:

    k8s.pods + k8s.events --(pod uid)--> pod stage  [table pods]  --> faults,
                                                                      attempt-facts (by attempt key)
    k8s.jobs --(job uid)--> route_job (stateless) ------------------> attempt-facts,
                                                                      gang-inputs (by JobSet)
    k8s.workloads --(workload uid)--> re-key -----------------------> gang-inputs
    attempt-facts --(attempt key)--> attempt stage [table attempts] -> classified-failures
    gang-inputs --(JobSet)--> gang stage [table gangs] -------------> gang-transitions

Delivery (at-least-once, SPEC R7.3, R11.1). For each input record, in order:
  0. check that it is the next offset of its partition (`Continuity`);
  1. decode; a bad record becomes a dead letter and processing goes on;
  2. if the key's table entry already reflects this record's position, skip it: it is a
     redelivery after a crash, and its outputs were written before its state was;
  3. fold, send every output, and wait until Kafka has acknowledged them all;
  4. only then write the new state (with the record's position) to the table.
A crash between 3 and 4 makes the redelivered record fold again from the same state,
and the folds are deterministic, so its outputs are repeated byte for byte. A crash
before 3 completes loses nothing: neither the state nor the offset moved.

Records sent to a re-key topic carry the position of the source record that caused
them (header `faultline-origin`), so the next stage recognises repeats the same way.
One agent per table: a fold's state is written after an `await`, so two agents folding
into one table could lose an update. That is why k8s.pods and k8s.events (both keyed by
pod uid, co-partitioned) feed one agent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import faust
import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from mode import CrashingSupervisor, Service

from app.core.attempt_stage import AttemptState, attempt_expired, fold_attempt
from app.core.emit import Emit
from app.core.gang import GangInput, GangStateData, fold_gang, gang_expired, gang_key
from app.core.job_facts import route_job
from app.core.pod_stage import PodState, fold_event, fold_pod, pod_state_expired
from app.core.rules import Rules
from app.model.decode import BadRecord, SourceObject, decode_source
from app.model.envelope import EVENTS, JOBS, PODS, SOURCE_TOPICS, WORKLOADS
from app.model.facts import ATTEMPT_FACTS, AttemptFact
from app.model.k8s import Event, Job, Pod, Workload
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, FAULTS, GANG_TRANSITIONS
from app.settings import Settings
from app.stream.codecs import ORIGIN_HEADER, Origin, Position, dead_letter, encode
from app.stream.tables import StateTable
from app.stream.topics import GANG_INPUTS

log = logging.getLogger("faultline.stream")

RAW: dict[str, Any] = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
REKEY_TOPICS = frozenset({ATTEMPT_FACTS, GANG_INPUTS})
OUTPUT_TOPICS = (FAULTS, CLASSIFIED_FAILURES, GANG_TRANSITIONS, DEAD_LETTER, ATTEMPT_FACTS, GANG_INPUTS)


class GangInputRecord(msgspec.Struct, frozen=True):
    """A `faultline.gang-inputs` value: a k8s.jobs (JobSet) or k8s.workloads source
    record, unchanged, re-keyed by its gang key."""

    source: str  # logical source topic
    envelope: msgspec.Raw


_ATTEMPT_FACT = msgspec.json.Decoder(AttemptFact)
_GANG_INPUT = msgspec.json.Decoder(GangInputRecord)


class DroppedRecords(RuntimeError):
    """Faust skipped records of a partition; the worker must stop and re-read them."""


class CommittedOffsets(Service):
    """The consumer group's committed offsets, read from Kafka (Faust's own view of them
    is filled in only after its start-up seek, which agents may already be past)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self._consumer: AIOKafkaConsumer | None = None
        self._starting = asyncio.Lock()

    async def on_stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    async def get(self, tp: Any) -> int | None:
        async with self._starting:  # several agents ask at once at start-up
            if self._consumer is None:
                consumer = AIOKafkaConsumer(
                    bootstrap_servers=self.settings.bootstrap.split(","), group_id=self.settings.app_id, enable_auto_commit=False
                )
                await consumer.start()
                self._consumer = consumer
        return await self._consumer.committed(TopicPartition(tp.topic, tp.partition))


class Continuity:
    """Each agent must see every offset of each input partition in order.

    Faust (0.15) can drop records it had already fetched and rely on a seek back to the
    committed offset to deliver them again (see `faust_fixes`, which closes the case seen
    here). Processing a later record first would record its position, and the dropped
    one, redelivered after a restart, would be skipped as already applied. So a hole
    stops the worker (the agents run under `CrashingSupervisor`); the restart re-reads
    from the last committed offset, which is never past an unprocessed record.
    """

    def __init__(self, app: faust.App, agent: str, committed: CommittedOffsets) -> None:
        self.app, self.agent, self.committed = app, agent, committed
        self.next: dict[Any, int] = {}
        self.generation: int | None = None

    async def check(self, message: faust.types.Message) -> None:
        if self.app.consumer_generation_id != self.generation:  # a rebalance: start over
            self.generation, self.next = self.app.consumer_generation_id, {}
        tp = message.tp
        expected = self.next.get(tp)
        if expected is None:  # the first record of this partition since (re)assignment
            committed = await self.committed.get(tp)
            earliest = (await self.app.consumer.earliest_offsets(tp)).get(tp) or 0
            # Records the broker deleted (retention) while nothing read them are no hole.
            expected = earliest if committed is None else max(committed, earliest)
        if message.offset > expected:
            log.error(
                "%s: records %s[%d] %d..%d were dropped before processing (a Faust fetch race); "
                "stopping so that a restart re-reads them from the committed offset",
                self.agent, tp.topic, tp.partition, expected, message.offset - 1,
            )
            raise DroppedRecords(f"{tp.topic}[{tp.partition}]: offsets {expected}..{message.offset - 1} never reached {self.agent}")
        self.next[tp] = max(expected, message.offset + 1)


class Stages:
    """Builds the topics, tables, agents and the expiry timer of one Faust app."""

    def __init__(self, app: faust.App, settings: Settings, rules: Rules) -> None:
        self.app, self.settings, self.rules = app, settings, rules
        self.counts: Counter[str] = Counter()
        self._logged: Counter[str] = Counter()
        self.committed = CommittedOffsets(settings)
        app.add_dependency(self.committed)
        self.logical = {settings.topic(name): name for name in (*SOURCE_TOPICS, *OUTPUT_TOPICS)}
        self.out = {name: app.topic(settings.topic(name), partitions=settings.partitions, **RAW) for name in OUTPUT_TOPICS}
        self.pods: StateTable[PodState] = StateTable(
            self._table("pods"), PodState, lambda state, now: pod_state_expired(state, now, rules)
        )
        self.attempts: StateTable[AttemptState] = StateTable(
            self._table("attempts"), AttemptState, lambda state, now: attempt_expired(state, now, rules)
        )
        self.gangs: StateTable[GangStateData] = StateTable(
            self._table("gangs"), GangStateData, lambda state, now: gang_expired(state, now, rules)
        )
        self._register()

    # --- wiring ----------------------------------------------------------------------------

    def _table(self, name: str) -> faust.Table:
        # bytes key and value types make Faust use the raw codec for the table and its changelog.
        return self.app.Table(name, default=None, partitions=self.settings.partitions, key_type=bytes, value_type=bytes)

    def _source(self, *logical: str) -> faust.TopicT:
        names = [self.settings.topic(name) for name in logical]
        return self.app.topic(*names, partitions=self.settings.partitions, **RAW)

    def _register(self) -> None:
        # An agent that raises (a send Kafka could not complete, a store error) must stop
        # the worker, not be restarted in place: Faust's default supervisor would restart
        # it on the *next* record, the failed one would be skipped later as "applied"
        # (its successor's position is newer) and its effect lost. Crashing the worker
        # makes the restart redeliver from the last committed offset (at-least-once).
        agent = partial(self.app.agent, supervisor_strategy=CrashingSupervisor)
        agent(self._source(PODS, EVENTS), name="pod_stage")(self._each("pod_stage", self.on_pod_record))
        agent(self._source(JOBS), name="job_router")(self._each("job_router", self.on_job_record))
        agent(self._source(WORKLOADS), name="workload_router")(self._each("workload_router", self.on_workload_record))
        agent(self._source(ATTEMPT_FACTS), name="attempt_stage")(self._each("attempt_stage", self.on_attempt_fact))
        agent(self._source(GANG_INPUTS), name="gang_stage")(self._each("gang_stage", self.on_gang_input))
        self.app.timer(self.settings.sweep_interval, name="faultline-expiry")(self.sweep)

        async def stats(view: Any, request: Any) -> Any:  # Faust binds a page function to its View
            return view.json(self.stats())

        self.app.page("/faultline/")(stats)

    def stats(self) -> dict[str, Any]:
        """GET /faultline/ on the worker's web port: counters and stream time per table partition."""
        tables = (self.pods, self.attempts, self.gangs)
        return {
            "app_id": self.settings.app_id,
            "rules_version": self.rules.version,
            "counts": dict(self.counts),
            "stream_time": {t.name: {str(p): at.isoformat() for p, at in sorted(t.stream_time.items())} for t in tables},
        }

    def _each(self, name: str, handle: Callable[[faust.types.Message], Any]) -> Callable[[faust.StreamT], Any]:
        continuity = Continuity(self.app, name, self.committed)

        async def agent(stream: faust.StreamT) -> None:
            # Sequential: the event is acked (its offset may be committed) only once
            # `handle` has returned, i.e. after its outputs and state are written.
            async for event in stream.events():
                await continuity.check(event.message)
                await handle(event.message)

        agent.__name__ = agent.__qualname__ = name  # Faust labels agents by function name
        return agent

    # --- the common steps --------------------------------------------------------------------

    async def _send(self, emits: list[Emit], origin: Origin) -> None:
        """Send every output and wait until Kafka acknowledged them all (step 3)."""
        pending = []
        for index, emit in enumerate(emits):
            headers = None
            if emit.topic in REKEY_TOPICS:
                tagged = Origin(origin.topic, origin.partition, Position(origin.position.offset, index))
                headers = [(ORIGIN_HEADER, tagged.header())]
            value = emit.value if isinstance(emit.value, bytes) else encode(emit.value)
            pending.append(await self.out[emit.topic].send(key=emit.key.encode(), value=value, headers=headers))
        if pending:
            await asyncio.gather(*pending)
        self.counts["outputs"] += len(emits)

    async def _dead_letter(self, message: faust.types.Message, reason: str) -> None:
        self.counts["dead_letters"] += 1
        letter = dead_letter(message.topic, message.key, message.partition, message.offset, reason, message.value)
        await self._send([Emit(DEAD_LETTER, letter.key or "", letter)], _origin_of(message))

    async def _decode(self, message: faust.types.Message) -> tuple[Any, SourceObject] | None:
        self.counts["records"] += 1
        try:
            return decode_source(self.logical[message.topic], message.value or b"")
        except BadRecord as exc:
            await self._dead_letter(message, str(exc))
            return None

    async def _fold(self, message: faust.types.Message, fold: Callable[[], tuple[Any, list[Emit]]]) -> tuple[Any, list[Emit]] | None:
        """Run a pure fold; a fold that raises is a bug, reported as a dead letter so the
        stream goes on (SPEC R11.1) and logged with its traceback."""
        try:
            return fold()
        except Exception as exc:  # noqa: BLE001 - any core failure must not stop the worker
            log.exception("fold failed on %s[%d]@%d", message.topic, message.partition, message.offset)
            await self._dead_letter(message, f"internal error: {type(exc).__name__}: {exc}")
            return None

    async def _fold_keyed(
        self,
        table: StateTable[Any],
        key: str,
        message: faust.types.Message,
        origin: Origin,
        fold: Callable[[Any], tuple[Any, list[Emit]]],
    ) -> None:
        entry = table.get(key)
        if entry is not None and entry.applied(origin):
            self.counts["redelivered"] += 1  # step 2: a repeat after a crash
            return
        result = await self._fold(message, lambda: fold(entry.state if entry is not None else None))
        if result is None:
            return
        state, emits = result
        await self._send(emits, origin)
        if state is not None:
            table.put(key, entry, message.partition, origin, state)

    # --- the agents' bodies -----------------------------------------------------------------

    async def on_pod_record(self, message: faust.types.Message) -> None:
        decoded = await self._decode(message)
        if decoded is None:
            return
        envelope, obj = decoded
        change, at, cluster, rules = envelope.type, envelope.observed_at, envelope.cluster, self.rules
        self.pods.advance(message.partition, at)
        if isinstance(obj, Pod):
            await self._fold_keyed(
                self.pods, obj.metadata.uid, message, _origin_of(message),
                lambda state: fold_pod(state, change, at, cluster, obj, rules),
            )
            return
        assert isinstance(obj, Event)
        regarding = obj.involved_object or obj.regarding
        uid = regarding.uid if regarding is not None else ""
        await self._fold_keyed(
            self.pods, uid, message, _origin_of(message),
            lambda state: fold_event(state, change, at, cluster, obj, rules),
        )

    async def on_job_record(self, message: faust.types.Message) -> None:
        decoded = await self._decode(message)
        if decoded is None:
            return
        envelope, job = decoded
        assert isinstance(job, Job)
        at, cluster = envelope.observed_at, envelope.cluster
        result = await self._fold(
            message, lambda: (None, route_job(envelope.type, at, cluster, job, self.rules) + self._gang_rekey(JOBS, cluster, job, message))
        )
        if result is not None:
            await self._send(result[1], _origin_of(message))

    async def on_workload_record(self, message: faust.types.Message) -> None:
        decoded = await self._decode(message)
        if decoded is None:
            return
        envelope, workload = decoded
        assert isinstance(workload, Workload)
        result = await self._fold(message, lambda: (None, self._gang_rekey(WORKLOADS, envelope.cluster, workload, message)))
        if result is not None:
            await self._send(result[1], _origin_of(message))

    async def on_attempt_fact(self, message: faust.types.Message) -> None:
        self.counts["facts"] += 1
        try:
            fact = _ATTEMPT_FACT.decode(message.value or b"")
        except msgspec.DecodeError as exc:
            await self._dead_letter(message, f"attempt fact: {exc}")
            return
        key = (message.key or b"").decode("utf-8", "replace")
        self.attempts.advance(message.partition, fact.observed_at)
        await self._fold_keyed(
            self.attempts, key, message, _upstream_origin(message),
            lambda state: fold_attempt(state, key, fact, self.rules),
        )

    # --- the gang stage (SPEC R9) --------------------------------------------------------------

    def _gang_rekey(self, source: str, cluster: str, obj: Job | Workload, message: faust.types.Message) -> list[Emit]:
        """A JobSet or its Workload, to the gang stage keyed by JobSet (as the offline
        Pipeline does, after route_job's facts)."""
        key = gang_key(cluster, obj)
        if key is None:
            return []
        return [Emit(GANG_INPUTS, key, encode(GangInputRecord(source, msgspec.Raw(message.value))))]

    async def on_gang_input(self, message: faust.types.Message) -> None:
        self.counts["gang_inputs"] += 1
        try:
            record = _GANG_INPUT.decode(message.value or b"")
            envelope, obj = decode_source(record.source, bytes(record.envelope))
        except (msgspec.DecodeError, BadRecord) as exc:
            await self._dead_letter(message, f"gang input: {exc}")
            return
        gang_input = GangInput(
            change=envelope.type,
            observed_at=envelope.observed_at,
            cluster=envelope.cluster,
            jobset=obj if isinstance(obj, Job) else None,
            workload=obj if isinstance(obj, Workload) else None,
        )
        key = (message.key or b"").decode("utf-8", "replace")
        self.gangs.advance(message.partition, envelope.observed_at)
        await self._fold_keyed(
            self.gangs, key, message, _upstream_origin(message),
            lambda state: fold_gang(state, gang_input, self.rules),
        )

    # --- expiry (SPEC R7.4) --------------------------------------------------------------------

    async def sweep(self) -> None:
        """Drop expired state, judged by each table partition's stream time; the timer
        only decides how often to look."""
        for table in (self.pods, self.attempts, self.gangs):
            self.counts[f"expired_{table.name}"] += table.sweep()
        if self.counts != self._logged:
            log.info("faultline: %s", " ".join(f"{k}={v}" for k, v in sorted(self.counts.items())))
            self._logged = Counter(self.counts)


def _origin_of(message: faust.types.Message) -> Origin:
    return Origin(message.topic, message.partition, Position(message.offset))


def _upstream_origin(message: faust.types.Message) -> Origin:
    """The source record a re-keyed record came from (its header), else its own position."""
    headers = message.headers or ()
    for name, value in headers.items() if isinstance(headers, Mapping) else headers:
        if name == ORIGIN_HEADER and value is not None:
            origin = Origin.from_header(bytes(value))
            if origin is not None:
                return origin
    return _origin_of(message)


