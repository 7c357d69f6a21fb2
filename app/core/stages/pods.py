"""Stage 1, keyed by pod uid: join each pod to the fault Events that name it, to the
devices its own status reports Unhealthy or Unknown (SPEC R14.2), and to the Events that
say Kueue's failure recovery force-deleted it (R16.6: disruption evidence, not a fault).

It forwards the pod's slim facts with its trusted faults to the attempt stage (keyed by
attempt key) whenever they change, and publishes every trusted fault (SPEC R2.6).
A fault Event that arrives before its pod is held here until the pod is known (R7.1).
"""

from __future__ import annotations

import zlib
from datetime import datetime

import msgspec

from app.core.identity.attempt import is_child_pod, pod_route
from app.core.base.bounds import Trim
from app.core.verdicts.child_pods import declared_primary
from app.core.base.clock import after, require_in_range
from app.core.evidence.device_health import (
    DROPPED_DEVICE_HEALTH,
    DeviceSeen,
    device_fault,
    device_fault_id,
    devices_shown,
    is_showing,
    kept_devices,
    merged,
)
from app.core.base.emit import Emit, dropped
from app.core.evidence.fault_events import DROPPED_FAULTS, FaultEvent, fault_event_of, is_trusted, kept_faults, merge_updates
from app.core.evidence.fault_message import trimmed
from app.core.evidence.force_deletion import (
    DROPPED_EVENTS,
    ForceDeletionEvent,
    force_deletion,
    force_deletion_event_of,
    is_trusted as is_trusted_deletion,
    kept_events,
    may_be_trusted,
    shown_since,
)
from app.core.stages.fleet_inputs import fault_changes, gpu_id
from app.core.verdicts.gpu_time import gpus_requested, started_at_of
from app.core.base.progress import Watermarks
from app.core.base.rules import Rules
from app.core.kinds import registry
from app.core.kinds.base import controller_of, requests_gpu
from app.core.base.xid import XidTable
from app.model.decode import TypedEnvelope
from app.model.envelope import ChangeType
from app.model.facts import ATTEMPT_FACTS, AttributedFault, ContainerFacts, PodDisruption, PodFacts
from app.model.k8s import ContainerStatus, Event, Pod
from app.model.records import DEVICE_HEALTH, FAULTS, Fault, GpuFault, PodRef

# R14.1: the pod condition a disruption is written as (kubernetes/api core/v1/types.go DisruptionTarget).
DISRUPTION_TARGET = "DisruptionTarget"


# R11.5: the GPUs one pod's faults are counted for in the fleet, each its own key (a pod
# runs on one node, which has 4 to 16): a fault naming yet another — a forged Event's
# message, each naming a new GPU — counts for the node only, and is counted as dropped.
GPUS_PER_POD = 32
DROPPED_GPU_NAMES = "dropped_gpu_names"


class PodState(msgspec.Struct, frozen=True):
    """One pod's state. Folds never change a state in place: they return a new one, so a
    fold that raises half way leaves the stored state as it was (the drivers' policy)."""

    uid: str
    cluster: str
    last_activity: datetime
    pod: PodFacts | None = None  # the latest pod view with its trusted faults, as forwarded
    seen: int = -1  # digest of the last pod record read, to skip records that change nothing
    # The fault Events naming this uid that can still be trusted, by event uid (at most
    # `max_faults_per_pod`, SPEC R11.5).
    faults: dict[str, FaultEvent] = {}
    # R14.2: the devices its records showed Unhealthy or Unknown, by resourceID (at most
    # `max_faults_per_pod`, R11.5).
    devices: dict[str, DeviceSeen] = {}
    # R16.6: the Events naming this uid that say Kueue force-deleted it and can still be
    # trusted, by event uid (at most force_deletion.EVENTS_KEPT, the earliest).
    force_deletions: dict[str, ForceDeletionEvent] = {}
    # The GPUs its faults were counted for in the fleet, first named first (at most GPUS_PER_POD).
    gpus: tuple[str, ...] = ()


def pod_key(cluster: str, uid: str) -> str:
    """The pod stage's key: the cluster with the pod uid (uids are unique per cluster
    only: a cluster restored from another's etcd snapshot repeats them)."""
    return f"{cluster}/{uid}"


def uid_named_by(event: Event) -> str:
    """The uid of the object an Event is about (core/v1 involvedObject, events.k8s.io/v1
    regarding); "" when it names none."""
    regarding = event.involved_object or event.regarding
    return regarding.uid if regarding is not None else ""


# --- building the slim view --------------------------------------------------------------


