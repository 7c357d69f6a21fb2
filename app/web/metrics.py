"""Prometheus text exposition format 0.0.4, written by hand: a dozen series do not need
a client library (DESIGN.md: dependencies are chosen, not accumulated)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from app.core.fleet import SEVERITIES, FleetState
from app.web.view import FleetView

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


def failed_attempts(state: FleetState, hours: int = 24) -> dict[str, int]:
    """Attempts whose latest verdict failed within `hours` of stream time, by kind: the
    attempts the fleet fold keeps evidence of, each once however often it was revised."""
    counts = {"SYSTEM": 0, "USER": 0}
    if state.stream_time is None:
        return counts
    since = state.stream_time - timedelta(hours=hours)
    for trail in state.attempts.values():
        if trail.verdicts and trail.verdicts[-1].failed_at >= since:
            counts[trail.verdicts[-1].kind] += 1
    return counts


# Every metric name /metrics may expose (ops/ tests check the dashboard and alerts against it).
METRICS = (
    "faultline_records_total",
    "faultline_dead_letters_total",
    "faultline_verdicts_total",
    "faultline_failed_attempts",
    "faultline_faults_total",
    "faultline_quarantine_candidates",
    "faultline_consumer_lag",
    "faultline_preemptions_total",
    "faultline_evictions_total",
    "faultline_readmission_wait_seconds",
    "faultline_gangs_waiting",
    "faultline_stream_time_seconds",
)


def render_metrics(view: FleetView) -> str:
    state, counters = view.state, view.counters()
    lines: list[str] = []
    _family(lines, "faultline_records_total", "counter", "Source records processed, by topic.",
            [({"topic": topic}, n) for topic, n in sorted(counters.records.items())])
    _family(lines, "faultline_dead_letters_total", "counter", "Records that could not be read (faultline.dead-letter).",
            [({}, state.dead_letters)])
    _family(lines, "faultline_verdicts_total", "counter",
            "Verdict records (faultline.classified-failures) by code and kind; a revision counts again.",
            [({"code": code, "kind": kind}, n) for code, kinds in sorted(state.verdicts_total.items()) for kind, n in sorted(kinds.items())])
    _family(lines, "faultline_failed_attempts", "gauge",
            "Attempts that failed in the last 24 h of stream time, by the kind of their latest verdict (each attempt once).",
            [({"kind": kind}, n) for kind, n in failed_attempts(state).items()])
    _family(lines, "faultline_faults_total", "counter", "Distinct GPU fault Events by severity (a repeating Event counts once).",
            [({"severity": s.lower()}, state.faults_total.get(s, 0)) for s in SEVERITIES])
    scopes = {"node": 0, "gpu": 0}
    for scope in state.candidates.values():
        scopes[scope] += 1
    _family(lines, "faultline_quarantine_candidates", "gauge", "Nodes and GPUs that are quarantine candidates now.",
            [({"scope": scope}, n) for scope, n in scopes.items()])
    if counters.lag:
        _family(lines, "faultline_consumer_lag", "gauge", "Records not yet read, by input topic and partition.",
                [({"topic": lag.topic, "partition": str(lag.partition)}, lag.lag) for lag in counters.lag])
    queues = sorted(state.queue_totals.items())
    labels = [({"cluster": q.split("/", 1)[0], "queue": q.split("/", 1)[1]}, totals) for q, totals in queues]
    _family(lines, "faultline_preemptions_total", "counter", "Gangs preempted by Kueue, by queue (the namespace until queues are known).",
            [(lab, t.preemptions) for lab, t in labels])
    _family(lines, "faultline_evictions_total", "counter", "Gangs evicted by Kueue for any reason, by queue.",
            [(lab, t.evictions) for lab, t in labels])
    _family(lines, "faultline_readmission_wait_seconds", "summary", "How long preempted gangs waited for readmission, by queue.", [])
    _family(lines, "faultline_readmission_wait_seconds", "summary", "", [(lab, t.wait_seconds) for lab, t in labels], "_sum")
    _family(lines, "faultline_readmission_wait_seconds", "summary", "", [(lab, t.readmissions) for lab, t in labels], "_count")
    waiting: dict[str, int] = {q: 0 for q, _ in queues}
    for wait in state.waiting.values():
        waiting[wait.queue] = waiting.get(wait.queue, 0) + 1
    _family(lines, "faultline_gangs_waiting", "gauge", "Gangs waiting for readmission now, by queue.",
            [({"cluster": q.split("/", 1)[0], "queue": q.split("/", 1)[1]}, n) for q, n in sorted(waiting.items())])
    if state.stream_time is not None:
        _family(lines, "faultline_stream_time_seconds", "gauge", "The latest record time folded (Unix seconds): how current the view is.",
                [({}, state.stream_time.timestamp())])
    return "\n".join(lines) + "\n"
