"""The bridge on a real API server (tests/conftest.py `apiserver`): what the double cannot
be trusted to show. A quiet Event stream whose position etcd compacted away; an API
server restart; a burst of writes."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from app.bridge.bridge import Bridge
from app.bridge.records import now_us
from tests.bridge.helpers import MemorySink, Running, settings, wait_for
from tests.bridge.realkube import namespace

pytestmark = pytest.mark.apiserver


def event(name: str, ns: str, reason: str = "Started") -> dict:
    return {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns, "uid": "u-1", "apiVersion": "v1"},
        "reason": reason, "message": "m", "type": "Normal", "source": {"component": "kubelet", "host": "node-a"},
    }


def pod(name: str, ns: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": "t"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "main", "image": "trainer:1"}]}}


def progress_times(sink: MemorySink, topic: str) -> list[int]:
    """Progress times published for `topic`, in microseconds, in order."""
    from datetime import datetime

    out = []
    for t, _, value in list(sink.progress):
        if t == topic:
            at = datetime.strptime(orjson.loads(value)["observed_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
            out.append(int(at.replace(tzinfo=__import__("datetime").timezone.utc).timestamp() * 1_000_000))
    return out


def test_a_quiet_event_stream_whose_position_etcd_compacted_relists_and_publishes_nothing(apiserver, real_api, caplog):
    """Events get no BOOKMARKs from a real server: a quiet Event watch resumes from an old
    resourceVersion, and after etcd compacted it, the re-watch is 410. The relist finds
    nothing changed: no record, no gap marker."""
    caplog.set_level(logging.INFO, logger="faultline.bridge")
    ns = namespace(apiserver, "quiet")
    for i in range(3):
        apiserver.call("POST", f"/api/v1/namespaces/{ns}/events", event(f"e{i}", ns))
    sink = MemorySink()
    running = Running(Bridge(real_api, sink, settings(kinds="Event", namespaces=ns, watch_timeout=2)))
    wait_for(lambda: len(sink.records) == 3, what="the listed events")
    [watch] = running.bridge.watches
    for name in ("elsewhere-1", "elsewhere-2"):  # etcd moves on, the Event stream stays quiet
        apiserver.call("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": name}})
    apiserver.compact()  # keeps the last revision only: the watch's position is older
    wait_for(lambda: watch.counts["gone"] >= 1 and watch.progress.live, timeout=30, what="the 410 and the relist")
    running.stop()
    assert len(sink.records) == 3 and sink.gaps == []
    assert any("expired (410 Gone)" in r.getMessage() and "nothing changed" in r.getMessage() for r in caplog.records)


def test_an_apiserver_restart_relists_the_cached_kinds_without_a_gap_and_events_resume(apiserver, real_api, caplog):
    """After a restart every kind in the watch cache answers 410 for its old position;
    Events (read from etcd) resume. Nothing changed, so nothing is published again and no
    gap marker is written; progress stops during the outage and moves again after it;
    each watch logs the outage once and its recovery once, with no traceback."""
    caplog.set_level(logging.INFO, logger="faultline.bridge")
    ns = namespace(apiserver, "restart")
    apiserver.call("POST", f"/api/v1/namespaces/{ns}/pods", pod("p", ns))
    apiserver.call("POST", f"/api/v1/namespaces/{ns}/events", event("e", ns))
    apiserver.call("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"}, "spec": {}})
    sink = MemorySink()
    running = Running(Bridge(real_api, sink, settings(namespaces=ns, backoff_max=0.5, progress_interval=0.1)))
    topics = {"k8s.pods", "k8s.events", "k8s.jobs", "k8s.workloads"}
    wait_for(lambda: {t for t, _, _ in sink.progress} == topics, timeout=30, what="progress on every topic")
    published = len(sink.records)
    caplog.clear()
    apiserver.stop_apiserver()
    down_from = now_us()
    time.sleep(2.0)  # an outage of a known length (nothing to wait for: the server is down)
    down_until = now_us()
    apiserver.start_apiserver()
    cached = [w for w in running.bridge.watches if w.kind.name != "Event"]
    wait_for(lambda: all(w.counts["gone"] >= 1 and w.progress.live for w in cached), timeout=60, what="every cached kind relisted")
    after = now_us()
    wait_for(lambda: all(progress_times(sink, t)[-1] > after for t in topics), timeout=30, what="progress after the restart")
    running.stop()

    assert len(sink.records) == published and sink.gaps == []
    [events] = [w for w in running.bridge.watches if w.kind.name == "Event"]
    assert events.counts["gone"] == 0  # resumed from its position
    for topic in topics:
        # A connection is live until the bridge reads its end: allow that moment.
        during = [t for t in progress_times(sink, topic) if down_from + 500_000 < t < down_until]
        assert during == [], f"{topic}: progress claimed {len(during)} moment(s) while the API server was down"
    messages = [r.getMessage() for r in caplog.records]
    for w in running.bridge.watches:
        lost = [m for m in messages if m.startswith(w.describe() + ":") and "retrying with backoff" in m]
        back = [m for m in messages if m.startswith(w.describe() + ":") and "recovered after" in m]
        assert len(lost) <= 1 and len(back) == len(lost), (w.name, lost, back)
    assert not any(r.exc_info for r in caplog.records) and not any("Traceback" in m for m in messages)


def test_a_burst_of_writes_reaches_the_sink_once_each_in_order(apiserver, real_api):
    """2,000 writes from four clients at once, then every pod deleted: each change once,
    in the order the server made it."""
    ns = namespace(apiserver, "burst")
    sink = MemorySink()
    running = Running(Bridge(real_api, sink, settings(kinds="Pod", namespaces=ns, progress_interval=0.1)))
    wait_for(lambda: running.bridge.watches[0].progress.live, what="the watch")
    names = [f"p{i:02d}" for i in range(40)]
    made: dict[str, list[str]] = {name: [] for name in names}
    lock = threading.Lock()

    def writer(mine: list[str]) -> None:
        for name in mine:
            made[name].append(apiserver.call("POST", f"/api/v1/namespaces/{ns}/pods", pod(name, ns))["metadata"]["resourceVersion"])
        for step in range(49):
            for name in mine:
                path = f"/api/v1/namespaces/{ns}/pods/{name}"
                patch = {"metadata": {"annotations": {"step": str(step)}}}
                served = apiserver.call("PATCH", path, orjson.dumps(patch), content_type="application/merge-patch+json")
                with lock:
                    made[name].append(served["metadata"]["resourceVersion"])

    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, [names[i::4] for i in range(4)]))
    for name in names:
        apiserver.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})
    total = sum(len(v) for v in made.values()) + 2 * len(names)  # a deletion: deletionTimestamp, then gone
    wait_for(lambda: len(sink.records) == total, timeout=60, what=f"{total} records")
    elapsed = time.monotonic() - started
    running.stop()
    seen: dict[str, list[str]] = {name: [] for name in names}
    kinds: dict[str, list[str]] = {name: [] for name in names}
    for envelope in sink.envelopes():
        meta = envelope["object"]["metadata"]
        seen[meta["name"]].append(meta["resourceVersion"])
        kinds[meta["name"]].append(envelope["type"])
    for name in names:
        assert seen[name][:-2] == made[name], name  # every write, once, in order
        assert kinds[name][-2:] == ["MODIFIED", "DELETED"]
    print(f"\nreal API server burst: {total} changes in {elapsed:.1f}s")