def _container_facts(name: str, status: ContainerStatus | None, trim: Trim) -> ContainerFacts:
    terminated = status.state.terminated if status is not None else None
    before = status.last_state.terminated if status is not None else None
    if before is not None:  # restarted (R16.2, R16.3): how its previous run ended
        last = (before.finished_at, before.exit_code, trim.token(before.reason), trim.message(before.message))
    else:
        last = (None, 0, "", "")
    restarted_at, last_exit_code, last_reason, last_message = last
    if terminated is None:
        return ContainerFacts(
            name=name,
            reported=status is not None,
            restarted_at=restarted_at,
            last_exit_code=last_exit_code,
            last_reason=last_reason,
            last_message=last_message,
        )
    return ContainerFacts(
        name=name,
        reported=True,
        terminated=True,
        exit_code=terminated.exit_code,
        reason=trim.token(terminated.reason),
        message=trim.message(terminated.message),
        finished_at=terminated.finished_at,
        restarted_at=restarted_at,
        last_exit_code=last_exit_code,
        last_reason=last_reason,
        last_message=last_message,
    )


def _containers(pod: Pod, trim: Trim) -> tuple[ContainerFacts, ...]:
    """Regular containers in spec order, each with its current status (if reported)."""
    specs, statuses = pod.spec.containers, pod.status.container_statuses
    if len(specs) == len(statuses):
        for spec, status in zip(specs, statuses):
            if spec.name != status.name:
                break
        else:  # the usual shape (loops, not generators: this runs for every pod record that changed)
            return tuple([_container_facts(s.name, s, trim) for s in statuses])
    by_name = {s.name: s for s in statuses}
    names = [c.name for c in specs]
    names += [name for name in by_name if name not in names]
    return tuple(_container_facts(name, by_name.get(name), trim) for name in names)


def pod_facts_of(
    change: ChangeType, observed_at: datetime, cluster: str, pod: Pod, previous: PodFacts | None, rules: Rules, trim: Trim
) -> PodFacts:
    meta = pod.metadata
    labels = meta.labels
    controller = controller_of(meta, trim)
    failed_at = previous.failed_observed_at if previous is not None else None
    if failed_at is None and pod.status.phase == "Failed":
        failed_at = observed_at  # R5.2: the record that first showed Failed
    known_deleted = previous.force_deleted if previous is not None else None
    shown_deleted = shown_since(pod, observed_at)  # R16.6
    return PodFacts(
        cluster=cluster,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        observed_at=previous.observed_at if previous is not None else observed_at,
        labels=_labels_read(labels, rules),
        is_child=is_child_pod(labels, rules),
        controlled=controller is not None,
        owner=registry.joined_by_owner(controller),
        requests_gpu=requests_gpu(pod.spec, rules),
        primary_container=declared_primary(meta.annotations),
        containers=_containers(pod, trim),
        phase=pod.status.phase,
        reason=trim.token(pod.status.reason),
        message=trim.message(pod.status.message),
        node_name=pod.spec.node_name,
        created_at=meta.creation_timestamp,
        deletion_timestamp=meta.deletion_timestamp,
        failed_observed_at=failed_at,
        deleted=change == "DELETED" or (previous is not None and previous.deleted),
        disruption=disruption_of(pod, observed_at, previous.disruption if previous is not None else None, trim),
        force_deleted=force_deletion(known_deleted, shown_deleted, []) if shown_deleted is not None else known_deleted,
        gpus=gpus_requested(pod.spec, rules, previous.gpus if previous is not None else 0),  # issue 30 (gpu_time.py)
        started_at=started_at_of(pod, observed_at, previous.started_at if previous is not None else None),
    )


def disruption_of(pod: Pod, observed_at: datetime, known: PodDisruption | None, trim: Trim) -> PodDisruption | None:
    """R14.1: the pod's DisruptionTarget condition with status True, as this record shows
    it. Its time is the lastTransitionTime capped by the observed_at of the first record
    that showed this transition (R2.7c), so later records of it keep that time."""
    for condition in pod.status.conditions:  # a loop, not next(): this runs for every pod record that changed
        if condition.type == DISRUPTION_TARGET and condition.status == "True":
            break
    else:
        return None
    reason, message, written = trim.token(condition.reason), trim.message(condition.message), condition.last_transition_time
    if known is not None and (known.reason, known.written) == (reason, written):
        return known if known.message == message else msgspec.structs.replace(known, message=message)
    return PodDisruption(reason, message, written, min(written, observed_at) if written is not None else observed_at)


