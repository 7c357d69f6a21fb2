"""List then watch, through the real `kubernetes` client against the protocol double:
what a record holds, pagination, watch resumption after timeouts, drops and bookmarks."""

from __future__ import annotations

import re
import threading
import time

import orjson
import pytest

from app.bridge.records import ALL_NAMESPACES
from app.bridge.bridge import Bridge
from app.bridge.resources import KINDS
from tests.bridge.apiserver import FakeKube
from tests.bridge.helpers import (
    CLUSTER,
    MemorySink,
    Running,
    bump,
    pod,
    set_phase,
    settings,
    wait_for,
)

OBSERVED_AT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def served_as_watch_object(kube: FakeKube, plural: str, namespace: str, name: str) -> dict:
    obj = kube.get(plural, namespace, name)
    obj["metadata"].pop("managedFields")
    return obj


def content_lists(kube: FakeKube, plural: str) -> list:
    """List requests that read objects (not the one-item probe for the served version)."""
    return [r for r in kube.requests_of("list", plural) if r.params.get("limit") != "1"]


def test_initial_list_is_paginated_and_each_object_is_published_as_served(kube, api):
    for i in range(120):
        kube.create("pods", pod(f"p{i:03d}"))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", page_size=50)))
    wait_for(lambda: len(sink.records) == 120, what="120 records")
    wait_for(lambda: kube.requests_of("watch", "pods"), what="the watch")
    running.stop()

    pages = content_lists(kube, "pods")
    assert [r.params.get("limit") for r in pages] == ["50", "50", "50"]
    assert "continue" not in pages[0].params and all("continue" in r.params for r in pages[1:])
    watch = kube.requests_of("watch", "pods")[0]
    assert watch.params["resourceVersion"] == "1120"  # the list's resourceVersion
    assert watch.params["allowWatchBookmarks"] == "true"
    assert watch.params["timeoutSeconds"] == "30"

    for record, envelope in zip(sink.records, sink.envelopes()):
        obj = envelope["object"]
        assert record.topic == "k8s.pods"
        assert record.key == obj["metadata"]["uid"]
        assert list(envelope) == ["type", "observed_at", "cluster", "object"]
        assert envelope["type"] == "ADDED"
        assert envelope["cluster"] == CLUSTER
        assert OBSERVED_AT.match(envelope["observed_at"])
        # The object as the API serves it (camelCase, no client model), minus managedFields;
        # list items of built-in kinds get the kind/apiVersion the list left off.
        assert obj == served_as_watch_object(kube, "pods", "ml", obj["metadata"]["name"])
    assert sink.positions.load(CLUSTER)["Pod"].resource_versions == {ALL_NAMESPACES: "1120"}


