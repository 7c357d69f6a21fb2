"""Records a hostile tenant (or a broken producer) can put on the source topics, one
builder per kind that once stopped a worker or bent a verdict (issue 16, SPEC R11.3-R11.5).

Each builder returns trace-line dicts `{"topic", "key", "value"}`; a value is a dict (an
envelope) or, for bytes that are no JSON at all, `bytes`. `value_bytes` gives what goes
on Kafka. The unit tests (test_r11_*) and the broker test (tests/integration/
test_stream_hostile.py) use the same records.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson

from app.core.base.emit import Emit
from app.embedded.pipeline import Pipeline
from tests.unit import builders as b

Records = list[dict[str, Any]]

DEPTH = 1_200  # deeper than msgspec's recursion limit (1,000)


def value_bytes(line: dict[str, Any]) -> bytes:
    value = line["value"]
    return value if isinstance(value, bytes) else orjson.dumps(value)


def feed(pipeline: Pipeline, lines: Records, finish: bool = True) -> list[Emit]:
    """Every line through `pipeline` (offset: its index, partition 0), then the end of
    the input unless `finish` is False."""
    out: list[Emit] = []
    for offset, line in enumerate(lines):
        out += pipeline.feed(line["topic"], line["key"], value_bytes(line), offset=offset, partition=0)
    return out + pipeline.finish() if finish else out


def trace_line(line: dict[str, Any]) -> bytes:
    """As faultline writes trace lines (topic, key, value), so a value nested too deeply
    for a decoder is still found (app.model.decode.parse_trace_line)."""
    return b'{"topic":' + orjson.dumps(line["topic"]) + b',"key":' + orjson.dumps(line["key"]) + b',"value":' + value_bytes(line) + b"}"


def _failed(p: dict, at: datetime, exit_code: int = 1) -> dict:
    names = [c["name"] for c in p["spec"]["containers"]]
    return b.updated(p, phase="Failed", containerStatuses=[{"name": n, "state": b.terminated(exit_code, at)} for n in names])


def _pod_task(run: str, t0: datetime) -> dict:
    return b.pod(f"{run}-0", labels=b.attempt_labels(run=run, action="train"), containers={"main": b.running(t0 - b.minutes(30))}, created=t0 - b.minutes(31))


# --- R11.3: records no decoder or fold may choke on ----------------------------------------------


def nested(t0: datetime, depth: int = DEPTH) -> Records:
    """A pod record with ~1,200 levels of arrays in a field the views skip (~6.6 KB), and
    an object holding nothing else: RecursionError in the decoder."""
    p = b.pod("deep", labels={})
    envelope = orjson.dumps(b.record(p, t0, "ADDED")["value"])
    deep = b"[" * depth + b"]" * depth
    return [
        {"topic": "k8s.pods", "key": p["metadata"]["uid"], "value": envelope[:-1] + b',"deep":' + deep + b"}"},
        {"topic": "k8s.events", "key": "deep-array", "value": b'{"x":' + deep + b"}"},
    ]


def huge_garbage() -> Records:
    """Values a dead letter once re-escaped past the broker's 1 MiB: 175 KB of control
    bytes, 349 KB of invalid UTF-8, 524 KB of quotes."""
    return [
        {"topic": "k8s.pods", "key": "control-bytes", "value": bytes(range(1, 32)) * (175_000 // 31)},
        {"topic": "k8s.events", "key": "invalid-utf8", "value": b"\xff\xfe\xc3" * (349_000 // 3)},
        {"topic": "k8s.jobs", "key": "quotes", "value": b'"' * 524_000},
    ]


def slash_label(t0: datetime) -> Records:
    """A '/' in an attempt label value: it would split the attempt key (R1)."""
    p = b.pod("slash", labels=b.attempt_labels(run="run/with/slashes"), containers={"main": b.running(t0 - b.minutes(10))})
    return [b.record(p, t0 - b.minutes(10), "ADDED"), b.record(_failed(p, t0), t0)]


def out_of_range_times(t0: datetime) -> Records:
    """observed_at at the calendar's ends: OverflowError in any arithmetic on it."""
    out = []
    for at in ("9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"):
        line = b.record(b.pod(f"calendar-{at[:4]}", labels=b.attempt_labels(run=f"calendar-{at[:4]}")), t0, "ADDED")
        line["value"]["observed_at"] = at
        out.append(line)
    bookmark = b.progress("k8s.pods", t0)
    bookmark["value"]["observed_at"] = "9999-12-31T23:59:59Z"
    return [*out, bookmark]


