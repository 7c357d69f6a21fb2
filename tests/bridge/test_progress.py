"""Progress records (SPEC R12.1, R12.2): the record, when a watch's progress moves and
when it stops, the slowest of a topic, and the order against the records it speaks for."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import orjson
from msgspec.structs import replace

from app.bridge.bridge import Bridge
from app.bridge.progress import CATCH_UP_QUIET_US, StreamMark, StreamProgress, slowest_per_topic, with_unwatched
from app.bridge.records import EnvelopeWriter, SourceRecord, now_us
from tests.bridge.helpers import CLUSTER, MemorySink, Running, bump, pod, settings, wait_for


class Clock:
    """Virtual time in microseconds: the tests move it, nothing sleeps."""

    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, us: int) -> int:
        self.now += us
        return self.now


def time_of(value: bytes) -> int:
    at = datetime.strptime(orjson.loads(value)["observed_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    return int(at.timestamp()) * 1_000_000 + at.microsecond


# --- one watch's progress ---------------------------------------------------------------


def test_r12_2_a_watch_claims_nothing_until_it_was_first_live():
    clock = Clock()
    progress = StreamProgress(clock)
    assert progress.snapshot() == (None, 0)
    progress.catching_up(fence=None)
    clock.advance(CATCH_UP_QUIET_US - 1)
    assert progress.snapshot()[0] is None  # still catching up


def test_r12_2_a_live_watch_moves_with_the_clock_and_stops_where_it_broke():
    clock = Clock()
    progress = StreamProgress(clock)
    progress.catching_up(fence=None)
    live_at = clock.advance(CATCH_UP_QUIET_US)
    assert progress.snapshot()[0] == live_at
    broke_at = clock.advance(5_000_000)
    progress.stalled()
    clock.advance(60_000_000)
    assert progress.snapshot()[0] == broke_at  # disconnected, retrying, relisting: no further


def test_r12_2_records_being_handed_over_hold_progress_at_their_time():
    clock = Clock()
    progress = StreamProgress(clock)
    progress.catching_up(fence=None)
    clock.advance(CATCH_UP_QUIET_US)
    stamp = progress.receiving()  # read now, not yet in the outbox
    clock.advance(1_000_000)
    assert progress.snapshot() == (stamp, 0)
    progress.handed("5")
    assert progress.snapshot() == (clock.now, 1)


def test_r12_2_after_a_reconnect_the_watch_is_live_once_it_delivered_the_revision_the_server_had():
    clock = Clock()
    progress = StreamProgress(clock)
    progress.catching_up(fence=None)
    clock.advance(CATCH_UP_QUIET_US)
    broke_at = clock.advance(1)
    progress.stalled()
    clock.advance(10_000_000)
    progress.catching_up(fence=500)  # the server replays the backlog first
    for rv in ("100", "200", "499"):
        progress.receiving()
        clock.advance(1_000)
        progress.handed(rv)
        assert progress.snapshot()[0] == broke_at
    progress.receiving()
    progress.handed("500")
    assert progress.snapshot()[0] == clock.now


def test_r12_2_a_quiet_watch_is_live_after_a_moment_without_anything_to_replay():
    clock = Clock()
    progress = StreamProgress(clock)
    progress.catching_up(fence=10_000)
    clock.advance(CATCH_UP_QUIET_US - 1)
    assert progress.snapshot()[0] is None
    clock.advance(1)
    assert progress.snapshot()[0] == clock.now


def test_r12_2_a_kind_that_is_not_served_holds_nothing_back():
    clock = Clock()
    progress = StreamProgress(clock)
    progress.absent()
    assert progress.snapshot()[0] == clock.now


def test_r12_2_a_topic_progresses_at_its_slowest_watch_and_not_at_all_while_one_was_never_live():
    marks = [
        StreamMark("k8s.jobs", "JobSet", "jobset.x-k8s.io/v1alpha2", "10", 300),
        StreamMark("k8s.jobs", "RayJob", "ray.io/v1", "11", 200),
        StreamMark("k8s.jobs", "TFJob", "kubeflow.org/v1", "12", 400),
        StreamMark("k8s.pods", "Pod", "v1", "13", 500),
        StreamMark("k8s.pods", "Pod", "v1", "14", 100),  # another namespace scope
        StreamMark("k8s.workloads", "Workload", "kueue.x-k8s.io/v1beta2", "15", 900),
        StreamMark("k8s.workloads", "Workload", "kueue.x-k8s.io/v1beta2", "", None),
    ]
    slowest = slowest_per_topic(marks)
    assert slowest == {"k8s.jobs": marks[1], "k8s.pods": marks[4]}


def test_r12_2_a_topic_none_of_the_bridges_kinds_feed_progresses_with_the_latest_of_the_others():
    """`--kinds Pod,Event`: nothing is published to k8s.jobs or k8s.workloads, so nothing
    there is held back; a worker's stream time waits for every topic it hears (R12.5), so
    those topics progress too, at the latest time of the watched ones, once there is one."""
    unwatched = [StreamMark("k8s.jobs", "RayJob", "ray.io/v1", "", None), StreamMark("k8s.workloads", "Workload", "kueue.x-k8s.io/v1beta2", "", None)]
    assert with_unwatched({}, unwatched) == {}  # no watch live yet: nothing is claimed
    pods, events = StreamMark("k8s.pods", "Pod", "v1", "7", 500), StreamMark("k8s.events", "Event", "v1", "9", 700)
    got = with_unwatched({"k8s.pods": pods, "k8s.events": events}, unwatched)
    assert got == {"k8s.pods": pods, "k8s.events": events, "k8s.jobs": replace(unwatched[0], at=700), "k8s.workloads": replace(unwatched[1], at=700)}


def test_r12_1_the_progress_record():
    value = EnvelopeWriter("prod-a").bookmark("2026-09-15T10:30:01.123456Z", "v1", "Pod", "42")
    assert orjson.loads(value) == {
        "type": "BOOKMARK",
        "observed_at": "2026-09-15T10:30:01.123456Z",
        "cluster": "prod-a",
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"resourceVersion": "42"}},
    }


# --- the bridge's progress, through the double ---------------------------------------


class OrderSink(MemorySink):
    """Logs records, flushes and progress in the order the bridge calls them."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple] = []
        self._log_lock = threading.Lock()

    def publish(self, record: SourceRecord) -> None:
        super().publish(record)
        self.log.append(("record", record.topic, time_of(record.value)))

    def publish_progress(self, topic: str, key: str, value: bytes) -> None:
        super().publish_progress(topic, key, value)
        self.log.append(("progress", topic, time_of(value)))

    def flush(self) -> None:
        super().flush()
        self.log.append(("flush",))


