"""Tracked CRDs into the attempt stage: a stateless map from a Job record to its facts,
keyed by attempt key (SPEC R1, R6.1); a JobSet goes to its gang as well (R9)."""

from __future__ import annotations

from datetime import datetime

from app.core.attempt import attempt_of
from app.core.bounds import Trim
from app.core.clock import require_in_range
from app.core.child_pods import TRACKED_GROUPS, TRACKED_KINDS
from app.core.emit import Emit
from app.core.gang import gang_input_of
from app.core.progress import Watermarks
from app.core.rules import Rules
from app.core.verdict import crd_failure_of, is_completed
from app.model.decode import TypedEnvelope
from app.model.envelope import ChangeType
from app.model.facts import ATTEMPT_FACTS, CrdFailure, JobFacts
from app.model.k8s import Job


def job_facts_of(change: ChangeType, observed_at: datetime, cluster: str, job: Job, trim: Trim, rules: Rules) -> JobFacts:
    failed = crd_failure_of(job)
    require_in_range((("the failed condition's lastTransitionTime", failed[1] if failed else None),), rules)
    return JobFacts(
        cluster=cluster,
        namespace=job.metadata.namespace,
        name=job.metadata.name,
        uid=job.metadata.uid,
        kind=job.kind,
        observed_at=observed_at,
        restarts=job.status.restarts,
        ray_cluster_name=job.status.ray_cluster_name,
        failure=CrdFailure(trim.token(failed[0].code), trim.message(failed[0].message), failed[1]) if failed else None,
        completed=is_completed(job),
        deleted=change == "DELETED",
    )


def route_job(change: ChangeType, observed_at: datetime, cluster: str, job: Job, rules: Rules) -> list[Emit]:
    """A tracked kind carrying all four attempt labels goes to its attempt; anything
    else has no attempt and is never classified (R1)."""
    if job.kind not in TRACKED_KINDS or job.api_version.partition("/")[0] not in TRACKED_GROUPS:
        return []
    attempt = attempt_of(cluster, job.metadata.namespace, job.metadata.labels, rules)
    if attempt is None:
        return []
    trim = Trim(rules)
    return [Emit(ATTEMPT_FACTS, attempt.key, job_facts_of(change, observed_at, cluster, job, trim, rules)), *trim.dropped()]


def route_job_record(_: None, __: str, envelope: TypedEnvelope[Job], rules: Rules, marks: Watermarks) -> tuple[None, list[Emit]]:
    """The jobs stage's fold for k8s.jobs: to the attempt (R1), and a JobSet to its gang (R9)."""
    change, at, cluster, job = envelope.type, envelope.observed_at, envelope.cluster, envelope.object
    emits = route_job(change, at, cluster, job, rules)
    gang = gang_input_of(change, at, cluster, job)
    if gang is not None:
        emits.append(gang)
    return None, emits
