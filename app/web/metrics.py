"""Prometheus text exposition format 0.0.4, written by hand: a dozen series do not need
a client library (DESIGN.md: dependencies are chosen, not accumulated)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from app.core.fleet.goodput import basis, share
from app.core.fleet.summary import severity_totals
from app.core.fleet.view import FleetView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Sample = tuple[dict[str, str], float]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _family(lines: list[str], name: str, kind: str, help_text: str, samples: Iterable[Sample], suffix: str = "") -> None:
    if not suffix:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{suffix}{{{label_text}}} {_number(value)}" if label_text else f"{name}{suffix} {_number(value)}")


family = _family  # for the other drivers' own /metrics (app/mark/server.py)


# Every metric name /metrics may expose (ops/ tests check the dashboard and alerts against it).
METRICS = (
    "faultline_records_total",
    "faultline_dead_letters_total",
    "faultline_failed_attempts",
    "faultline_failed_gpu_seconds",
    "faultline_gpu_faults",
    "faultline_quarantine_candidates",
    "faultline_consumer_lag",
    "faultline_preemptions_total",
    "faultline_evictions_total",
    "faultline_readmission_wait_seconds",
    "faultline_gangs_waiting",
    "faultline_stuck_readmissions",
    "faultline_goodput_gpu_seconds",
    "faultline_goodput_ratio",
    "faultline_idle_quota",
    "faultline_idle_quota_gpus",
    "faultline_stream_time_seconds",
    "faultline_watermark_lag_seconds",
    "faultline_watermark_waiting",
)


def render_metrics(view: FleetView, now: float | None = None, *, fleet: bool = True) -> str:
    """The driver's own series, and the fleet's (from the read model) unless `fleet` is
    False (a worker that is not the group's leader: every worker reads the same fleet, so
    one reports it). `now`: the wall clock (Unix seconds) the watermark lag is measured against."""
    now = time.time() if now is None else now
    state, counters = view.state, view.counters()
    lines: list[str] = []
    _family(lines, "faultline_records_total", "counter", "Source records processed, by topic.",
            [({"topic": topic}, n) for topic, n in sorted(counters.records.items())])
    if counters.lag:
        _family(lines, "faultline_consumer_lag", "gauge", "Records not yet read, by input topic and partition.",
                [({"topic": lag.topic, "partition": str(lag.partition)}, lag.lag) for lag in counters.lag])
    if counters.watermarks:
        _family(lines, "faultline_watermark_lag_seconds", "gauge",
                "How far the watermark of each source topic trails the wall clock (SPEC R12.6): a stalled bridge or partition grows it.",
                [({"cluster": w.cluster, "topic": w.topic}, round(max(0.0, now - w.at.timestamp()), 3)) for w in counters.watermarks])
    if counters.waiting:
        _family(lines, "faultline_watermark_waiting", "gauge",
                "1: a source topic of a cluster with no watermark yet while the cluster's other topics have progressed (SPEC R12.5): "
                "expiry, waits, limits and the fleet's hours of that cluster wait for it. Lasting: nothing writes that topic's progress.",
                [({"cluster": w.cluster, "topic": w.topic}, 1) for w in counters.waiting])
    if not fleet:
        return "\n".join(lines) + "\n"
    _family(lines, "faultline_dead_letters_total", "counter", "Records that could not be read (faultline.dead-letter).",
            [({}, state.dead_letters)])
    failed: dict[tuple[str, str, str], int] = {}
    burned: dict[tuple[str, str, str], int] = {}  # GPU-seconds (issue 30)
    for rate in state.failures.values():
        which = (rate.code, rate.kind, rate.workload_kind)
        failed[which] = failed.get(which, 0) + rate.failures
        burned[which] = burned.get(which, 0) + rate.gpu_seconds

    def by_verdict(counts: dict[tuple[str, str, str], int]) -> list[Sample]:
        return [({"code": code, "kind": kind, **({"workload_kind": w} if w else {})}, n) for (code, kind, w), n in sorted(counts.items())]

    _family(lines, "faultline_failed_attempts", "gauge",
            "Failed attempts within the history kept, by the code and kind of their current verdict "
            "(workload_kind: the object of a workload attempt, e.g. TrainJob, Job, Pod; absent under orchestrator labels).",
            by_verdict(failed))
    _family(lines, "faultline_failed_gpu_seconds", "gauge",
            "GPU-seconds the failed attempts within the history kept burned (their pods' GPUs times how long each ran, issue 30), "
            "by the code and kind of their current verdict; failures whose pods' start is unknown add nothing.",
            by_verdict(burned))
    _family(lines, "faultline_gpu_faults", "gauge", "Distinct GPU fault Events within the history kept, by severity (a repeating Event counts once).",
            [({"severity": s.lower()}, n) for s, n in severity_totals(state).items()])
    scopes = {"node": 0, "gpu": 0}
    for record in state.candidates.values():
        scopes[record.scope] += record.state == "candidate"
    _family(lines, "faultline_quarantine_candidates", "gauge", "Nodes and GPUs that are quarantine candidates now.",
            [({"scope": scope}, n) for scope, n in scopes.items()])
    queues = sorted(state.queues.values(), key=lambda q: q.key)
    labels = [({"cluster": q.cluster, "queue": q.queue}, q) for q in queues]
    _family(lines, "faultline_preemptions_total", "counter", "Gangs preempted by Kueue, by queue (the namespace when the JobSet names none).",
            [(lab, q.preemptions) for lab, q in labels])
    _family(lines, "faultline_evictions_total", "counter", "Gangs evicted by Kueue for any reason, by queue.",
            [(lab, q.evictions) for lab, q in labels])
    _family(lines, "faultline_readmission_wait_seconds", "summary", "How long preempted gangs waited for readmission, by queue.", [])
    _family(lines, "faultline_readmission_wait_seconds", "summary", "", [(lab, q.wait_seconds_total) for lab, q in labels], "_sum")
    _family(lines, "faultline_readmission_wait_seconds", "summary", "", [(lab, q.readmissions) for lab, q in labels], "_count")
    _family(lines, "faultline_gangs_waiting", "gauge", "Gangs waiting for readmission now, by queue.",
            [(lab, q.waiting) for lab, q in labels])
    stuck: dict[tuple[str, str], int] = {}
    for r in state.stuck.values():
        queue = f"{r.namespace}/{r.queue}" if r.queue else r.namespace
        stuck[(r.cluster, queue)] = stuck.get((r.cluster, queue), 0) + 1
    _family(lines, "faultline_stuck_readmissions", "gauge",
            "Workload attempts waiting for readmission longer than max_readmission_wait, by queue (SPEC R15.4).",
            [({"cluster": c, "queue": q}, n) for (c, q), n in sorted(stuck.items())])
    _goodput(lines, view)
    if state.stream_time is not None:
        _family(lines, "faultline_stream_time_seconds", "gauge", "The newest time the fleet view speaks of (Unix seconds): how current it is.",
                [({}, state.stream_time.timestamp())])
    return "\n".join(lines) + "\n"


# SPEC R17: where the GPU-hours went, per cluster and queue (the namespace where no Workload
# held quota: queue "" on faultline.goodput); idle quota now.
_GOODPUT_FIGURES = ("reserved", "running", "useful", "lost_user", "lost_system", "idle")


def _goodput(lines: list[str], view: FleetView) -> None:
    state = view.state
    figures: dict[tuple[str, str], list[int]] = {}
    clusters: dict[str, list[int]] = {}  # cluster -> [useful, basis]
    for r in state.goodput.values():
        queue = f"{r.namespace}/{r.queue}" if r.queue else r.namespace
        values = [r.reserved_gpu_seconds, r.running_gpu_seconds, r.useful_gpu_seconds, r.lost_user_gpu_seconds, r.lost_system_gpu_seconds, r.idle_gpu_seconds]
        sums = figures.setdefault((r.cluster, queue), [0] * 6)
        for i, v in enumerate(values):
            sums[i] += v
        whole = clusters.setdefault(r.cluster, [0, 0])
        whole[0] += r.useful_gpu_seconds
        whole[1] += basis(r.reserved_gpu_seconds, r.running_gpu_seconds)
    _family(lines, "faultline_goodput_gpu_seconds", "gauge",
            "GPU-seconds within the history kept, by where they went (SPEC R17): reserved by Kueue, running, useful, "
            "lost to failures by their verdicts' kind, idle (reserved, nothing running); by cluster and queue (the namespace where no Workload held quota).",
            [({"cluster": c, "queue": q, "figure": f}, v) for (c, q), sums in sorted(figures.items()) for f, v in zip(_GOODPUT_FIGURES, sums)])
    ratios = [({"cluster": c}, ratio) for c, (useful, whole) in sorted(clusters.items()) if (ratio := share(useful, whole)) is not None]
    _family(lines, "faultline_goodput_ratio", "gauge",
            "Useful GPU-seconds over reserved ones within the history kept (over running ones where no Workload held quota), by cluster (SPEC R17.2).",
            ratios)
    idle: dict[tuple[str, str], list[int]] = {}
    for q in state.idle.values():
        queue = f"{q.namespace}/{q.queue}" if q.queue else q.namespace
        row = idle.setdefault((q.cluster, queue), [0, 0])
        row[0] += 1
        row[1] += q.gpus
    _family(lines, "faultline_idle_quota", "gauge",
            "Attempts whose Kueue quota is idle now: held past max_idle_quota with nothing running, or held by a Workload Kueue evicted (SPEC R17.3).",
            [({"cluster": c, "queue": q}, n) for (c, q), (n, _) in sorted(idle.items())])
    _family(lines, "faultline_idle_quota_gpus", "gauge", "GPUs those idle Workloads hold, by queue (SPEC R17.3).",
            [({"cluster": c, "queue": q}, g) for (c, q), (_, g) in sorted(idle.items())])
