"""Where the GPU-hours went (SPEC R17), as the fleet views show it: per cluster on its own
stream time (its hours, its totals, its namespaces and queues), and the quota idle now.
Assembled at read time from the read model (`read_model.FleetState`); no clock."""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from app.core.base.clock import hour_of
from app.core.base.rules import FleetSettings
from app.core.fleet.goodput import basis, share
from app.core.fleet.read_model import FleetState
from app.core.fleet.states import horizon
from app.model.fleet_records import Goodput


class GoodputRow(msgspec.Struct, frozen=True):
    """GPU-seconds of the history kept, of a cluster or one of its namespaces and queues."""

    cluster: str
    namespace: str = ""  # "": the whole cluster
    queue: str = ""  # "": no Kueue Workload held quota for these attempts
    reserved_gpu_seconds: int = 0
    running_gpu_seconds: int = 0
    useful_gpu_seconds: int = 0
    lost_user_gpu_seconds: int = 0
    lost_system_gpu_seconds: int = 0
    idle_gpu_seconds: int = 0
    wait_seconds: int = 0
    waits: int = 0
    goodput: float | None = None  # useful / reserved (useful / running where nothing was reserved)

    @property
    def lost_gpu_seconds(self) -> int:
        return self.lost_user_gpu_seconds + self.lost_system_gpu_seconds


class GoodputHour(msgspec.Struct, frozen=True):
    hour: datetime
    reserved_gpu_seconds: int = 0
    running_gpu_seconds: int = 0
    useful_gpu_seconds: int = 0
    lost_user_gpu_seconds: int = 0
    lost_system_gpu_seconds: int = 0
    idle_gpu_seconds: int = 0
    goodput: float | None = None


class ClusterGoodput(msgspec.Struct, frozen=True):
    """One cluster, on its own stream time (SPEC R12: clusters' watermarks are independent)."""

    cluster: str
    stream_time: datetime | None
    totals: GoodputRow
    hours: list[GoodputHour]  # from its history's first hour to its stream time, empty hours included
    rows: list[GoodputRow]  # by namespace and queue, most reserved (then running) first


class IdleRow(msgspec.Struct, frozen=True):
    """Quota idle now (SPEC R17.3)."""

    attempt: str  # as people see it
    key: str
    cluster: str
    queue: str
    workload: str
    gpus: int
    since: datetime
    why: str
    reason: str


_FIELDS = ("reserved_gpu_seconds", "running_gpu_seconds", "useful_gpu_seconds", "lost_user_gpu_seconds", "lost_system_gpu_seconds",
           "idle_gpu_seconds", "wait_seconds", "waits")  # fmt: skip


def _sums(records: list[Goodput]) -> list[int]:
    return [sum(getattr(r, f) for r in records) for f in _FIELDS]


def goodput_row(records: list[Goodput], cluster: str = "", namespace: str = "", queue: str = "") -> GoodputRow:
    """The records added up; goodput over their bases (R17.2: each hour's and queue's own)."""
    sums = _sums(records)
    whole = sum(basis(r.reserved_gpu_seconds, r.running_gpu_seconds) for r in records)
    return GoodputRow(cluster, namespace, queue, *sums, goodput=share(sums[2], whole))  # type: ignore[misc]


def cluster_goodput(state: FleetState, settings: FleetSettings) -> list[ClusterGoodput]:
    """Every cluster with goodput figures in its history, by name."""
    by_cluster: dict[str, list[Goodput]] = {}
    for record in state.goodput.values():
        by_cluster.setdefault(record.cluster, []).append(record)
    out = []
    for cluster in sorted(by_cluster):
        records = by_cluster[cluster]
        now = state.cluster_times.get(cluster) or max(r.hour for r in records)
        by_hour: dict[datetime, list[Goodput]] = {}
        by_place: dict[tuple[str, str], list[Goodput]] = {}
        for r in records:
            by_hour.setdefault(r.hour, []).append(r)
            by_place.setdefault((r.namespace, r.queue), []).append(r)
        hours = []
        hour, last = max(min(by_hour), horizon(now, settings)), hour_of(now)
        while hour <= last:
            row = goodput_row(by_hour.get(hour, []), cluster)
            hours.append(GoodputHour(hour, *_sums(by_hour.get(hour, []))[:6], goodput=row.goodput))  # type: ignore[misc]
            hour += timedelta(hours=1)
        rows = [goodput_row(rs, cluster, ns, queue) for (ns, queue), rs in by_place.items()]
        rows.sort(key=lambda r: (-r.reserved_gpu_seconds, -r.running_gpu_seconds, r.namespace, r.queue))
        out.append(ClusterGoodput(cluster, state.cluster_times.get(cluster), goodput_row(records, cluster), hours, rows))
    return out


def idle_rows(state: FleetState) -> list[IdleRow]:
    """The quota idle now, the longest idle first."""
    rows = []
    for r in state.idle.values():
        attempt = f"{r.cluster}/{r.namespace}/{r.tracked.kind}/{r.tracked.name}" if r.identity == "workload" else r.key
        queue = f"{r.namespace}/{r.queue}" if r.queue else r.namespace
        workload = r.workload.name if r.workload is not None else ""
        rows.append(IdleRow(attempt, r.key, r.cluster, queue, workload, r.gpus, r.since, r.why, r.reason))
    return sorted(rows, key=lambda r: (r.since, r.key))