def test_r12_2_progress_follows_a_flush_and_no_record_before_its_time_comes_after_it(kube, api):
    sink = OrderSink()
    running = Running(Bridge(api, sink, settings(kinds="Pod,Event", progress_interval=0.01)))
    wait_for(lambda: {t for t, _, _ in sink.progress} >= {"k8s.pods", "k8s.events"}, what="progress on both topics")
    for i in range(300):
        kube.create("pods", pod(f"p{i}"))
        kube.create("events", {"metadata": {"name": f"e{i}", "namespace": "ml"}, "involvedObject": {"uid": f"u{i}"}})
    wait_for(lambda: len(sink.records) == 600, what="600 records")
    wait_for(lambda: len(sink.progress) > 20, what="progress during the burst")
    running.stop()
    log = list(sink.log)
    for i, entry in enumerate(log):
        if entry[0] != "progress":
            continue
        _, topic, at = entry
        later = [e for e in log[i + 1 :] if e[0] == "record" and e[1] == topic and e[2] < at]
        assert later == [], f"a {topic} record from before the progress time came after it"
        last_before = max((j for j, e in enumerate(log[:i]) if e[0] == "record" and e[1] == topic), default=-1)
        assert ("flush",) in log[last_before + 1 : i], "no flush between the records and their progress"
    times = [e[2] for e in log if e[0] == "progress" and e[1] == "k8s.pods"]
    assert times == sorted(set(times))  # always forward
    # The topics no watched kind feeds progress with the others, named by their first kind.
    named = {t: orjson.loads(v)["object"]["kind"] for t, _, v in sink.progress if t in ("k8s.jobs", "k8s.workloads")}
    assert named == {"k8s.jobs": "RayJob", "k8s.workloads": "Workload"}


def test_r12_2_a_cut_watch_stops_its_kind_progress_until_it_is_live_again(kube, api):
    kube.create("pods", pod("p"))
    kube.create("workloads", {"metadata": {"name": "w", "namespace": "ml"}, "spec": {}})
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod,Workload", progress_interval=0.02)))
    wait_for(lambda: {t for t, _, _ in sink.progress} >= {"k8s.pods", "k8s.workloads"}, what="progress on both topics")

    def last(topic: str) -> int:
        return max(time_of(v) for t, _, v in list(sink.progress) if t == topic)

    kube.set_unavailable_for("workloads", True)  # its watch breaks; every retry is 503
    [workloads] = [w for w in running.bridge.watches if w.kind.name == "Workload"]
    wait_for(lambda: workloads.counts["retries"] >= 3, what="the Workload watch retrying")
    cut = now_us()  # the watch is down by now
    wait_for(lambda: last("k8s.pods") > cut + 200_000, what="Pod progress going on")
    stalled = last("k8s.workloads")
    assert stalled < cut  # a change made now would arrive later: not claimed
    kube.update("workloads", "ml", "w", bump)  # made during the outage
    kube.set_unavailable_for("workloads", False)
    wait_for(lambda: last("k8s.workloads") > stalled, what="Workload progress again")
    running.stop()
    change = next(r for r in sink.records if r.topic == "k8s.workloads" and orjson.loads(r.value)["type"] == "MODIFIED")
    assert time_of(change.value) > stalled  # published after the outage, as progress said


