"""All stages in one process: the same folds the Faust agents run, with in-memory state.

Records from stage 1 to stage 2 (the re-key topic in the streaming path) are handed over
at once, depth first, so one input's outputs are written before the next input is read:
the same input order always gives the same output bytes (SPEC R7.3).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from app.core.attempt_stage import AttemptState, attempt_expired, fold_attempt
from app.core.emit import Emit
from app.core.gang import GangInput, GangStateData, fold_gang, gang_expired, gang_key
from app.core.job_facts import route_job
from app.core.pod_stage import PodState, fold_event, fold_pod, pod_state_expired
from app.core.rules import DEFAULT_RULES, Rules
from app.model.decode import BadRecord, TypedEnvelope, decode_source
from app.model.envelope import EVENTS, JOBS, PODS, WORKLOADS
from app.model.facts import ATTEMPT_FACTS
from app.model.records import DEAD_LETTER, DeadLetter

# How often, in stream time, expired state is swept (R7.4): every quarter of the
# retention, so state outlives its retention by at most that much and sweeps cost little.
SWEEPS_PER_RETENTION = 4
_DAWN = datetime.min.replace(tzinfo=timezone.utc)


class Pipeline:
    def __init__(self, rules: Rules = DEFAULT_RULES) -> None:
        self.rules = rules
        self.pods: dict[str, PodState] = {}
        self.attempts: dict[str, AttemptState] = {}
        self.gangs: dict[str, GangStateData] = {}
        self.stream_time = _DAWN
        self._next_sweep: datetime | None = None
        self.counts: Counter[str] = Counter()
        self._stage1 = {PODS: self._pod, EVENTS: self._event, JOBS: self._job, WORKLOADS: self._workload}

    def feed(self, topic: str, key: str | None, value: bytes, offset: int | None = None, partition: int | None = None) -> list[Emit]:
        """One source record in, every output record it causes out (dead letters included)."""
        try:
            envelope, _ = decode_source(topic, value)
        except BadRecord as exc:
            self.counts["records"] += 1
            self.counts["dead_letters"] += 1
            letter = DeadLetter(
                topic=topic, key=key, partition=partition, offset=offset, reason=str(exc), value=value.decode("utf-8", "replace")
            )
            return [Emit(DEAD_LETTER, key or "", letter)]
        return self.feed_decoded(topic, envelope)

    def feed_decoded(self, topic: str, envelope: TypedEnvelope) -> list[Emit]:
        """One source record already decoded (see `decode_source`)."""
        self.counts["records"] += 1
        emits = self._stage1[topic](envelope)
        if envelope.observed_at > self.stream_time:
            self._advance(envelope.observed_at)
        return self._through_attempts(emits) if emits else emits

    # --- stage 1, one fold per source topic ---------------------------------------------

    def _pod(self, envelope: TypedEnvelope) -> list[Emit]:
        pod = envelope.object
        uid = pod.metadata.uid
        self.pods[uid], emits = fold_pod(self.pods.get(uid), envelope.type, envelope.observed_at, envelope.cluster, pod, self.rules)
        return emits

    def _event(self, envelope: TypedEnvelope) -> list[Emit]:
        event = envelope.object
        regarding = event.involved_object or event.regarding
        uid = regarding.uid if regarding is not None else ""
        state, emits = fold_event(self.pods.get(uid), envelope.type, envelope.observed_at, envelope.cluster, event, self.rules)
        if state is not None:
            self.pods[uid] = state
        return emits

    def _job(self, envelope: TypedEnvelope) -> list[Emit]:
        job = envelope.object
        emits = route_job(envelope.type, envelope.observed_at, envelope.cluster, job, self.rules)
        gang = gang_key(envelope.cluster, job)
        if gang is not None:
            emits += self._gang(gang, GangInput(envelope.type, envelope.observed_at, envelope.cluster, jobset=job))
        return emits

    def _workload(self, envelope: TypedEnvelope) -> list[Emit]:
        gang = gang_key(envelope.cluster, envelope.object)
        if gang is None:
            return []  # a Workload of something other than a JobSet
        return self._gang(gang, GangInput(envelope.type, envelope.observed_at, envelope.cluster, workload=envelope.object))

    def _gang(self, key: str, record: GangInput) -> list[Emit]:
        """The gang stage (R9), keyed by JobSet; in Kafka its input is a re-key topic."""
        state, emits = fold_gang(self.gangs.get(key), record, self.rules)
        if state is not None:
            self.gangs[key] = state
        return emits

    # --- stage 2 ---------------------------------------------------------------------------

    def _through_attempts(self, emits: list[Emit]) -> list[Emit]:
        out: list[Emit] = []
        for emit in emits:
            if emit.topic != ATTEMPT_FACTS:
                out.append(emit)
                continue
            self.attempts[emit.key], verdicts = fold_attempt(self.attempts.get(emit.key), emit.key, emit.value, self.rules)
            out.extend(verdicts)
        return out

    # --- expiry ----------------------------------------------------------------------------

    def _advance(self, at: datetime) -> None:
        """Stream time is the latest record time seen; it drives expiry (R7.4)."""
        self.stream_time = at
        every = self.rules.retention / SWEEPS_PER_RETENTION
        if self._next_sweep is None:
            self._next_sweep = at + every
        if at < self._next_sweep:
            return
        self._next_sweep = at + every
        rules = self.rules
        for uid in [u for u, s in self.pods.items() if pod_state_expired(s, at, rules)]:
            del self.pods[uid]
        for key in [k for k, s in self.attempts.items() if attempt_expired(s, at, rules)]:
            del self.attempts[key]
        for key in [k for k, s in self.gangs.items() if gang_expired(s, at, rules)]:
            del self.gangs[key]
