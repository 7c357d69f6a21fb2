"""A restarted bridge resumes from its checkpointed positions: no change missed, nothing
republished that had not changed, and a position never overtakes its records."""

from __future__ import annotations

import time

import orjson
import pytest

from app.bridge.errors import DeliveryError
from app.bridge.positions import MemoryPositions
from app.bridge.bridge import Bridge
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


def first_run(kube, api, positions: MemoryPositions, names: list[str]) -> MemorySink:
    for name in names:
        kube.create("pods", pod(name))
    sink = MemorySink(positions)
    running = Running(Bridge(api, sink, settings(kinds="Pod")))
    wait_for(lambda: len(sink.records) == len(names))
    wait_for(lambda: running.position("Pod") == str(kube.rv), what="the checkpoint")
    running.stop()
    return sink


def test_restart_resumes_from_the_checkpoint_with_no_missed_change(kube, api):
    positions = MemoryPositions()
    first = first_run(kube, api, positions, [f"p{i}" for i in range(10)])
    saved = positions.load(CLUSTER)["Pod"].resource_versions["*"]
    lists_before = len(kube.requests_of("list", "pods"))

    # While the bridge is down:
    kube.update("pods", "ml", "p1", set_phase("Failed"))
    kube.delete("pods", "ml", "p2")
    kube.create("pods", pod("p10"))
    kube.update("pods", "ml", "p10", bump)
    # A pod's deletion: its deletionTimestamp (MODIFIED), then DELETED.
    down_time = [("MODIFIED", "p1"), ("MODIFIED", "p2"), ("DELETED", "p2"), ("ADDED", "p10"), ("MODIFIED", "p10")]

    second = MemorySink(positions)
    running = Running(Bridge(api, second, settings(kinds="Pod")))
    wait_for(lambda: len(second.records) == 5)
    kube.update("pods", "ml", "p3", bump)  # and after the restart, as usual
    wait_for(lambda: len(second.records) == 6)

    assert [(t, n) for t, n, _ in second.changes()] == [*down_time, ("MODIFIED", "p3")]
    watch = kube.requests_of("watch", "pods")[-1]
    assert watch.params["resourceVersion"] == saved  # resumed where the first run stood
    seed = [r for r in kube.requests_of("list", "pods")[lists_before:] if r.params.get("limit") != "1"]
    assert [(r.params.get("resourceVersion"), r.params.get("resourceVersionMatch")) for r in seed] == [(saved, "Exact")]

    # The restarted bridge knows what the first run published: a 410 relist now names
    # p4, published only by the first run, as deleted, with its last published object.
    p4_published = next(e["object"] for e in first.envelopes() if e["object"]["metadata"]["name"] == "p4")
    kube.set_unavailable(True)
    wait_for(lambda: not kube.watches, what="the watch to break")
    kube.delete("pods", "ml", "p4")
    kube.compact()
    kube.set_unavailable(False)
    wait_for(lambda: second.gaps, what="the gap marker")
    running.stop()
    deleted = [e["object"] for e in second.envelopes()[6:] if e["type"] == "DELETED"]
    assert deleted == [p4_published]
    assert second.gaps[0].deleted == 1 and second.gaps[0].deletions_complete


def test_restart_when_only_the_watch_cache_forgot_still_names_the_deletions(kube, api):
    positions = MemoryPositions()
    first_run(kube, api, positions, ["a", "b", "c"])
    kube.update("pods", "ml", "a", bump)
    kube.delete("pods", "ml", "b")
    kube.compact(etcd=False)  # the watch from the position is 410; etcd still has its state

    second = MemorySink(positions)
    running = Running(Bridge(api, second, settings(kinds="Pod")))
    wait_for(lambda: second.gaps)
    running.stop()
    assert sorted((t, n) for t, n, _ in second.changes()) == [("DELETED", "b"), ("MODIFIED", "a")]
    assert second.gaps[0].deleted == 1 and second.gaps[0].deletions_complete


