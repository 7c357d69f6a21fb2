"""Which Events are GPU faults, what each says, and whether to trust it (SPEC R2.1, R2.4,
R2.5, R2.5b, R2.7)."""

from __future__ import annotations

from datetime import datetime
from typing import Final

import msgspec

from app.core.evidence.fault_message import ParsedMessage, parse_fault_message
from app.core.base.rules import Rules
from app.core.base.xid import DEFAULT_XID_TABLE, SEVERITY_RANK, XidTable
from app.core.kinds.pod import POD
from app.model.k8s import Event

FAULT_REASONS: Final = frozenset({"GPUXidError", "GPUSXidError"})


class FaultEvent(msgspec.Struct, frozen=True):
    """A parsed GPU fault Event, not yet attributed to a pod."""

    event_uid: str
    pod_uid: str
    pod_name: str
    namespace: str  # the pod's, as the Event names it
    event_namespace: str  # where the Event was created (the API server's word, R2.7a)
    reported_from: str  # reportingInstance, else source.host; "" if neither
    reporter: str  # reportingController, else reportingComponent, else source.component (R2.7d)
    parsed: ParsedMessage
    first_seen: datetime
    last_seen: datetime
    count: int


def regarding_of(event: Event):
    """The object an Event is about (core/v1 involvedObject, events.k8s.io/v1 regarding)."""
    return event.involved_object or event.regarding


def _message(event: Event) -> str:
    return event.message if event.message is not None else (event.note or "")


def _reported_from(event: Event) -> str:
    if event.reporting_instance:
        return event.reporting_instance
    source = event.source or event.deprecated_source
    return source.host if source is not None else ""


def reporter_of(event: Event) -> str:
    """R2.7d: reportingController (events.k8s.io/v1), else reportingComponent (core/v1), else
    source.component."""
    if event.reporting_controller:
        return event.reporting_controller
    if event.reporting_component:
        return event.reporting_component
    source = event.source or event.deprecated_source
    return source.component if source is not None else ""


def event_first_seen(event: Event) -> datetime | None:
    """R2.4: eventTime, else firstTimestamp, else metadata.creationTimestamp (not yet capped, R2.7c)."""
    return event.event_time or event.first_timestamp or event.deprecated_first_timestamp or event.metadata.creation_timestamp


def _timing(event: Event, observed_at: datetime) -> tuple[datetime, datetime, int] | None:
    # R2.4: first_seen = eventTime | firstTimestamp | creationTimestamp;
    # last_seen = series.lastObservedTime | lastTimestamp | first_seen.
    # R2.7c: a client wrote them; the bridge saw the Event at `observed_at`, so neither is later.
    first = event_first_seen(event)
    if first is None:
        return None
    series = event.series
    last = (series.last_observed_time if series else None) or event.last_timestamp or event.deprecated_last_timestamp or first
    count = (series.count if series else None) or event.count or event.deprecated_count or 1
    # R5.3: a last time before the first is kept as written: such an interval explains
    # nothing (`relevance.is_relevant`); taking the later of the two would turn it into a
    # point fault at first_seen. Each time is capped on its own (R2.7c), which keeps the
    # order of two times the bridge's clock had passed; an Event whose times both lie ahead
    # of it is a point at `observed_at`, like any Event dated ahead of the bridge.
    return min(first, observed_at), min(last, observed_at), count


def fault_event_of(event: Event, observed_at: datetime, table: XidTable = DEFAULT_XID_TABLE) -> FaultEvent | None:
    """The fault this Event records, seen by the bridge at `observed_at`, or None if it
    records none (never raises)."""
    regarding = regarding_of(event)
    if event.type != "Warning" or event.reason not in FAULT_REASONS:
        return None  # R2.1
    if regarding is None or regarding.kind != POD or not regarding.uid:
        return None  # R2.1, R2.5: an empty uid is rejected
    parsed = parse_fault_message(_message(event), table)
    if parsed is None:
        return None  # R2.2, R2.3
    timing = _timing(event, observed_at)
    if timing is None:
        return None
    first, last, count = timing
    return FaultEvent(
        event_uid=event.metadata.uid or f"{event.metadata.namespace}/{event.metadata.name}",
        pod_uid=regarding.uid,
        pod_name=regarding.name,
        namespace=regarding.namespace or event.metadata.namespace,
        event_namespace=event.metadata.namespace,
        reported_from=_reported_from(event),
        reporter=reporter_of(event),
        parsed=parsed,
        first_seen=first,
        last_seen=last,
        count=count,
    )


def merge_updates(old: FaultEvent, new: FaultEvent) -> FaultEvent:
    """R2.4: one repeating fault is one Event whose count and last_seen only grow.

    Taking min/max makes the merge commutative, so update order never matters (R7.1).
    """
    return msgspec.structs.replace(
        new,
        first_seen=min(old.first_seen, new.first_seen),
        last_seen=max(old.last_seen, new.last_seen),
        count=max(old.count, new.count),
    )


def is_trusted(fault: FaultEvent, pod_uid: str, pod_namespace: str, node_name: str, rules: Rules) -> bool:
    """Whether a fault Event may speak for the pod it names (R2.5, R2.5b, R2.7)."""
    if fault.pod_uid != pod_uid:
        return False  # R2.5
    # R2.7a: created in the pod's own namespace, and naming it there: a user who may
    # write Events in one namespace cannot speak for another's pods.
    if fault.event_namespace != pod_namespace or fault.namespace != pod_namespace:
        return False
    if rules.trusted_reporters and fault.reporter not in rules.trusted_reporters:
        return False  # R2.7d
    if not rules.node_trust:
        return True
    # R2.5b: from the pod's node; a pod with a uid but no node yet trusts no fault event.
    return bool(node_name) and fault.reported_from == node_name


# --- R11.5: the faults kept per pod --------------------------------------------------------

DROPPED_FAULTS = "dropped_faults"


def _earliest(faults: list[FaultEvent]) -> FaultEvent:
    return min(faults, key=lambda f: (f.first_seen, f.event_uid))


def kept_faults(faults: dict[str, FaultEvent], rules: Rules) -> tuple[dict[str, FaultEvent], int]:
    """At most `max_faults_per_pod` of a pod's faults, and how many were dropped.

    R6.3 takes, among the faults relevant to an anchor, the earliest of the worst
    severity. So for each severity the earliest fault is kept, and the earliest one still
    inside R5's window before the pod's latest fault (where the next anchor most likely
    falls); then the latest faults fill what is left. Below the limit nothing changes."""
    limit = rules.max_faults_per_pod
    if len(faults) <= limit:
        return faults, 0
    values = list(faults.values())
    recent = max(f.last_seen for f in values) - rules.window
    keep: set[str] = set()
    for severity in sorted(SEVERITY_RANK, key=SEVERITY_RANK.__getitem__, reverse=True):  # worst first
        same = [f for f in values if f.parsed.severity == severity]
        if same:
            keep.add(_earliest(same).event_uid)
            window = [f for f in same if f.last_seen >= recent]
            if window:
                keep.add(_earliest(window).event_uid)
    for fault in sorted(values, key=lambda f: (f.last_seen, f.first_seen, f.event_uid), reverse=True):
        if len(keep) >= limit:
            break
        keep.add(fault.event_uid)
    return {uid: fault for uid, fault in faults.items() if uid in keep}, len(faults) - len(keep)
