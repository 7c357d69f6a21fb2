"""Tracked objects into the attempt stage: a stateless map from a k8s.jobs record to its
facts, keyed by the attempt stage's key (SPEC R1, R6.1, R13.4); a JobSet goes to its
gang as well (R9)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from app.core.identity.attempt import job_attempts
from app.core.base.bounds import Trim
from app.core.base.clock import require_in_range
from app.core.base.emit import Emit, dropped
from app.core.stages.gangs import gang_input_of
from app.core.base.progress import Watermarks
from app.core.base.rules import Rules
from app.core.kinds import registry
from app.core.kinds.lws import DROPPED_GROUPS
from app.model.decode import TypedEnvelope
from app.model.envelope import ChangeType
from app.model.facts import ATTEMPT_FACTS, AttemptId, CrdFailure, JobFacts
from app.model.k8s import Job


def job_facts_of(
    change: ChangeType, observed_at: datetime, cluster: str, job: Job, attempt: AttemptId, trim: Trim, rules: Rules
) -> JobFacts:
    kind = registry.kind_of(job.api_version, job.kind)
    assert kind is not None  # a job of a kind faultline does not know has no attempt (attempt.job_attempts)
    failed = kind.failure(job)
    require_in_range((("the failed condition's lastTransitionTime", failed.at if failed else None),), rules)
    return JobFacts(
        cluster=cluster,
        namespace=job.metadata.namespace,
        name=job.metadata.name,
        uid=job.metadata.uid,
        kind=job.kind,
        observed_at=observed_at,
        attempt=attempt,
        restarts=job.status.restarts,
        counters=kind.counters(job),
        tries=job.status.failed or 0,
        ray_cluster_name=job.status.ray_cluster_name,
        created_at=job.metadata.creation_timestamp if kind.keys_outlive_objects else None,
        restart_policy=kind.restart_policy(job),
        failure=CrdFailure(trim.token(failed.code), trim.message(failed.message), failed.at) if failed else None,
        completed=kind.completed(job),
        deleted=change == "DELETED",
    )


def route_job(change: ChangeType, observed_at: datetime, cluster: str, job: Job, rules: Rules) -> list[Emit]:
    """A tracked object goes to its attempt, under the orchestrator's labels (R1) or as a
    workload attempt (R13); anything else has no attempt and is never classified."""
    trim = Trim(rules)
    routed, left_out = job_attempts(cluster, job, rules, trim)
    if not routed:
        return []
    facts = job_facts_of(change, observed_at, cluster, job, routed[0][1], trim, rules)
    emits = [Emit(ATTEMPT_FACTS, key, facts if attempt is routed[0][1] else msgspec.structs.replace(facts, attempt=attempt)) for key, attempt in routed]
    return [*emits, *trim.dropped(), *dropped(DROPPED_GROUPS, left_out)]


def route_job_record(_: None, __: str, envelope: TypedEnvelope[Job], rules: Rules, marks: Watermarks) -> tuple[None, list[Emit]]:
    """The jobs stage's fold for k8s.jobs: to the attempt (R1), and a JobSet to its gang (R9)."""
    change, at, cluster, job = envelope.type, envelope.observed_at, envelope.cluster, envelope.object
    emits = route_job(change, at, cluster, job, rules)
    join = next((e.key for e in emits if e.topic == ATTEMPT_FACTS), "")  # where its quota goes (R17)
    gang = gang_input_of(change, at, cluster, job, rules, join)
    if gang is not None:
        emits.append(gang)
    return None, emits
