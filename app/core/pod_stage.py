"""Stage 1, keyed by pod uid: join each pod to the fault Events that name it.

It forwards the pod's slim facts with its trusted faults to the attempt stage (keyed by
attempt key) whenever they change, and publishes every trusted fault (SPEC R2.6).
A fault Event that arrives before its pod is held here until the pod is known (R7.1).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from app.core import xid
from app.core.attempt import attempt_of, is_child_pod
from app.core.child_pods import SELECTOR_LABELS, declared_primary
from app.core.emit import Emit
from app.core.fault_events import FaultEvent, fault_event_of, is_trusted, merge_updates
from app.core.rules import Rules
from app.model.envelope import ChangeType
from app.model.facts import ATTEMPT_FACTS, AttributedFault, ContainerFacts, PodFacts
from app.model.k8s import Event, Pod
from app.model.records import FAULTS, Fault, GpuFault, PodRef


class PodState(msgspec.Struct):
    uid: str
    cluster: str
    last_activity: datetime
    pod: PodFacts | None = None  # the latest pod view, without faults
    faults: dict[str, FaultEvent] = {}  # every fault Event naming this uid, by event uid


# --- building the slim view --------------------------------------------------------------


def _containers(pod: Pod) -> tuple[ContainerFacts, ...]:
    statuses = {s.name: s for s in pod.status.container_statuses}
    names = [c.name for c in pod.spec.containers]
    names += [name for name in statuses if name not in names]
    facts = []
    for name in names:
        status = statuses.get(name)
        terminated = status.state.terminated if status is not None else None
        if terminated is None:
            facts.append(ContainerFacts(name=name, reported=status is not None))
            continue
        facts.append(
            ContainerFacts(
                name=name,
                reported=True,
                terminated=True,
                exit_code=terminated.exit_code,
                reason=terminated.reason,
                message=terminated.message,
                finished_at=terminated.finished_at,
            )
        )
    return tuple(facts)


def pod_facts_of(
    change: ChangeType, observed_at: datetime, cluster: str, pod: Pod, previous: PodFacts | None, rules: Rules
) -> PodFacts:
    meta = pod.metadata
    read = (rules.labels.managed, rules.labels.run, rules.labels.action, rules.labels.attempt, *SELECTOR_LABELS)
    failed_at = previous.failed_observed_at if previous is not None else None
    if failed_at is None and pod.status.phase == "Failed":
        failed_at = observed_at  # R5.2: the record that first showed Failed
    return PodFacts(
        cluster=cluster,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        observed_at=observed_at,
        labels={k: meta.labels[k] for k in read if k in meta.labels},
        is_child=is_child_pod(meta.labels, rules),
        primary_container=declared_primary(meta.annotations),
        containers=_containers(pod),
        phase=pod.status.phase,
        reason=pod.status.reason,
        message=pod.status.message,
        node_name=pod.spec.node_name,
        created_at=meta.creation_timestamp,
        deletion_timestamp=meta.deletion_timestamp,
        failed_observed_at=failed_at,
        deleted=change == "DELETED" or (previous is not None and previous.deleted),
    )


def gpu_fault_of(event: FaultEvent, pod_name: str) -> GpuFault:
    parsed = event.parsed
    return GpuFault(
        kind=parsed.kind,
        code=parsed.code,
        name=xid.fault_name(parsed.kind, parsed.code),
        severity=parsed.severity,
        gpu_uuid=parsed.gpu_uuid,
        gpu_index=parsed.gpu_index,
        pci_bus_id=parsed.pci_bus_id,
        node=parsed.node,
        pid=parsed.pid,
        process=parsed.process,
        first_seen=event.first_seen,
        last_seen=event.last_seen,
        count=event.count,
        pod=PodRef(name=pod_name, uid=event.pod_uid),
    )


# --- the derived view and what changed -------------------------------------------------


def _trusted(state: PodState, rules: Rules) -> tuple[AttributedFault, ...]:
    pod = state.pod
    if pod is None:
        return ()  # held until the pod is known
    return tuple(
        AttributedFault(event_uid=uid, fault=gpu_fault_of(event, pod.name))
        for uid, event in sorted(state.faults.items())
        if is_trusted(event, pod.uid, pod.node_name, rules.node_trust)
    )


def _derived(state: PodState | None, rules: Rules) -> PodFacts | None:
    if state is None or state.pod is None:
        return None
    return msgspec.structs.replace(state.pod, faults=_trusted(state, rules))


def _same_apart_from_time(a: PodFacts | None, b: PodFacts) -> bool:
    return a is not None and msgspec.structs.replace(a, observed_at=b.observed_at) == b


def _changes(before: PodFacts | None, after: PodFacts | None, rules: Rules) -> list[Emit]:
    if after is None or _same_apart_from_time(before, after):
        return []
    attempt = attempt_of(after.cluster, after.namespace, after.labels, rules)
    emits: list[Emit] = []
    old = {f.event_uid: f for f in before.faults} if before is not None else {}
    for attributed in after.faults:
        if old.get(attributed.event_uid) == attributed and before is not None and before.labels == after.labels:
            continue
        key = f"{after.cluster}/{attributed.event_uid}"
        emits.append(
            Emit(
                FAULTS,
                key,
                Fault(
                    key=key,
                    cluster=after.cluster,
                    namespace=after.namespace,
                    event_uid=attributed.event_uid,
                    attempt=attempt.key if attempt is not None else None,
                    fault=attributed.fault,
                    rules_version=rules.version,
                ),
            )
        )
    if attempt is not None:
        emits.append(Emit(ATTEMPT_FACTS, attempt.key, after))
    return emits


# --- the folds ---------------------------------------------------------------------------


def fold_pod(
    state: PodState | None, change: ChangeType, observed_at: datetime, cluster: str, pod: Pod, rules: Rules
) -> tuple[PodState | None, list[Emit]]:
    uid = pod.metadata.uid
    if not uid:
        return state, []
    before = _derived(state, rules)
    previous = state.pod if state is not None else None
    facts = pod_facts_of(change, observed_at, cluster, pod, previous, rules)
    if state is None:
        state = PodState(uid=uid, cluster=cluster, last_activity=observed_at)
    state.pod = facts
    state.last_activity = max(state.last_activity, observed_at)
    return state, _changes(before, _derived(state, rules), rules)


def fold_event(
    state: PodState | None, change: ChangeType, observed_at: datetime, cluster: str, event: Event, rules: Rules
) -> tuple[PodState | None, list[Emit]]:
    # A deleted Event (its TTL ran out) still happened: the log keeps the fault.
    fault = fault_event_of(event)
    if fault is None:
        return state, []
    before = _derived(state, rules)
    if state is None:
        state = PodState(uid=fault.pod_uid, cluster=cluster, last_activity=observed_at)
    known = state.faults.get(fault.event_uid)
    state.faults = {**state.faults, fault.event_uid: merge_updates(known, fault) if known else fault}
    state.last_activity = max(state.last_activity, observed_at)
    return state, _changes(before, _derived(state, rules), rules)


def pod_state_expired(state: PodState, stream_time: datetime, rules: Rules) -> bool:
    """R7.4: drop a pod once it is gone (deleted or finished) or was never seen, and the
    retention has passed in stream time since anything happened to it."""
    pod = state.pod
    finished = pod is None or pod.deleted or pod.phase in ("Succeeded", "Failed")
    return finished and stream_time - state.last_activity >= rules.retention