def _labels_read(labels: dict[str, str], rules: Rules) -> dict[str, str]:
    """Only the labels the rules read (R1, R4.2, R13.4): the rest may be many, and long."""
    if not labels:
        return {}
    return {k: labels[k] for k in registry.pod_labels_read(rules.labels) if k in labels}


def gpu_fault_of(event: FaultEvent, pod_name: str, node: str, table: XidTable) -> GpuFault:
    """R2.7b: the fault's node is the pod's (the node it was trusted from), never the
    `node=` token of the message: the message is the reporter's words."""
    parsed = event.parsed
    return GpuFault(
        kind=parsed.kind,
        code=parsed.code,
        name=table.name(parsed.kind, parsed.code),
        severity=parsed.severity,
        gpu_uuid=parsed.gpu_uuid,
        gpu_index=parsed.gpu_index,
        pci_bus_id=parsed.pci_bus_id,
        node=node,
        pid=parsed.pid,
        process=parsed.process,
        first_seen=event.first_seen,
        last_seen=event.last_seen,
        count=event.count,
        pod=PodRef(name=pod_name, uid=event.pod_uid),
        action=table.action(parsed.kind, parsed.code),  # R14.3: advice, never the verdict
    )


def fault_record(cluster: str, namespace: str, attributed: AttributedFault, attempt: str | None, rules_version: str) -> Fault:
    """A `faultline.faults` record (R2.6, R14.2): keyed `<cluster>/<event uid>`, or
    `<cluster>/<pod uid>/<resourceID>` for a device no Event recorded."""
    device = attributed.fault.kind == DEVICE_HEALTH
    key = f"{cluster}/{attributed.event_uid}"
    return Fault(key, cluster, namespace, None if device else attributed.event_uid, attempt, attributed.fault, rules_version)


# --- the forwarded view and what changed ------------------------------------------------


def _trusted(facts: PodFacts, faults: dict[str, FaultEvent], devices: dict[str, DeviceSeen], rules: Rules) -> tuple[AttributedFault, ...]:
    events = tuple(
        AttributedFault(event_uid=uid, fault=gpu_fault_of(event, facts.name, facts.node_name, rules.xid))
        for uid, event in sorted(faults.items())
        if is_trusted(event, facts.uid, facts.namespace, facts.node_name, rules)
    )
    if not devices:
        return events
    # R14.2: the kubelet's word, trusted as the API server's (no node or reporter check).
    return events + tuple(
        AttributedFault(device_fault_id(facts.uid, rid), device_fault(rid, seen, facts.name, facts.uid, facts.node_name, rules))
        for rid, seen in sorted(devices.items())
    )


def _with_force_deletions(facts: PodFacts, events: dict[str, ForceDeletionEvent]) -> PodFacts:
    """R16.6: the pod's force deletion dated by its trusted Events too (the earliest time)."""
    if not events:
        return facts
    deleted = force_deletion(facts.force_deleted, None, list(events.values()))
    return facts if deleted == facts.force_deleted else msgspec.structs.replace(facts, force_deleted=deleted)


def _with_faults(facts: PodFacts, faults: dict[str, FaultEvent], devices: dict[str, DeviceSeen], rules: Rules) -> PodFacts:
    if not faults and not devices and not facts.faults:
        return facts
    return msgspec.structs.replace(facts, faults=_trusted(facts, faults, devices, rules))


def _forward(
    previous: PodFacts | None, facts: PodFacts, observed_at: datetime, rules: Rules, gpus: tuple[str, ...]
) -> tuple[PodFacts, list[Emit], tuple[str, ...]]:
    """The facts to keep, what to emit when they changed (nothing when they did not), and
    the GPUs the pod's faults are counted for in the fleet (`gpus`, grown by new ones).

    `facts` carries the previous `observed_at`, so a record that changes nothing compares
    equal; only a change is stamped with the time of the record that made it."""
    if facts == previous:
        return previous, [], gpus
    facts = msgspec.structs.replace(facts, observed_at=observed_at)
    route = pod_route(facts, rules)  # R1, R13: where its attempt is joined, if anywhere
    attempt = route.attempt if route is not None else None
    emits: list[Emit] = []
    old = {f.event_uid: f for f in previous.faults} if previous is not None and previous.faults else {}
    relabelled = previous is None or previous.labels != facts.labels
    left_out = 0
    for attributed in facts.faults:
        known = old.get(attributed.event_uid)
        if not relabelled and known == attributed:
            continue
        fault = fault_record(facts.cluster, facts.namespace, attributed, attempt.key if attempt is not None else None, rules.version)
        gpu = gpu_id(attributed.fault)
        for_gpu = not gpu or gpu in gpus or len(gpus) < GPUS_PER_POD
        if not for_gpu:
            left_out += 1
        elif gpu and gpu not in gpus:
            gpus = (*gpus, gpu)
        emits += fault_changes(facts.cluster, observed_at, fault.key, known.fault if known is not None else None, attributed.fault, rules, for_gpu=for_gpu)
        emits.append(Emit(FAULTS, fault.key, fault))
    if route is not None:
        emits.append(Emit(ATTEMPT_FACTS, route.key, facts))
    if left_out and rules.fleet is not None:
        emits += dropped(DROPPED_GPU_NAMES, left_out)
    return facts, emits, gpus