def far_object_times(run: str, t0: datetime) -> Records:
    """Times inside objects at the calendar's ends: a container that finished at
    9999-12-31, a fault first seen at 0001-01-01, a JobSet that failed at 9999-12-31.
    The first record of each object is fine; the ones carrying such a time are refused."""
    p = _pod_task(run, t0)
    failed = b.updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": b.terminated(1, t0)}])
    failed["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = "9999-12-31T23:59:59Z"
    fault = b.event(p, code=79, first=t0 - b.minutes(1))
    fault["firstTimestamp"] = "0001-01-01T00:00:00Z"
    labels = b.attempt_labels(run=run, action="gang")
    js = b.jobset(f"{run}-gang", labels=labels)
    broken = b.jobset(f"{run}-gang", labels=labels, job_uid=js["metadata"]["uid"], conditions=[b.condition("Failed", "FailedJobs", "", t0)])
    broken["status"]["conditions"][0]["lastTransitionTime"] = "9999-12-31T23:59:59Z"
    return [
        b.record(p, t0 - b.minutes(30), "ADDED"),
        b.record(js, t0 - b.minutes(30), "ADDED"),
        b.record(fault, t0 - b.minutes(1), "ADDED"),
        b.record(failed, t0),
        b.record(broken, t0),
    ]


# --- R11.4: clocks --------------------------------------------------------------------------------


def far_times(run: str, t0: datetime, count: int) -> Records:
    """`count` records of failing pod tasks dated far in the future (a clock fault once
    the topic has a watermark) or far in the past (late data: folded, harmless)."""
    out: Records = []
    for i in range(count // 2):
        at = t0 + timedelta(days=365 * 20 + i) if i % 2 else t0 - timedelta(days=365 * 30 + i)
        p = _pod_task(f"{run}-{i}", at)
        out += [b.record(p, at - b.minutes(30), "ADDED"), b.record(_failed(p, at), at)]
    return out


# --- R11.5: state that would grow without bound --------------------------------------------------


def fault_flood(run: str, t0: datetime, count: int = 3_000, trusted: bool = True) -> Records:
    """A failing pod task with `count` GPU fault Events on it (each its own Event), from
    its node (trusted, R2.5b) or from another one."""
    p = _pod_task(run, t0)
    out = [b.record(p, t0 - b.minutes(40), "ADDED")]
    node = b.NODE if trusted else "gpu-99"
    for i in range(count):
        first = t0 - b.minutes(35) + timedelta(seconds=i)
        code = (79, 48, 31, 92)[i % 4]
        out.append(b.record(b.event(p, code=code, severity={31: "user", 92: "warn"}.get(code, "critical"), first=first, reporting=node), first, "ADDED"))
    out.append(b.record(_failed(p, t0 + b.minutes(10)), t0 + b.minutes(10)))
    return out


def long_tokens(run: str, t0: datetime, count: int = 6, size: int = 100_000) -> Records:
    """A failing pod task with `count` fault Events whose `process=` token is `size`
    characters, and an 800 KB termination message."""
    p = _pod_task(run, t0)
    out = [b.record(p, t0 - b.minutes(30), "ADDED")]
    for i in range(count):
        message = f"[gpu-health] [CRITICAL] Xid 79 on GPU 0. xid=79 severity=critical gpu_index=0 process={'p' * size}"
        out.append(b.record(b.event(p, message=message, first=t0 - b.minutes(5 - i)), t0 - b.minutes(5 - i), "ADDED"))
    failed = _failed(p, t0)
    failed["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "m" * 800_000
    out.append(b.record(failed, t0 + b.minutes(0.1)))
    return out


def restart_storm(run: str, t0: datetime, restarts: int = 1_000_000_000) -> Records:
    """A JobSet whose status.restarts jumps to a billion: one verdict per generation
    (R8.1) must not mean a billion of them."""
    labels = b.attempt_labels(run=run, action="storm")
    js = b.jobset(f"{run}-storm", labels=labels)
    return [b.record(js, t0 - b.minutes(10), "ADDED"), b.record(b.jobset(f"{run}-storm", labels=labels, restarts=restarts, job_uid=js["metadata"]["uid"]), t0)]
