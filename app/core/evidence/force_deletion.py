"""A pod Kueue's failure recovery force-deleted (SPEC R16.6): disruption evidence as R14.1.

Kueue v0.19.2 `pkg/controller/failurerecovery/pod_termination_controller.go` (feature gate
`FailureRecoveryPolicy`, alpha since v0.15, off by default; only pods annotated
`kueue.x-k8s.io/safe-to-forcefully-delete: "true"`): a pod still terminating a minute after
its `deletionTimestamp` on a node tainted `node.kubernetes.io/unreachable` gets, in order,
(1) through `pods/status` the phase `Failed` and the condition `KueueFailureRecovery` True,
reason `KueueForcefullyDeleted`, with **no lastTransitionTime**; (2) a Warning Event of the
same reason about the pod (events.k8s.io/v1, reporting controller
`kueue-pod-termination-controller`, pkg/constants/constants.go); (3) deletion, grace 0.

Either record is the evidence. The condition is pod status, which only the control plane
and the kubelet (and controllers granted `pods/status`) can write: it is dated by the
observed_at of the first record that showed it (its lastTransitionTime, should a later
Kueue write one, capped by that, R2.7c). The Event is trusted as R2.7 trusts a fault's —
created in the pod's namespace and naming the pod there (a), its time capped by the
bridge's clock (c), its reporter listed when `trusted_reporters` is set (d) — and not by
node (R2.5b): a controller reports it, not the node. The earliest of the two dates the
evidence, so a pod's record and its Event give the same answer in either order (R12.7).
Pure functions, no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import msgspec

from app.core.base.rules import Rules
from app.core.evidence.fault_events import event_first_seen, regarding_of, reporter_of
from app.core.kinds.pod import POD
from app.model.facts import PodDisruption
from app.model.k8s import Event, Pod

CONDITION: Final = "KueueFailureRecovery"  # KueueFailureRecoveryConditionType
REASON: Final = "KueueForcefullyDeleted"  # KueueForcefulTerminationReason: the condition's and the Event's
REPORTER: Final = "kueue-pod-termination-controller"  # the Event's reporter (docs: for `trusted_reporters`)
# The Events kept per pod until it is known and after (R11.5): Kueue writes one; more can
# only be forgeries or repeats, and the earliest decides.
EVENTS_KEPT: Final = 4
DROPPED_EVENTS: Final = "dropped_disruption_events"


class ForceDeletionEvent(msgspec.Struct, frozen=True, gc=False):
    """A `KueueForcefullyDeleted` Warning Event about a pod, not yet matched to the pod."""

    event_uid: str
    pod_uid: str
    namespace: str  # the pod's, as the Event names it
    event_namespace: str  # where the Event was created (the API server's word, R2.7a)
    reporter: str  # R2.7d
    at: datetime  # R2.4's first seen, capped by the record's observed_at (R2.7c)


def force_deletion_event_of(event: Event, observed_at: datetime) -> ForceDeletionEvent | None:
    """The force deletion an Event records (R16.6), or None (never raises)."""
    if event.type != "Warning" or event.reason != REASON:
        return None
    regarding = regarding_of(event)
    if regarding is None or regarding.kind != POD or not regarding.uid:
        return None
    first = event_first_seen(event)
    if first is None:
        return None
    meta = event.metadata
    return ForceDeletionEvent(
        event_uid=meta.uid or f"{meta.namespace}/{meta.name}",
        pod_uid=regarding.uid,
        namespace=regarding.namespace or meta.namespace,
        event_namespace=meta.namespace,
        reporter=reporter_of(event),
        at=min(first, observed_at),
    )


def may_be_trusted(event: ForceDeletionEvent, rules: Rules) -> bool:
    """What can be checked before the pod is known: created in the namespace it names
    (R2.7a), from a listed reporter (R2.7d). An Event failing either is never kept."""
    if event.event_namespace != event.namespace:
        return False
    return not rules.trusted_reporters or event.reporter in rules.trusted_reporters


def is_trusted(event: ForceDeletionEvent, pod_uid: str, pod_namespace: str, rules: Rules) -> bool:
    """R2.5, R2.7 for the pod it names (no node check: a controller reports it)."""
    return event.pod_uid == pod_uid and event.namespace == pod_namespace and may_be_trusted(event, rules)


def kept_events(events: dict[str, ForceDeletionEvent]) -> tuple[dict[str, ForceDeletionEvent], int]:
    """At most EVENTS_KEPT, the earliest (by time, then uid), and how many were dropped."""
    if len(events) <= EVENTS_KEPT:
        return events, 0
    kept = sorted(events.values(), key=lambda e: (e.at, e.event_uid))[:EVENTS_KEPT]
    return {e.event_uid: e for e in kept}, len(events) - EVENTS_KEPT


def shown_since(pod: Pod, observed_at: datetime) -> tuple[datetime, datetime | None] | None:
    """When this pod record dates the condition, if it shows it True: (its time, its
    lastTransitionTime as written, if any)."""
    for condition in pod.status.conditions:  # a loop: this runs for every pod record that changed
        if condition.type == CONDITION and condition.status == "True":
            written = condition.last_transition_time
            return (min(written, observed_at) if written is not None else observed_at), written
    return None


def force_deletion(known: PodDisruption | None, shown: tuple[datetime, datetime | None] | None, events: list[ForceDeletionEvent]) -> PodDisruption | None:
    """The pod's force deletion, from what it was (`known`: what was seen stands), what its
    record shows and its trusted Events: the earliest time any of them gives."""
    times = [e.at for e in events]
    written = known.written if known is not None else None
    if known is not None:
        times.append(known.at)
    if shown is not None:
        times.append(shown[0])
        written = written or shown[1]
    if not times:
        return None
    at = min(times)
    if known is not None and known.at == at and known.written == written:
        return known
    return PodDisruption(REASON, "", written, at)