def test_every_kind_goes_to_its_topic_with_its_key(kube, api):
    p = kube.create("pods", pod("trainer-0"))
    kube.create("events", {
        "metadata": {"name": "trainer-0.1", "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "name": "trainer-0", "namespace": "ml", "uid": p["metadata"]["uid"]},
        "reason": "GPUXidError", "type": "Warning", "message": "[gpu-health] xid=79",
    })
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings()))
    wait_for(lambda: len(sink.records) == 2)
    # Changes while watching, one of every kind.
    crs = [("rayjobs", "RayJob"), ("pytorchjobs", "PyTorchJob"), ("tfjobs", "TFJob"), ("mpijobs", "MPIJob"), ("jaxjobs", "JAXJob"), ("jobsets", "JobSet"),
           ("trainjobs", "TrainJob"), ("leaderworkersets", "LeaderWorkerSet"), ("jobs", "Job"), ("workloads", "Workload")]
    for plural, _ in crs:
        kube.create(plural, {"metadata": {"name": f"{plural}-1", "namespace": "ml"}, "spec": {}, "status": {}})
    kube.create("events", {
        "apiVersion": "v1", "metadata": {"name": "regarding-only", "namespace": "ml"},
        "regarding": {"kind": "Pod", "name": "trainer-0", "uid": "uid-from-regarding"}, "reason": "Scheduled",
    })
    kube.create("events", {"metadata": {"name": "node-event", "namespace": "default"}, "involvedObject": {"kind": "Node", "name": "gpu-1"}})
    wait_for(lambda: len(sink.records) == 14)
    running.stop()

    by_name = {orjson.loads(r.value)["object"]["metadata"]["name"]: r for r in sink.records}
    assert by_name["trainer-0"].topic == "k8s.pods"
    assert by_name["trainer-0.1"].topic == "k8s.events"
    assert by_name["trainer-0.1"].key == p["metadata"]["uid"]  # involvedObject.uid
    assert by_name["regarding-only"].key == "uid-from-regarding"
    node_event = orjson.loads(by_name["node-event"].value)["object"]
    assert by_name["node-event"].key == node_event["metadata"]["uid"]  # no involved uid: its own
    for plural, kind in crs:
        record = by_name[f"{plural}-1"]
        obj = orjson.loads(record.value)["object"]
        assert record.topic == ("k8s.workloads" if kind == "Workload" else "k8s.jobs")
        assert obj["kind"] == kind and record.key == obj["metadata"]["uid"]
        assert "managedFields" not in obj["metadata"]
    assert orjson.loads(by_name["jobs-1"].value)["object"]["apiVersion"] == "batch/v1"
    assert orjson.loads(by_name["trainjobs-1"].value)["object"]["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert orjson.loads(by_name["jaxjobs-1"].value)["object"]["apiVersion"] == "kubeflow.org/v1"


def test_a_listed_batch_job_gets_the_list_s_kind_and_api_version(kube, api):
    """A built-in kind's list items come without kind/apiVersion (batch/v1 Jobs too)."""
    kube.create("jobs", {"metadata": {"name": "nightly-29301140", "namespace": "ml"}, "spec": {}})
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Job")))
    wait_for(lambda: len(sink.records) == 1)
    running.stop()
    [envelope] = sink.envelopes("k8s.jobs")
    assert envelope["type"] == "ADDED"
    assert (envelope["object"]["apiVersion"], envelope["object"]["kind"]) == ("batch/v1", "Job")


def test_mpijob_and_workload_fall_back_to_the_older_version(kube_factory, api_factory):
    kube = kube_factory()
    kube.install("mpijobs", versions=("v1",))
    kube.install("workloads", versions=("v1beta1",))
    kube.create("mpijobs", {"apiVersion": "kubeflow.org/v1", "metadata": {"name": "m", "namespace": "ml"}})
    kube.create("workloads", {"apiVersion": "kueue.x-k8s.io/v1beta1", "metadata": {"name": "w", "namespace": "ml"}})
    sink = MemorySink()
    running = Running(Bridge(api_factory(kube), sink, settings(kinds="MPIJob,Workload")))
    wait_for(lambda: len(sink.records) == 2)
    running.stop()
    versions = {(r.plural, r.version, r.code) for r in kube.requests if r.verb == "list"}
    assert ("mpijobs", "v2beta1", 404) in versions and ("mpijobs", "v1", 200) in versions
    assert ("workloads", "v1beta2", 404) in versions and ("workloads", "v1beta1", 200) in versions
    assert {e["object"]["apiVersion"] for e in sink.envelopes()} == {"kubeflow.org/v1", "kueue.x-k8s.io/v1beta1"}


def test_namespace_list_watches_only_those_namespaces(kube, api):
    for ns in ("ml", "infer", "other"):
        kube.create("pods", pod(f"p-{ns}", namespace=ns))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", namespaces="ml,infer")))
    wait_for(lambda: len(sink.records) == 2)
    kube.update("pods", "other", "p-other", bump)
    kube.update("pods", "infer", "p-infer", bump)
    wait_for(lambda: len(sink.records) == 3)
    time.sleep(0.2)
    running.stop()
    assert {r.namespace for r in kube.requests_of("watch", "pods")} == {"ml", "infer"}
    assert sorted(n for _, n, _ in sink.changes()) == ["p-infer", "p-infer", "p-ml"]
    scopes = sink.positions.load(CLUSTER)["Pod"].resource_versions
    assert set(scopes) == {"ml", "infer"}


def test_expired_continue_token_restarts_the_list_without_duplicates(kube, api):
    for i in range(30):
        kube.create("pods", pod(f"p{i:02d}"))
    pages = []

    def expire_after_first_page(request):
        if request.plural == "pods" and request.params.get("limit") == "10":
            pages.append(request)
            if len(pages) == 1:
                kube.expire_continue_tokens()

    kube.after_list_page = expire_after_first_page
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", page_size=10)))
    wait_for(lambda: kube.requests_of("watch", "pods"))
    running.stop()
    codes = [r.code for r in content_lists(kube, "pods")]
    assert codes == [200, 410, 200, 200, 200]  # the second page is refused, the list starts over
    assert sorted(n for _, n, _ in sink.changes()) == [f"p{i:02d}" for i in range(30)]  # each once


def test_watch_timeout_resumes_from_the_last_change_without_relisting(kube, api):
    kube.create("pods", pod("p"))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", watch_timeout=1)))
    wait_for(lambda: len(sink.records) == 1)
    for _ in range(3):
        kube.update("pods", "ml", "p", bump)
        time.sleep(0.6)
    wait_for(lambda: len(kube.requests_of("watch", "pods")) >= 3, what="watches renewed after timeoutSeconds")
    running.stop()
    assert len(content_lists(kube, "pods")) == 1  # never relisted
    rvs = [rv for _, _, rv in sink.changes()]
    assert rvs == sorted(set(rvs), key=int)  # every change once, in order
    assert len(rvs) == 4
    # Each watch starts where the stream before it stood.
    starts = [int(r.params["resourceVersion"]) for r in kube.requests_of("watch", "pods")]
    assert starts == sorted(starts) and starts[0] == 1001


def test_dropped_connections_mid_event_lose_and_repeat_nothing(kube, api):
    names = [f"p{i}" for i in range(5)]
    for name in names:
        kube.create("pods", pod(name))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod")))
    wait_for(lambda: len(sink.records) == 5)
    expected = 5
    for round_ in range(8):
        for name in names:
            kube.update("pods", "ml", name, bump)
        expected += len(names)
        time.sleep(0.01 * round_)
        kube.drop_watches("pods")  # cuts the stream after one whole line and half of the next
    wait_for(lambda: len(sink.records) >= expected, what=f"{expected} records")
    time.sleep(0.2)
    running.stop()
    assert len(content_lists(kube, "pods")) == 1
    assert len(kube.requests_of("watch", "pods")) > 2
    for name in names:
        rvs = [int(rv) for _, n, rv in sink.changes() if n == name]
        assert rvs == sorted(set(rvs)) and len(rvs) == 9, name  # no change lost, none repeated


def test_bookmarks_keep_a_quiet_kind_position_fresh(kube_factory, api_factory):
    """Pods stay quiet while Events move: bookmarks advance the Pod position, so a restart
    after the Pod history was compacted resumes without 410."""
    kube = kube_factory(bookmark_interval=0.05)
    api = api_factory(kube)
    kube.create("pods", pod("quiet"))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod,Event")))
    wait_for(lambda: len(sink.records) == 1)
    for i in range(20):
        kube.create("events", {"metadata": {"name": f"e{i}", "namespace": "ml"}, "involvedObject": {"uid": "x"}})
    last_rv = str(kube.rv)
    wait_for(lambda: running.position("Pod") == last_rv, what="a bookmark")
    running.stop()
    kube.compact()  # every history before now is gone

    sink2 = MemorySink(sink.positions)
    running = Running(Bridge(api, sink2, settings(kinds="Pod")))
    wait_for(lambda: len(kube.requests_of("watch", "pods")) >= 2)
    kube.update("pods", "ml", "quiet", bump)
    wait_for(lambda: len(sink2.records) == 1)
    running.stop()
    assert kube.requests_of("watch", "pods")[-1].params["resourceVersion"] == last_rv
    assert sink2.gaps == [] and sink2.changes()[0][0] == "MODIFIED"


def test_outage_is_retried_with_capped_exponential_backoff(kube, api):
    kube.create("pods", pod("p"))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", backoff_initial=0.02, backoff_max=0.16)))
    wait_for(lambda: len(sink.records) == 1)
    before = len(kube.requests_of("watch", "pods"))
    kube.set_unavailable(True)
    time.sleep(1.5)
    during = kube.requests_of("watch", "pods")[before:]
    kube.update("pods", "ml", "p", bump)  # a change during the outage
    kube.set_unavailable(False)
    wait_for(lambda: len(sink.records) == 2)
    running.stop()
    # Delays 0.01-0.02, 0.02-0.04, 0.04-0.08, then 0.08-0.16 each: about 12 tries in
    # 1.5 s, where an unthrottled client would make thousands.
    assert 4 <= len(during) <= 30, len(during)
    assert all(r.code == 503 for r in during[1:])
    assert len(content_lists(kube, "pods")) == 1  # resumed, not relisted
    stream = running.bridge.watches[0]
    assert stream.counts["retries"] >= 5


def test_a_server_back_from_an_outage_gets_every_watch_at_once_not_after_the_grown_backoff(kube, api, caplog):
    """Issue 29: while the server is down the retry delay grows (here to 8 s); once
    /readyz answers again, every watch retries within a probe interval, and the outage is
    still logged once and its end once per watch."""
    import logging

    caplog.set_level(logging.INFO, logger="faultline.bridge")
    kube.create("pods", pod("p"))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod,Event", backoff_initial=1.0, backoff_max=8.0)))
    wait_for(lambda: all(w.progress.live for w in running.bridge.watches), what="both watches live")
    kube.set_unavailable(True)  # lists, watches and /readyz answer 503
    wait_for(lambda: all(w.counts["retries"] >= 3 for w in running.bridge.watches), timeout=20, what="three failures each")
    kube.update("pods", "ml", "p", bump)
    back = time.monotonic()
    kube.set_unavailable(False)
    wait_for(lambda: len(sink.records) == 2 and all(w.progress.live for w in running.bridge.watches), timeout=10, what="both watches back")
    elapsed = time.monotonic() - back
    running.stop()
    # A probe interval (0.5 s), the re-watch and a quiet moment (0.5 s), where the next delay was 4-8 s.
    assert elapsed < 2.0, f"{elapsed:.2f}s after the server was ready again"
    assert all(w.counts["comebacks"] == 1 for w in running.bridge.watches)
    assert running.bridge.probe.probes < 60  # one probe every 0.5 s for the bridge, not one per watch per poll
    messages = [r.getMessage() for r in caplog.records]
    for name in ("Pod", "Event"):
        assert len([m for m in messages if m.startswith(f"{name} (all namespaces): HTTP 503") or
                    (m.startswith(f"{name} (all namespaces):") and "retrying with backoff" in m)]) == 1, messages
        assert len([m for m in messages if m.startswith(f"{name} (all namespaces): recovered after")]) == 1, messages


def test_a_server_that_is_ready_but_refuses_one_resource_keeps_the_backoff(kube, api):
    """/readyz says ready throughout: no comeback, so the 503s of one resource are retried
    with the backoff, not at every probe."""
    kube.create("pods", pod("p"))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", backoff_initial=0.4, backoff_max=3.0)))
    wait_for(lambda: len(sink.records) == 1)
    before = len(kube.requests_of("watch", "pods")) + len(kube.requests_of("list", "pods"))
    kube.set_unavailable_for("pods", True)
    time.sleep(3.0)
    tries = len(kube.requests_of("watch", "pods")) + len(kube.requests_of("list", "pods")) - before
    kube.set_unavailable_for("pods", False)
    wait_for(lambda: running.bridge.watches[0].progress.live, what="the watch back")
    running.stop()
    # Delays 0.2-0.4, 0.4-0.8, 0.8-1.6, 1.5-3: at most 5 tries in 3 s (a probe every 0.5 s would be 6+).
    assert tries <= 5, tries
    assert running.bridge.watches[0].counts["comebacks"] == 0


@pytest.mark.parametrize("gone_as", ["event", "http"])
def test_relist_after_gone_publishes_net_changes_deletions_and_a_gap(kube_factory, api_factory, gone_as):
    kube = kube_factory(gone_as=gone_as)
    api = api_factory(kube)
    for name in ("a", "b", "c"):
        kube.create("pods", pod(name))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod")))
    wait_for(lambda: len(sink.records) == 3)
    b_before = orjson.loads(sink.records[1].value)["object"]
    kube.update("pods", "ml", "b", set_phase("Failed"))
    wait_for(lambda: len(sink.records) == 4)
    b_last = orjson.loads(sink.records[3].value)["object"]
    lost_at = sink.records[3]
    kube.set_unavailable(True)  # the watch breaks; while it is down:
    kube.delete("pods", "ml", "b")
    kube.update("pods", "ml", "c", bump)
    kube.update("pods", "ml", "c", bump)
    kube.create("pods", pod("d"))
    kube.compact()  # ... and the history is gone
    kube.set_unavailable(False)
    wait_for(lambda: sink.gaps, what="the gap marker")
    running.stop()

    after = sink.changes()[4:]
    assert sorted((t, n) for t, n, _ in after) == [("ADDED", "d"), ("DELETED", "b"), ("MODIFIED", "c")]  # a: unchanged
    deleted = next(e["object"] for e in sink.envelopes()[4:] if e["type"] == "DELETED")
    assert deleted == b_last != b_before  # the last object published
    assert next(rv for _, n, rv in after if n == "c") == kube.get("pods", "ml", "c")["metadata"]["resourceVersion"]
    [gap] = sink.gaps
    assert gap.kind == "Pod" and gap.namespace is None and gap.cluster == CLUSTER
    assert gap.from_resource_version == orjson.loads(lost_at.value)["object"]["metadata"]["resourceVersion"]
    assert gap.relisted_resource_version == str(kube.rv)
    assert gap.deleted == 1 and gap.deletions_complete
    assert sink.positions.load(CLUSTER)["Pod"].resource_versions[ALL_NAMESPACES] == str(kube.rv)
    gone = [r for r in kube.requests_of("watch", "pods") if r.params["resourceVersion"] == gap.from_resource_version]
    assert gone[-1].code == (410 if gone_as == "http" else 200)


def test_relist_after_gone_converges_over_many_pages(kube, api):
    import random

    rng = random.Random(3)
    for i in range(300):
        kube.create("pods", pod(f"p{i:03d}"))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", page_size=37)))
    wait_for(lambda: len(sink.records) == 300)
    kube.set_unavailable(True)
    wait_for(lambda: not kube.watches, what="the watch to break")
    alive = {f"p{i:03d}" for i in range(300)}
    for i in range(400):
        action = rng.random()
        if action < 0.2 and alive:
            name = rng.choice(sorted(alive))
            kube.delete("pods", "ml", name)
            alive.discard(name)
        elif action < 0.4:
            name = f"n{i:03d}"
            kube.create("pods", pod(name))
            alive.add(name)
        elif alive:
            kube.update("pods", "ml", rng.choice(sorted(alive)), bump)
    kube.compact()
    kube.set_unavailable(False)
    wait_for(lambda: sink.gaps, what="the gap marker")
    running.stop()
    last: dict[str, dict] = {}
    for e in sink.envelopes():
        last[e["object"]["metadata"]["uid"]] = e
    live = {e["object"]["metadata"]["name"]: e["object"] for e in last.values() if e["type"] != "DELETED"}
    assert set(live) == alive
    for name, obj in live.items():
        assert obj == served_as_watch_object(kube, "pods", "ml", name)
    vanished = {f"p{i:03d}" for i in range(300)} - alive
    assert sink.gaps[0].deleted == len(vanished) > 0
    assert len(running.bridge.watches[0].known) == len(alive)


def test_watch_stops_promptly_and_leaves_no_thread(kube, api):
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(watch_timeout=3600)))
    wait_for(lambda: len(kube.requests_of("watch", "pods")) == 1 and len(kube.watches) == len(KINDS), what="every watch")
    started = time.monotonic()
    running.stop()
    assert time.monotonic() - started < 3.0
    assert not [t for t in threading.enumerate() if t.name.startswith("faultline-watch")]
