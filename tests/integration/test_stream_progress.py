"""SPEC R12 on a real broker: a decision that waits on an absence is taken on the bridge's
progress alone, within `progress_interval + watch_skew + 2 s` of the record it waits on.

The records are published as the bridge would, stamped with the wall clock when sent, and
then nothing but the bridge's progress: a BOOKMARK to every partition of k8s.jobs and
k8s.workloads every second (what `faultline bridge` writes; tests/bridge covers the bridge
producing them)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from app.core.base.rules import DEFAULT_RULES
from app.model.envelope import JOBS, WORKLOADS
from app.model.records import CLASSIFIED_FAILURES, GANG_TRANSITIONS
from tests.unit.gang_builders import GangWorld
from tests.unit.stories import pod_task_plain_failure

PROGRESS_INTERVAL = 1.0  # the bridge's default progress_interval
BOUND = PROGRESS_INTERVAL + DEFAULT_RULES.watch_skew_seconds + 2


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Bridge:
    """Publishes records stamped now, and progress every second to every partition."""

    def __init__(self, bootstrap: str, prefix: str, partitions: int) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        self.prefix, self.partitions = prefix, partitions
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._progress, name="bridge-progress", daemon=True)
        self.lock = threading.Lock()

    def publish(self, line: dict) -> float:
        """Send one record as observed now; returns when Kafka acknowledged it (monotonic)."""
        with self.lock:
            value = {**line["value"], "observed_at": _stamp(datetime.now(UTC))}
            self.producer.send(self.prefix + line["topic"], key=line["key"].encode(), value=orjson.dumps(value)).get(timeout=30)
            return time.monotonic()

    def _progress(self) -> None:
        while not self.stopped.wait(PROGRESS_INTERVAL):
            with self.lock:  # never ahead of a record not yet acknowledged
                at = _stamp(datetime.now(UTC))
                for topic, kind in ((JOBS, "JobSet"), (WORKLOADS, "Workload")):
                    value = {"type": "BOOKMARK", "observed_at": at, "cluster": "prod-a", "object": {"kind": kind, "metadata": {}}}
                    for partition in range(self.partitions):
                        self.producer.send(self.prefix + topic, key=kind.encode(), value=orjson.dumps(value), partition=partition)
                self.producer.flush(timeout=30)

    def __enter__(self) -> Bridge:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)
        self.producer.close()


def _gang(name: str, *, evicted_first: bool) -> GangWorld:
    world = GangWorld(policy="false", start=datetime.now(UTC), step=timedelta(milliseconds=1))
    world.js["metadata"].update(name=name, uid=f"{name}-uid")
    world.wl["metadata"].update(name=f"{name}-wl", uid=f"{name}-wl-uid", labels={"kueue.x-k8s.io/job-uid": f"{name}-uid"})
    world.wl["metadata"]["ownerReferences"][0].update(name=name, uid=f"{name}-uid")
    world.start()
    if evicted_first:
        world.preempt()  # Kueue's eviction, then the JobSet is seen suspended; no record after
    return world.suspend(status_update=False)


@pytest.mark.integration
def test_r12_a_suspended_gang_ends_on_the_bridges_progress_alone(stream_stack) -> None:
    stream_stack.start_worker()
    preempted = _gang("preempted", evicted_first=True)  # R9.4 policy off: Ended, user
    unexplained = _gang("unexplained", evicted_first=False)  # R9.6: no eviction by the skew: Ended, system
    with Bridge(stream_stack.bootstrap, stream_stack.prefix, stream_stack.partitions) as bridge:
        # The worker is running once a pod task's verdict comes out (no progress needed).
        for line in pod_task_plain_failure():
            bridge.publish(line)
        stream_stack.wait_for(CLASSIFIED_FAILURES, lambda records: len(records) > 0)
        suspended = {}
        for world in (preempted, unexplained):
            for line in world.records:
                at = bridge.publish(line)
            suspended[world.js["metadata"]["name"]] = at  # the suspension is each gang's last record
        ended: dict[str, tuple[float, dict]] = {}
        deadline = time.monotonic() + 60
        while len(ended) < 2 and time.monotonic() < deadline:
            for record in stream_stack.read(GANG_TRANSITIONS):
                value = orjson.loads(record.value)
                name = value["jobset"]["name"]
                if value["to"] == "Ended" and name not in ended:
                    ended[name] = (time.monotonic(), value)
            time.sleep(0.2)
    assert set(ended) == {"preempted", "unexplained"}, f"not ended within 60 s: {sorted(suspended.keys() - ended.keys())}"
    assert (ended["preempted"][1]["code"], ended["preempted"][1]["retry"]) == ("GangEvicted", "user")
    assert (ended["unexplained"][1]["code"], ended["unexplained"][1]["retry"]) == ("GangEvicted", "system")
    for name, (at, _) in ended.items():
        # Polling the output topic adds up to ~0.5 s to what is measured.
        assert at - suspended[name] <= BOUND, f"{name} ended {at - suspended[name]:.1f} s after its suspension (bound {BOUND} s)"
