"""The Faust agents: decode, call the core fold, write what it returns. No rule lives here.

Stages (DESIGN.md), each partitioned by the key its state needs; re-keying goes through
Kafka topics:

    k8s.pods + k8s.events --(pod uid)--> pod stage  [table pods]  --> faults,
                                                                      attempt-facts (by attempt key)
    k8s.jobs --(job uid)--> route_job (stateless) ------------------> attempt-facts,
                                                                      gang-inputs (by JobSet)
    k8s.workloads --(workload uid)--> re-key (same agent) ----------> gang-inputs
    attempt-facts --(attempt key)--> attempt stage [table attempts] -> classified-failures
    gang-inputs --(JobSet)--> gang stage [table gangs] -------------> gang-transitions

Delivery (batches, at-least-once, redelivery recognised by position, one agent per
table): delivery.py. That is why k8s.pods and k8s.events (both keyed by pod uid,
co-partitioned) feed one agent.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import faust
import msgspec

from app.core.attempt_stage import AttemptState, attempt_expired, fold_attempt
from app.core.emit import Emit
from app.core.gang import GangInput, GangStateData, fold_gang, gang_expired, gang_key
from app.core.job_facts import route_job
from app.core.pod_stage import PodState, fold_event, fold_pod, pod_state_expired
from app.core.rules import Rules
from app.model.decode import BadRecord, SourceObject, decode_source
from app.model.envelope import EVENTS, JOBS, PODS, WORKLOADS
from app.model.facts import ATTEMPT_FACTS, AttemptFact
from app.model.k8s import Event, Job, Pod, Workload
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, FAULTS, GANG_TRANSITIONS
from app.settings import Settings
from app.stream.codecs import encode
from app.stream.delivery import Batch, Delivery, origin_of, upstream_origin
from app.stream.tables import StateTable
from app.kafka.topics import GANG_INPUTS

log = logging.getLogger("faultline.stream")

REKEY_TOPICS = frozenset({ATTEMPT_FACTS, GANG_INPUTS})
OUTPUT_TOPICS = (FAULTS, CLASSIFIED_FAILURES, GANG_TRANSITIONS, DEAD_LETTER, ATTEMPT_FACTS, GANG_INPUTS)


class GangInputRecord(msgspec.Struct, frozen=True):
    """A `faultline.gang-inputs` value: a k8s.jobs (JobSet) or k8s.workloads source
    record, unchanged, re-keyed by its gang key."""

    source: str  # logical source topic
    envelope: msgspec.Raw


_ATTEMPT_FACT = msgspec.json.Decoder(AttemptFact)
_GANG_INPUT = msgspec.json.Decoder(GangInputRecord)


class Stages:
    """Builds the topics, tables, agents and the expiry timer of one Faust app."""

    def __init__(self, app: faust.App, settings: Settings, rules: Rules) -> None:
        self.app, self.settings, self.rules = app, settings, rules
        self.delivery = Delivery(app, settings)
        for name in OUTPUT_TOPICS:
            self.delivery.output(name, rekey=name in REKEY_TOPICS)
        self.counts = self.delivery.counts
        self._logged: Counter[str] = Counter()
        table = self.delivery.table
        self.pods: StateTable[PodState] = StateTable(
            table("pods"), PodState, lambda state, now: pod_state_expired(state, now, rules)
        )
        self.attempts: StateTable[AttemptState] = StateTable(
            table("attempts"), AttemptState, lambda state, now: attempt_expired(state, now, rules)
        )
        self.gangs: StateTable[GangStateData] = StateTable(
            table("gangs"), GangStateData, lambda state, now: gang_expired(state, now, rules)
        )
        self._register()

    # --- wiring ----------------------------------------------------------------------------

    def _register(self) -> None:
        d = self.delivery
        d.register(d.source(PODS, EVENTS), "pod_stage", self.on_pod_record, self.pods)
        # JobSets and Workloads through one agent: both reach the gang stage in the order one
        # fetch loop interleaves them. Two agents, each at its own speed, let k8s.jobs run
        # ahead of k8s.workloads, and a suspended JobSet seen twice with no Workload yet
        # ends its gang (R9.7, gang.py: "no Workload ever seen").
        d.register(d.source(JOBS, WORKLOADS), "job_router", self.on_job_or_workload)
        d.register(d.source(ATTEMPT_FACTS), "attempt_stage", self.on_attempt_fact, self.attempts)
        d.register(d.source(GANG_INPUTS), "gang_stage", self.on_gang_input, self.gangs)
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

    # --- the common step --------------------------------------------------------------------

    async def _decode(self, message: faust.types.Message, batch: Batch) -> tuple[Any, SourceObject] | None:
        self.counts["records"] += 1
        try:
            return decode_source(self.delivery.logical[message.topic], message.value or b"")
        except BadRecord as exc:
            await self.delivery.dead_letter(message, str(exc), batch)
            return None

    # --- the agents' bodies -----------------------------------------------------------------

    async def on_pod_record(self, message: faust.types.Message, batch: Batch) -> None:
        decoded = await self._decode(message, batch)
        if decoded is None:
            return
        envelope, obj = decoded
        change, at, cluster, rules = envelope.type, envelope.observed_at, envelope.cluster, self.rules
        self.pods.advance(message.partition, at)
        if isinstance(obj, Pod):
            await self.delivery.fold_keyed(
                self.pods, obj.metadata.uid, message, origin_of(message),
                lambda state: fold_pod(state, change, at, cluster, obj, rules), batch,
            )
            return
        assert isinstance(obj, Event)
        regarding = obj.involved_object or obj.regarding
        uid = regarding.uid if regarding is not None else ""
        await self.delivery.fold_keyed(
            self.pods, uid, message, origin_of(message),
            lambda state: fold_event(state, change, at, cluster, obj, rules), batch,
        )

    async def on_job_or_workload(self, message: faust.types.Message, batch: Batch) -> None:
        if self.delivery.logical[message.topic] == JOBS:
            await self.on_job_record(message, batch)
        else:
            await self.on_workload_record(message, batch)

    async def on_job_record(self, message: faust.types.Message, batch: Batch) -> None:
        decoded = await self._decode(message, batch)
        if decoded is None:
            return
        envelope, job = decoded
        assert isinstance(job, Job)
        at, cluster = envelope.observed_at, envelope.cluster
        result = await self.delivery.fold(
            message,
            lambda: (None, route_job(envelope.type, at, cluster, job, self.rules) + self._gang_rekey(JOBS, cluster, job, message)),
            batch,
        )
        if result is not None:
            await self.delivery.send(result[1], origin_of(message), batch)

    async def on_workload_record(self, message: faust.types.Message, batch: Batch) -> None:
        decoded = await self._decode(message, batch)
        if decoded is None:
            return
        envelope, workload = decoded
        assert isinstance(workload, Workload)
        result = await self.delivery.fold(message, lambda: (None, self._gang_rekey(WORKLOADS, envelope.cluster, workload, message)), batch)
        if result is not None:
            await self.delivery.send(result[1], origin_of(message), batch)

    async def on_attempt_fact(self, message: faust.types.Message, batch: Batch) -> None:
        self.counts["facts"] += 1
        try:
            fact = _ATTEMPT_FACT.decode(message.value or b"")
        except msgspec.DecodeError as exc:
            await self.delivery.dead_letter(message, f"attempt fact: {exc}", batch)
            return
        key = (message.key or b"").decode("utf-8", "replace")
        self.attempts.advance(message.partition, fact.observed_at)
        await self.delivery.fold_keyed(
            self.attempts, key, message, upstream_origin(message),
            lambda state: fold_attempt(state, key, fact, self.rules), batch,
        )

    # --- the gang stage (SPEC R9) --------------------------------------------------------------

    def _gang_rekey(self, source: str, cluster: str, obj: Job | Workload, message: faust.types.Message) -> list[Emit]:
        """A JobSet or its Workload, to the gang stage keyed by JobSet (as the offline
        Pipeline does, after route_job's facts)."""
        key = gang_key(cluster, obj)
        if key is None:
            return []
        return [Emit(GANG_INPUTS, key, encode(GangInputRecord(source, msgspec.Raw(message.value))))]

    async def on_gang_input(self, message: faust.types.Message, batch: Batch) -> None:
        self.counts["gang_inputs"] += 1
        try:
            record = _GANG_INPUT.decode(message.value or b"")
            envelope, obj = decode_source(record.source, bytes(record.envelope))
        except (msgspec.DecodeError, BadRecord) as exc:
            await self.delivery.dead_letter(message, f"gang input: {exc}", batch)
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
        await self.delivery.fold_keyed(
            self.gangs, key, message, upstream_origin(message),
            lambda state: fold_gang(state, gang_input, self.rules), batch,
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