# --- the folds ---------------------------------------------------------------------------


def key_of_pod(_: str, envelope: TypedEnvelope[Pod]) -> str | None:
    uid = envelope.object.metadata.uid
    return pod_key(envelope.cluster, uid) if uid else None


def key_of_event(_: str, envelope: TypedEnvelope[Event]) -> str | None:
    """An Event joins the pod it names (R2.5)."""
    uid = uid_named_by(envelope.object)
    return pod_key(envelope.cluster, uid) if uid else None


def fold_pod(
    state: PodState | None, _: str, envelope: TypedEnvelope[Pod], rules: Rules, marks: Watermarks
) -> tuple[PodState | None, list[Emit]]:
    change, observed_at, cluster, pod = envelope.type, envelope.observed_at, envelope.cluster, envelope.object
    uid = pod.metadata.uid
    if state is None:
        state = PodState(uid=uid, cluster=cluster, last_activity=observed_at)
    # Most pod updates change nothing the rules read (readiness, resourceVersion): the
    # slim view is the same, so the facts would be too, and nothing happened (R7.4) —
    # unless it still shows a device Unhealthy or Unknown, whose last_seen it moves (R14.2).
    seen = _digest(change, pod)
    if seen == state.seen and not (state.devices and is_showing(state.devices)):
        return state, []
    last_activity = max(state.last_activity, observed_at)
    previous = state.pod
    trim = Trim(rules)
    facts = pod_facts_of(change, observed_at, cluster, pod, previous, rules, trim)
    _require_times_in_range(facts, rules)
    faults = _trustworthy(state.faults, facts.node_name, rules) if state.faults else state.faults
    shown = devices_shown(pod, rules, trim)
    devices, lost = kept_devices(merged(state.devices, shown, observed_at), rules) if shown or state.devices else (state.devices, 0)
    deletions = state.force_deletions
    if deletions:  # R2.7a once the pod is known: an Event naming it elsewhere never speaks for it
        deletions = {uid: e for uid, e in deletions.items() if is_trusted_deletion(e, facts.uid, facts.namespace, rules)}
        facts = _with_force_deletions(facts, deletions)
    forwarded, emits, gpus = _forward(previous, _with_faults(facts, faults, devices, rules), observed_at, rules, state.gpus)
    state = msgspec.structs.replace(
        state, last_activity=last_activity, seen=seen, pod=forwarded, faults=faults, devices=devices, force_deletions=deletions, gpus=gpus
    )
    if trim.cut or lost:
        emits = emits + trim.dropped() + dropped(DROPPED_DEVICE_HEALTH, lost)
    return state, emits


def _require_times_in_range(facts: PodFacts, rules: Rules) -> None:
    """R11.3 for the object times the facts keep; the named check only when one is out
    of range (this runs for every pod record that changed something)."""
    first, last = rules.usable_times
    written = facts.disruption.written if facts.disruption is not None else None
    recovered = facts.force_deleted.written if facts.force_deleted is not None else None
    deleted = facts.deletion_timestamp
    if (deleted is None or first <= deleted <= last) and (written is None or first <= written <= last):
        if (recovered is None or first <= recovered <= last) and all(
            (c.finished_at is None or first <= c.finished_at <= last) and (c.restarted_at is None or first <= c.restarted_at <= last) for c in facts.containers
        ):
            return
    times = [("container finishedAt", c.finished_at) for c in facts.containers]
    times += [("container lastState finishedAt", c.restarted_at) for c in facts.containers]  # R16.2, R16.3 compute with it
    require_in_range(
        (
            ("metadata.deletionTimestamp", deleted),
            ("DisruptionTarget lastTransitionTime", written),
            ("KueueFailureRecovery lastTransitionTime", recovered),
            *times,
        ),
        rules,
    )


def _trustworthy(faults: dict[str, FaultEvent], node_name: str, rules: Rules) -> dict[str, FaultEvent]:
    """R2.5b: once the pod's node is known, a fault reported from another node can never
    be trusted: it is not kept (nor published, nor counted as dropped)."""
    if not rules.node_trust or not node_name or all(f.reported_from == node_name for f in faults.values()):
        return faults
    return {uid: f for uid, f in faults.items() if f.reported_from == node_name}


