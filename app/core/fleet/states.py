"""The fleet stage's states, one per key (fold.py says the keys), and what they hold:
fault counts and critical hits per node or GPU, failure counts per namespace-hour, GPU time
per node-hour, waits per queue. Each bounded by the settings, not by the fleet."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import lru_cache

import msgspec

from app.core.base.clock import hour_of
from app.core.base.progress import Watermarks
from app.core.base.rules import FleetSettings
from app.model.fleet_records import (
    Scope,
    XidCount,
)
from app.model.records import DEVICE_HEALTH, ErrorKind

SEVERITIES = ("USER", "WARN", "CRITICAL")
HITS_KEPT = 100  # critical faults kept per node or GPU for its quarantine count
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
AT_ONCE = datetime.min.replace(tzinfo=timezone.utc)  # expires at any stream time




def fault_label(kind: str, code: int) -> str:
    """`Xid 79`, `SXid 20034`, or `Device health` for a device the kubelet reported (R14.2)."""
    if kind == DEVICE_HEALTH:
        return "Device health"
    return f"{'SXid' if kind == 'SXID' else 'Xid'} {code}"


# --- states ------------------------------------------------------------------------------------


class Hit(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A critical fault that may count toward quarantine."""

    at: datetime  # the fault's first_seen
    fault: str  # its faultline.faults key
    label: str  # "Xid 79"
    action: str = "UNKNOWN"  # NVIDIA's recommended action for it (SPEC R14.3)


class SourceStats(msgspec.Struct, frozen=True, gc=False, tag="source"):
    """The quarantine count of a node (gpu == "") or one GPU of a node."""

    cluster: str
    node: str
    gpu: str = ""
    gpu_index: int | None = None
    latest: datetime = EPOCH  # the latest record time folded in (stream time without progress)
    hits: tuple[Hit, ...] = ()  # by (at, fault): the newest HITS_KEPT critical faults in the window
    candidate_since: datetime | None = None
    reported: int = 0  # the faults its latest candidate record counted (0: none since it became one)

    @property
    def scope(self) -> Scope:
        return "gpu" if self.gpu else "node"


class RateStats(msgspec.Struct, frozen=True, gc=False, tag="rate"):
    """The faults first seen on a node (gpu == "") or one GPU of a node in one UTC hour."""

    cluster: str
    node: str
    hour: datetime
    gpu: str = ""
    gpu_index: int | None = None
    latest: datetime = EPOCH
    xids: tuple[XidCount, ...] = ()  # ordered by (kind, code, severity)
    last_fault_at: datetime | None = None


class FailureCount(msgspec.Struct, frozen=True, gc=False, array_like=True):
    code: str
    kind: ErrorKind
    failures: int
    gpu_faults: int
    workload_kind: str = ""  # SPEC R13.3: a workload attempt's object kind; "" under labels
    gpu_seconds: int = 0  # issue 30: what those failures burned
    gpu_seconds_unknown: int = 0  # failures whose GPU-seconds are unknown


class FailureStats(msgspec.Struct, frozen=True, gc=False, tag="failures"):
    """Failed attempts of one namespace in one UTC hour."""

    cluster: str
    namespace: str
    hour: datetime
    latest: datetime = EPOCH
    counts: tuple[FailureCount, ...] = ()  # by (code, kind, workload kind)


class GpuTimeStats(msgspec.Struct, frozen=True, gc=False, tag="gpu-time"):
    """Issue 30: the GPU-seconds that failures of one UTC hour burned on one node, by kind."""

    cluster: str
    node: str
    hour: datetime
    latest: datetime = EPOCH
    failures: int = 0
    system_failures: int = 0
    user_gpu_seconds: int = 0
    system_gpu_seconds: int = 0


class GoodputStats(msgspec.Struct, frozen=True, gc=False, tag="goodput"):
    """SPEC R17.4: where the GPU-seconds of one UTC hour went in a namespace and queue."""

    cluster: str
    namespace: str
    queue: str
    hour: datetime
    latest: datetime = EPOCH
    attempts: int = 0
    reserved: int = 0
    running: int = 0
    useful: int = 0
    lost_user: int = 0
    lost_system: int = 0
    idle: int = 0
    wait_seconds: int = 0
    waits: int = 0


class QueueBucket(msgspec.Struct, frozen=True, gc=False, array_like=True):
    hour: datetime
    evictions: int = 0
    preemptions: int = 0
    readmissions: int = 0
    wait_seconds_total: float = 0.0
    wait_seconds_max: float = 0.0


class QueueStats(msgspec.Struct, frozen=True, gc=False, tag="queue"):
    """One LocalQueue (or a namespace, for JobSets that name none)."""

    cluster: str
    queue: str  # "<namespace>/<queue>", or "<namespace>"
    queue_source: str  # "queue-name" | "namespace"
    latest: datetime = EPOCH
    buckets: tuple[QueueBucket, ...] = ()
    waiting: dict[str, datetime] = {}  # gang key -> since (WaitingForReadmission now)
    totals: QueueBucket = QueueBucket(EPOCH)  # lifetime (counters never go down)


FleetStats = SourceStats | RateStats | FailureStats | GpuTimeStats | GoodputStats | QueueStats


# --- the stage's time (SPEC R12.5) ------------------------------------------------------------


def stream_now(state: FleetStats, marks: Watermarks) -> datetime:
    """R12.5: the stage's watermark for the cluster, else the latest record time."""
    return marks.stream_time(state.cluster) or state.latest


def horizon(now: datetime, fleet: FleetSettings) -> datetime:
    """The oldest hour still kept."""
    return horizon_at(now, fleet.history_hours)


@lru_cache(maxsize=256)  # one stream time for every state of a sweep (an int hashes faster than the settings)
def horizon_at(now: datetime, history_hours: int) -> datetime:
    return hour_of(now) - timedelta(hours=history_hours - 1)