def test_restart_after_the_position_was_compacted_away_relists_and_says_so(kube, api):
    positions = MemoryPositions()
    first_run(kube, api, positions, ["a", "b", "c"])
    kube.update("pods", "ml", "a", bump)
    kube.delete("pods", "ml", "b")
    kube.compact(etcd=True)  # neither the watch nor an Exact list can start there

    second = MemorySink(positions)
    running = Running(Bridge(api, second, settings(kinds="Pod")))
    wait_for(lambda: second.gaps)
    running.stop()
    # Everything that exists is published again; b's deletion cannot be known, and the gap says so.
    assert sorted((t, n) for t, n, _ in second.changes()) == [("ADDED", "a"), ("ADDED", "c")]
    [gap] = second.gaps
    assert gap.deleted == 0 and not gap.deletions_complete


class LoggingSink(MemorySink):
    """Logs publish/flush/save in order; flush fails when told to."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, int]] = []
        self.fail_flush = False
        outer = self

        class Positions(MemoryPositions):
            def save(self, positions):
                positions = list(positions)
                for p in positions:
                    outer.log.append(("save", int(p.resource_versions["*"])))
                super().save(positions)

        self.positions = Positions()

    def publish(self, record):
        super().publish(record)
        self.log.append(("publish", int(orjson.loads(record.value)["object"]["metadata"]["resourceVersion"])))

    def flush(self):
        if self.fail_flush:
            raise DeliveryError("broker gone")
        super().flush()
        self.log.append(("flush", 0))


def test_a_position_is_saved_only_after_a_flush_that_covers_its_records(kube, api):
    sink = LoggingSink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", checkpoint_interval=0.01)))
    wait_for(lambda: kube.watches, what="the watch")
    for i in range(200):
        kube.create("pods", pod(f"p{i}"))
        if i % 20 == 0:
            kube.update("pods", "ml", "p0", bump)
            time.sleep(0.02)
    wait_for(lambda: running.position("Pod") == str(kube.rv))
    running.stop()
    saves = [i for i, (what, _) in enumerate(sink.log) if what == "save"]
    assert len(saves) > 1
    for i in saves:
        position = sink.log[i][1]
        last_publish = max((j for j, (what, rv) in enumerate(sink.log[:i]) if what == "publish" and rv <= position), default=None)
        if last_publish is None:
            continue  # the first checkpoint, of an empty list
        assert any(what == "flush" for what, _ in sink.log[last_publish:i]), f"save {position} without a flush after its records"


def test_a_failed_flush_stops_the_bridge_without_saving_the_position(kube, api):
    kube.create("pods", pod("a"))
    sink = LoggingSink()
    running = Running(Bridge(api, sink, settings(kinds="Pod")))
    wait_for(lambda: running.position("Pod") == str(kube.rv))
    saved = running.position("Pod")
    sink.fail_flush = True
    kube.update("pods", "ml", "a", bump)
    running.join()
    assert isinstance(running.error, DeliveryError)
    assert running.position("Pod") == saved  # the record after it may not be in Kafka: resume before it


def test_max_records_never_saves_the_position_of_a_partly_published_batch(kube, api):
    for i in range(10):
        kube.create("pods", pod(f"p{i}"))
    sink = MemorySink()
    bridge = Bridge(api, sink, settings(kinds="Pod", page_size=100))
    running = Running(bridge, max_records=4)
    running.join()
    assert running.error is None
    assert len(sink.records) == 4
    assert running.position("Pod") is None  # the list's position covers ten records


@pytest.mark.parametrize("namespaces", ["ml,infer"])
def test_positions_are_kept_per_namespace(kube, api, namespaces):
    kube.create("pods", pod("a", namespace="ml"))
    kube.create("pods", pod("b", namespace="infer"))
    positions = MemoryPositions()
    sink = MemorySink(positions)
    running = Running(Bridge(api, sink, settings(kinds="Pod", namespaces=namespaces)))
    wait_for(lambda: running.position("Pod", "ml") and running.position("Pod", "infer"))
    running.stop()
    kube.update("pods", "infer", "b", bump)
    second = MemorySink(positions)
    running = Running(Bridge(api, second, settings(kinds="Pod", namespaces=namespaces)))
    wait_for(lambda: len(second.records) == 1)
    running.stop()
    assert second.changes()[0][:2] == ("MODIFIED", "b")
    # A bridge over all namespaces has no saved position for that scope: it lists.
    third = MemorySink(positions)
    running = Running(Bridge(api, third, settings(kinds="Pod")))
    wait_for(lambda: len(third.records) == 2)
    running.stop()
    assert {t for t, _, _ in third.changes()} == {"ADDED"}