_encode = msgspec.msgpack.Encoder().encode


def _digest(change: ChangeType, pod: Pod) -> int:
    """64 bits over the slim view (two independent checksums: cheap, deterministic
    across processes, and an accidental collision is a 2**-64 event)."""
    view = _encode(pod)
    return (zlib.crc32(view) << 32 | zlib.adler32(view)) ^ (change == "DELETED")


def fold_event(
    state: PodState | None, _: str, envelope: TypedEnvelope[Event], rules: Rules, marks: Watermarks
) -> tuple[PodState | None, list[Emit]]:
    observed_at, cluster, event = envelope.observed_at, envelope.cluster, envelope.object
    # A deleted Event (its TTL ran out) still happened: the log keeps the fault.
    fault = fault_event_of(event, observed_at, rules.xid)
    if fault is None:
        return _fold_force_deletion(state, envelope, rules)
    require_in_range((("the fault's first seen time", fault.first_seen), ("the fault's last seen time", fault.last_seen)), rules)
    trim = Trim(rules)
    parsed = trimmed(fault.parsed, trim)
    if parsed is not fault.parsed:
        fault = msgspec.structs.replace(fault, parsed=parsed)
    if state is None:
        state = PodState(uid=fault.pod_uid, cluster=cluster, last_activity=observed_at)
    last_activity = max(state.last_activity, observed_at)
    previous = state.pod
    if previous is not None and not _trustworthy({fault.event_uid: fault}, previous.node_name, rules):
        return msgspec.structs.replace(state, last_activity=last_activity), []  # R2.5b: never to be trusted
    known = state.faults.get(fault.event_uid)
    faults, lost = kept_faults({**state.faults, fault.event_uid: merge_updates(known, fault) if known else fault}, rules)
    state = msgspec.structs.replace(state, faults=faults, last_activity=last_activity)
    counted = trim.dropped() + dropped(DROPPED_FAULTS, lost)
    if previous is None:
        return state, counted  # held until the pod is known (R7.1)
    forwarded, emits, gpus = _forward(previous, _with_faults(previous, faults, state.devices, rules), observed_at, rules, state.gpus)
    return msgspec.structs.replace(state, pod=forwarded, gpus=gpus), emits + counted


def _fold_force_deletion(state: PodState | None, envelope: TypedEnvelope[Event], rules: Rules) -> tuple[PodState | None, list[Emit]]:
    """R16.6: an Event that is no fault may still say Kueue force-deleted its pod: kept, as a
    fault is (held until the pod is known, R7.1; trusted as R2.7 says), and forwarded with
    the pod's facts. Any other Event changes nothing."""
    observed_at, cluster = envelope.observed_at, envelope.cluster
    deletion = force_deletion_event_of(envelope.object, observed_at)
    if deletion is None or not may_be_trusted(deletion, rules):
        return state, []
    require_in_range((("the force deletion Event's time", deletion.at),), rules)
    if state is None:
        state = PodState(uid=deletion.pod_uid, cluster=cluster, last_activity=observed_at)
    last_activity = max(state.last_activity, observed_at)
    previous = state.pod
    if previous is not None and not is_trusted_deletion(deletion, previous.uid, previous.namespace, rules):
        return msgspec.structs.replace(state, last_activity=last_activity), []  # R2.7a: never to be trusted
    known = state.force_deletions.get(deletion.event_uid)
    if known is not None and known.at <= deletion.at:
        deletion = known  # an update of the same Event: its first time stands
    events, lost = kept_events({**state.force_deletions, deletion.event_uid: deletion})
    state = msgspec.structs.replace(state, force_deletions=events, last_activity=last_activity)
    counted = dropped(DROPPED_EVENTS, lost)
    if previous is None:
        return state, counted  # held until the pod is known (R7.1)
    forwarded, emits, gpus = _forward(previous, _with_force_deletions(previous, events), observed_at, rules, state.gpus)
    return msgspec.structs.replace(state, pod=forwarded, gpus=gpus), emits + counted


def pod_state_expires_at(state: PodState, rules: Rules) -> datetime | None:
    """R7.4: drop a pod once it is gone (deleted or finished) or was never seen, and the
    retention has passed in stream time since anything happened to it (None: not while
    it runs)."""
    pod = state.pod
    if pod is None or pod.deleted or pod.phase in ("Succeeded", "Failed"):
        return after(state.last_activity, rules.retention)
    return None