def test_r12_2_a_topic_fed_by_several_kinds_waits_for_the_slowest(kube, api):
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="JobSet,RayJob", progress_interval=0.02)))
    wait_for(lambda: sink.progress, what="k8s.jobs progress")

    def jobs_progress() -> list[int]:
        return [time_of(v) for t, _, v in list(sink.progress) if t == "k8s.jobs"]

    kube.set_unavailable_for("rayjobs", True)
    [rayjobs] = [w for w in running.bridge.watches if w.kind.name == "RayJob"]
    wait_for(lambda: rayjobs.counts["retries"] >= 2, what="the RayJob watch retrying")
    cut = now_us()
    kube.create("jobsets", {"metadata": {"name": "js", "namespace": "ml"}, "spec": {}})  # its own watch is live
    record = wait_for(lambda: next((r for r in sink.records if r.topic == "k8s.jobs"), None), what="the JobSet record")
    wait_for(lambda: rayjobs.counts["retries"] >= 6, what="more RayJob retries")
    assert max(jobs_progress()) < cut < time_of(record.value)  # held back by RayJob, JobSet live or not
    kube.set_unavailable_for("rayjobs", False)
    wait_for(lambda: max(jobs_progress()) > time_of(record.value), what="k8s.jobs progress again")
    running.stop()
    for topic, key, value in sink.progress:
        assert orjson.loads(value)["object"]["kind"] == key  # names the kind that held the topic back


def test_r12_2_k8s_jobs_progresses_at_its_slowest_kind_and_an_uninstalled_trainjob_holds_nothing_back(kube, api):
    """k8s.jobs is fed by eight kinds (TrainJob and batch Jobs among them, SPEC R13.2):
    with the TrainJob CRD not installed the topic progresses; with the Job watch cut it
    stops, and its progress record names Job; TrainJob installed later is picked up."""
    kube.uninstall("trainjobs")
    sink = MemorySink()
    jobs_kinds = "RayJob,PyTorchJob,TFJob,MPIJob,JAXJob,JobSet,TrainJob,Job"
    running = Running(Bridge(api, sink, settings(kinds=jobs_kinds, progress_interval=0.02, crd_recheck=0.2)))

    def jobs_progress() -> list[tuple[str, int]]:
        return [(k, time_of(v)) for t, k, v in list(sink.progress) if t == "k8s.jobs"]

    wait_for(lambda: jobs_progress(), what="k8s.jobs progress without TrainJob")
    [batch] = [w for w in running.bridge.watches if w.kind.name == "Job"]
    kube.set_unavailable_for("jobs", True)
    wait_for(lambda: batch.counts["retries"] >= 2, what="the Job watch retrying")
    cut = now_us()
    wait_for(lambda: batch.counts["retries"] >= 5, what="more Job retries")
    held = [at for _, at in jobs_progress()]
    assert max(held) < cut and jobs_progress()[-1][0] == "Job"  # held back, by Job, named
    kube.set_unavailable_for("jobs", False)
    wait_for(lambda: max(at for _, at in jobs_progress()) > cut, what="k8s.jobs progress again")
    kube.install("trainjobs")
    kube.create("trainjobs", {"metadata": {"name": "tj", "namespace": "ml"}, "spec": {}})
    record = wait_for(lambda: next((r for r in sink.records if orjson.loads(r.value)["object"]["kind"] == "TrainJob"), None), what="the TrainJob")
    wait_for(lambda: max(at for _, at in jobs_progress()) > time_of(record.value), what="progress past the TrainJob")
    running.stop()


def test_r12_2_progress_records_name_their_cluster_kind_and_position(kube, api):
    kube.create("pods", pod("p"))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", progress_interval=0.02)))
    wait_for(lambda: any(t == "k8s.pods" for t, _, _ in sink.progress), what="progress")
    running.stop()
    topic, key, value = [p for p in sink.progress if p[0] == "k8s.pods"][-1]
    record = orjson.loads(value)
    assert (topic, key) == ("k8s.pods", "Pod")
    assert record["type"] == "BOOKMARK" and record["cluster"] == CLUSTER
    assert record["object"] == {"apiVersion": "v1", "kind": "Pod", "metadata": {"resourceVersion": running.bridge.watches[0].rv}}


def test_r12_2_a_flush_that_fails_is_followed_by_no_progress(kube, api):
    from app.bridge.errors import DeliveryError

    class FailingSink(OrderSink):
        fail = False

        def flush(self) -> None:
            if self.fail:
                self.log.append(("failed flush",))
                raise DeliveryError("broker gone")
            super().flush()

    kube.create("pods", pod("a"))
    sink = FailingSink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", progress_interval=0.02)))
    wait_for(lambda: len(sink.progress) >= 2, what="progress")
    sink.fail = True
    kube.update("pods", "ml", "a", bump)
    running.join()
    assert isinstance(running.error, DeliveryError)
    failed = sink.log.index(("failed flush",))
    assert [e for e in sink.log[failed:] if e[0] == "progress"] == []
