"""The fleet-wide views a person looks at (terminal tables, web page, /metrics),
assembled at read time from the read model (fleet_read_model.py `FleetState`):
`fleet_summary(state)` and the rows of each table. No I/O and no clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from app.core.base.clock import hour_of
from app.core.fleet.states import SEVERITIES, fault_label, horizon
from app.core.fleet.costs import GpuCost, gpu_cost
from app.core.fleet.goodput_rows import ClusterGoodput, IdleRow, cluster_goodput, idle_rows
from app.core.fleet.read_model import FleetState, VerdictRow, oldest_hour
from app.core.base.rules import DEFAULT_FLEET, FleetSettings
from app.model.fleet_records import (
    FailureRate,
    GpuFaultRate,
    NodeFaultRate,
    PreemptionWait,
    QuarantineCandidate,
    Scope,
)
from app.model.records import ErrorKind


# --- what a person looks at ----------------------------------------------------------------------


class SeverityCounts(msgspec.Struct, frozen=True):
    user: int = 0
    warn: int = 0
    critical: int = 0


class HourPoint(msgspec.Struct, frozen=True):
    hour: datetime
    user: int
    warn: int
    critical: int
    failures: int
    system_failures: int
    # GPU-seconds failures of that hour burned (issue 30), by their verdicts' kind.
    user_gpu_seconds: int = 0
    system_gpu_seconds: int = 0


class SourceRow(msgspec.Struct, frozen=True):
    """A node (gpu == "") or a GPU, over the history kept."""

    key: str
    cluster: str
    node: str
    gpu: str
    gpu_index: int | None
    faults: int
    occurrences: int
    user: int
    warn: int
    critical: int
    top: str  # the most frequent code, e.g. "Xid 79"
    gpus: int  # GPUs of a node that had faults (0 for a GPU row)
    last_fault_at: datetime | None
    candidate: bool


class CandidateRow(msgspec.Struct, frozen=True):
    key: str
    scope: Scope
    cluster: str
    node: str
    gpu: str
    since: datetime
    faults: int  # counted within the window
    codes: list[str]
    last_fault_at: datetime | None
    action: str = "UNKNOWN"  # the strongest of NVIDIA's recommended actions among them (SPEC R14.3)


class FailureRow(msgspec.Struct, frozen=True):
    cluster: str
    namespace: str
    code: str
    kind: ErrorKind
    failures: int
    gpu_faults: int
    last_hour: datetime
    gpu_seconds: int = 0  # what they burned (issue 30)
    gpu_seconds_unknown: int = 0  # failures whose GPU-seconds are unknown


class QueueRow(msgspec.Struct, frozen=True):
    cluster: str
    queue: str
    queue_source: str
    evictions: int
    preemptions: int
    readmissions: int
    waiting: int  # gangs waiting for readmission now
    wait_seconds_avg: float | None
    wait_seconds_max: float | None


class StuckRow(msgspec.Struct, frozen=True):
    """A workload attempt waiting for readmission past `max_readmission_wait` (SPEC R15.4)."""

    attempt: str  # as people see it
    key: str
    cluster: str
    queue: str
    since: datetime
    waited_seconds: float
    reason: str  # the eviction it waits after (its transition's text)


class Totals(msgspec.Struct, frozen=True):
    faults: int
    occurrences: int
    severity: SeverityCounts
    failures: int
    system_failures: int
    user_failures: int
    gpu_failures: int
    candidates: int
    nodes: int
    gpus: int
    dead_letters: int
    # Issue 30: GPU-seconds failures burned, by kind; failures whose cost is unknown.
    gpu_seconds: int = 0
    system_gpu_seconds: int = 0
    user_gpu_seconds: int = 0
    gpu_seconds_unknown: int = 0


class ClusterHours(msgspec.Struct, frozen=True):
    """One cluster's hours, on its own stream time: clusters far apart each keep a chart
    that reads (a fleet-wide axis from the oldest to the newest would squeeze both)."""

    cluster: str
    stream_time: datetime | None
    hours: list[HourPoint]


class FleetSummary(msgspec.Struct, frozen=True):
    """Plain data for the terminal tables and the web page; counts cover the history kept."""

    stream_time: datetime | None
    threshold: int
    window_seconds: int
    history_hours: int
    totals: Totals
    hours: list[HourPoint]
    nodes: list[SourceRow]
    gpus: list[SourceRow]
    quarantine: list[CandidateRow]
    quarantine_events: list[QuarantineCandidate]
    failures: list[FailureRow]
    queues: list[QueueRow]
    recent: list[VerdictRow]
    stuck: list[StuckRow] = []
    cost: GpuCost = msgspec.field(default_factory=GpuCost)
    failure_rows: int = 0  # every row of `failures` before the top N (the page lists them all: /api/failures)
    clusters: list[ClusterHours] = []  # `hours` per cluster, each on its own stream time
    goodput: list[ClusterGoodput] = []  # SPEC R17.4, per cluster
    idle_quota: list[IdleRow] = []  # SPEC R17.3: quota idle now


def _is_candidate(state: FleetState, scope: Scope, cluster: str, node: str, gpu: str) -> bool:
    key = f"{cluster}/node/{node}" if scope == "node" else f"{cluster}/gpu/{node}/{gpu}"
    record = state.candidates.get(key)
    return record is not None and record.state == "candidate"


def _source_rows(rates: list[NodeFaultRate] | list[GpuFaultRate], state: FleetState, scope: Scope) -> list[SourceRow]:
    grouped: dict[str, list] = {}
    for rate in rates:
        source = f"{rate.cluster}/{rate.node}" + (f"/{rate.gpu}" if isinstance(rate, GpuFaultRate) else "")
        grouped.setdefault(source, []).append(rate)
    gpus: dict[str, set[str]] = {}
    if scope == "node":
        for g in state.gpus.values():
            if g.faults:
                gpus.setdefault(f"{g.cluster}/{g.node}", set()).add(g.gpu)
    rows = []
    for key, records in grouped.items():
        xids: dict[tuple[str, int], int] = {}
        sev = dict.fromkeys(SEVERITIES, 0)
        occurrences = 0
        for record in records:
            for x in record.xids:
                xids[(x.kind, x.code)] = xids.get((x.kind, x.code), 0) + x.faults
                sev[x.severity] += x.faults
                occurrences += x.occurrences
        if not sum(sev.values()):
            continue
        first = records[0]
        top = min(xids.items(), key=lambda item: (-item[1], item[0]), default=None)
        gpu = first.gpu if isinstance(first, GpuFaultRate) else ""
        lasts = [r.last_fault_at for r in records if r.last_fault_at is not None and r.faults]
        rows.append(
            SourceRow(
                key=key,
                cluster=first.cluster,
                node=first.node,
                gpu=gpu,
                gpu_index=first.gpu_index if isinstance(first, GpuFaultRate) else None,
                faults=sum(sev.values()),
                occurrences=occurrences,
                user=sev["USER"],
                warn=sev["WARN"],
                critical=sev["CRITICAL"],
                top=fault_label(*top[0]) if top is not None else "",
                gpus=len(gpus.get(key, ())),
                last_fault_at=max(lasts) if lasts else None,
                candidate=_is_candidate(state, scope, first.cluster, first.node, gpu),
            )
        )
    return sorted(rows, key=lambda r: (-r.critical, -r.faults, r.key))


def node_rows(state: FleetState) -> list[SourceRow]:
    """Every node with faults in the history kept, worst first."""
    return _source_rows(list(state.nodes.values()), state, "node")


def gpu_rows(state: FleetState) -> list[SourceRow]:
    return _source_rows(list(state.gpus.values()), state, "gpu")


def candidate_rows(state: FleetState, settings: FleetSettings = DEFAULT_FLEET) -> list[CandidateRow]:
    rows = [
        CandidateRow(
            key=record.key,
            scope=record.scope,
            cluster=record.cluster,
            node=record.node,
            gpu=record.gpu,
            since=record.at,
            faults=record.faults,
            codes=list(record.codes),
            last_fault_at=record.last_fault_at,
            action=record.action,
        )
        for record in state.candidates.values()
        if record.state == "candidate"
    ]
    return sorted(rows, key=lambda r: (r.scope != "node", -r.faults, r.key))


def failure_rows(state: FleetState) -> list[FailureRow]:
    grouped: dict[tuple[str, str, str, ErrorKind], list[FailureRate]] = {}
    for record in state.failures.values():
        grouped.setdefault((record.cluster, record.namespace, record.code, record.kind), []).append(record)
    rows = [
        FailureRow(
            c, ns, code, kind, sum(r.failures for r in rs), sum(r.gpu_faults for r in rs), max(r.hour for r in rs),
            sum(r.gpu_seconds for r in rs), sum(r.gpu_seconds_unknown for r in rs),
        )
        for (c, ns, code, kind), rs in grouped.items()
    ]  # fmt: skip
    return sorted((r for r in rows if r.failures > 0), key=lambda r: (-r.failures, r.cluster, r.namespace, r.code, r.kind))


def queue_rows(state: FleetState) -> list[QueueRow]:
    grouped: dict[str, list[PreemptionWait]] = {}
    for record in state.waits.values():
        grouped.setdefault(f"{record.cluster}/{record.queue}", []).append(record)
    rows = []
    active = {q for q, now in state.queues.items() if now.waiting or now.evictions or now.readmissions}
    for queue in sorted(set(grouped) | active):
        records = grouped.get(queue, [])
        now = state.queues.get(queue)
        readmissions = sum(r.readmissions for r in records)
        cluster, name = queue.split("/", 1)
        source = now.queue_source if now is not None else records[0].queue_source
        rows.append(
            QueueRow(
                cluster=cluster,
                queue=name,
                queue_source=source,
                evictions=sum(r.evictions for r in records),
                preemptions=sum(r.preemptions for r in records),
                readmissions=readmissions,
                waiting=now.waiting if now is not None else 0,
                wait_seconds_avg=sum(r.wait_seconds_total for r in records) / readmissions if readmissions else None,
                wait_seconds_max=max(r.wait_seconds_max for r in records) if readmissions else None,
            )
        )
    return rows


def hour_points(state: FleetState, settings: FleetSettings = DEFAULT_FLEET, cluster: str | None = None) -> list[HourPoint]:
    """Faults (by severity) and failures per hour, fleet-wide or of one `cluster` (on its
    own stream time), from the oldest hour with data to the newest hour (empty hours
    included)."""
    newest = state.stream_time if cluster is None else state.cluster_times.get(cluster)
    if newest is None:
        return []
    faults: dict[datetime, dict[str, int]] = {}
    for rate in state.nodes.values():
        if cluster is not None and rate.cluster != cluster:
            continue
        counts = faults.setdefault(rate.hour, dict.fromkeys(SEVERITIES, 0))
        counts["USER"] += rate.user
        counts["WARN"] += rate.warn
        counts["CRITICAL"] += rate.critical
    failures: dict[datetime, list[int]] = {}
    for record in state.failures.values():
        if cluster is not None and record.cluster != cluster:
            continue
        row = failures.setdefault(record.hour, [0, 0, 0, 0])
        system = record.kind == "SYSTEM"
        row[0] += record.failures
        row[1] += record.failures if system else 0
        row[2 + system] += record.gpu_seconds  # user, then system GPU-seconds (issue 30)
    last = hour_of(newest)
    first = min([*faults, *failures], default=last)
    oldest = horizon(newest, settings) if cluster is not None else oldest_hour(state, settings) or horizon(newest, settings)
    first = max(first, oldest)  # each cluster's own history
    points = []
    hour = first
    while hour <= last:
        sev = faults.get(hour, dict.fromkeys(SEVERITIES, 0))
        fail = failures.get(hour, [0, 0, 0, 0])
        points.append(HourPoint(hour, sev["USER"], sev["WARN"], sev["CRITICAL"], fail[0], fail[1], fail[2], fail[3]))
        hour += timedelta(hours=1)
    return points


def recent_verdicts(state: FleetState, limit: int | None = None) -> list[VerdictRow]:
    return state.recent[:limit] if limit is not None else list(state.recent)


def severity_totals(state: FleetState) -> dict[str, int]:
    """Distinct fault Events by severity within the history kept."""
    out = dict.fromkeys(SEVERITIES, 0)
    for rate in state.nodes.values():
        out["USER"] += rate.user
        out["WARN"] += rate.warn
        out["CRITICAL"] += rate.critical
    return out


def fleet_summary(state: FleetState, settings: FleetSettings = DEFAULT_FLEET, top: int = 10) -> FleetSummary:
    nodes, gpus, failures = node_rows(state), gpu_rows(state), failure_rows(state)
    all_failures = list(state.failures.values())
    failed = sum(r.failures for r in failures)
    system = sum(r.failures for r in failures if r.kind == "SYSTEM")
    totals = Totals(
        faults=sum(r.faults for r in nodes),
        occurrences=sum(r.occurrences for r in nodes),
        severity=SeverityCounts(sum(r.user for r in nodes), sum(r.warn for r in nodes), sum(r.critical for r in nodes)),
        failures=failed,
        system_failures=system,
        user_failures=failed - system,
        gpu_failures=sum(r.gpu_faults for r in failures),
        candidates=sum(1 for r in state.candidates.values() if r.state == "candidate"),
        nodes=len(nodes),
        gpus=len(gpus),
        dead_letters=state.dead_letters,
        gpu_seconds=sum(r.gpu_seconds for r in all_failures),
        system_gpu_seconds=sum(r.gpu_seconds for r in all_failures if r.kind == "SYSTEM"),
        user_gpu_seconds=sum(r.gpu_seconds for r in all_failures if r.kind == "USER"),
        gpu_seconds_unknown=sum(r.gpu_seconds_unknown for r in all_failures),
    )
    return FleetSummary(
        stream_time=state.stream_time,
        threshold=settings.threshold,
        window_seconds=settings.window_seconds,
        history_hours=settings.history_hours,
        totals=totals,
        hours=hour_points(state, settings),
        nodes=nodes[:top],
        gpus=gpus[:top],
        quarantine=candidate_rows(state, settings),
        quarantine_events=state.quarantine_log[:top],
        failures=failures[:top],
        queues=queue_rows(state),
        recent=state.recent[:top],
        stuck=stuck_rows(state),
        cost=gpu_cost(state, top),
        failure_rows=len(failures),
        clusters=[ClusterHours(c, at, hour_points(state, settings, c)) for c, at in sorted(state.cluster_times.items())],
        goodput=cluster_goodput(state, settings),
        idle_quota=idle_rows(state),
    )


def stuck_rows(state: FleetState) -> list[StuckRow]:
    """Which gangs wait past the limit, since when, in which queue, why; the longest first."""
    rows = [
        StuckRow(
            attempt=f"{r.cluster}/{r.namespace}/{r.tracked.kind}/{r.tracked.name}" if r.identity == "workload" else r.key,
            key=r.key,
            cluster=r.cluster,
            queue=f"{r.namespace}/{r.queue}" if r.queue else r.namespace,
            since=r.since,
            waited_seconds=r.waited_seconds,
            reason=r.reason,
        )
        for r in state.stuck.values()
    ]
    return sorted(rows, key=lambda r: (r.since, r.key))

