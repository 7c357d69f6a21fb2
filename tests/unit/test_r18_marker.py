"""The mark's driver (app/mark/marker.py) over a stand-in for the API server's pods: which
skips it remembers, and how it reads again a pod that changed under its patch (SPEC R18.2).
The real API server's answers are tested in tests/bridge/test_apiserver_mark.py; a pod that
changes between every read and patch, or a crash seen between two container states, is what
a stand-in can make certain."""

from __future__ import annotations

import threading

import msgspec
import orjson

from app.core.actions.marking import GPU_FAULT_CONDITION
from app.core.base.rules import DEFAULT_RULES
from app.mark.kube import FetchedPod, Patched
from app.mark.marker import MAX_TRIES, Marker
from app.mark.metrics import MarkMetrics
from app.model.k8s import Pod
from app.model.records import Fault
from tests.unit.builders import T0, event, minutes, pod, record, running, terminated, updated
from tests.unit.scenario import faults

_pod = msgspec.json.Decoder(Pod)


class Pods:
    """The pod as served at each read (the last one again after the list), and the answer
    to every patch."""

    def __init__(self, served: list[dict | None], patch: Patched = "patched") -> None:
        self.served, self.patch, self.gets, self.patches = served, patch, 0, 0

    def get(self, namespace: str, name: str) -> FetchedPod | None:
        obj = self.served[min(self.gets, len(self.served) - 1)]
        self.gets += 1
        return None if obj is None else FetchedPod(_pod.decode(orjson.dumps(obj)), str(self.gets))

    def add_condition(self, *args: object) -> Patched:
        self.patches += 1
        return self.patch


class Waits(threading.Event):
    """A stop that is never asked for, keeping how long each wait would have been."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.append(timeout or 0.0)
        return False


def _marker(api: Pods, stop: threading.Event | None = None) -> tuple[Marker, MarkMetrics]:
    metrics = MarkMetrics()
    marker = Marker(api, cluster="prod-a", condition_type=GPU_FAULT_CONDITION, rules=DEFAULT_RULES, metrics=metrics,
                    stop=stop or threading.Event(), concurrency=1)  # fmt: skip
    return marker, metrics


def _skips(metrics: MarkMetrics) -> dict[str, int]:
    return {reason: n for reason, n in metrics.snapshot().skips.items() if n}


def _running() -> dict:
    return pod("trainer-0", containers={"main": running(T0 - minutes(30))})


def _fault(p: dict) -> Fault:
    [fault] = faults([record(p, T0 - minutes(30), "ADDED"), record(event(p), T0 - minutes(1))])
    return fault


def test_r18_2_a_pod_whose_containers_stopped_while_it_runs_is_read_again_for_its_next_fault() -> None:
    # The instant after a crash: every container terminated, the phase still Running. With
    # restartPolicy Always or OnFailure the kubelet starts it again: not remembered as ended.
    p = _running()
    crashed = updated(p, containerStatuses=[{"name": "main", "state": terminated(1, T0)}])
    api = Pods([crashed, p])
    marker, metrics = _marker(api)
    fault = _fault(p)
    assert fault.cluster == "prod-a"
    assert marker.mark(fault) is False and api.gets == 1
    assert marker.mark(fault) is True and (api.gets, api.patches) == (2, 1)
    assert _skips(metrics) == {"ended": 1}


def test_r18_2_a_pod_gone_failed_or_marked_is_remembered() -> None:
    p = _running()
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0)}])
    for served in ([None, p], [failed, p]):
        api = Pods(served)
        marker, _ = _marker(api)
        assert marker.mark(_fault(p)) is False and marker.mark(_fault(p)) is False
        assert api.gets == 1 and api.patches == 0  # the second fault asked nothing
    api = Pods([p])
    marker, metrics = _marker(api)
    assert marker.mark(_fault(p)) is True and marker.mark(_fault(p)) is False
    assert (api.gets, api.patches) == (1, 1) and _skips(metrics) == {"already_marked": 1}


def test_r18_2_a_pod_that_changes_under_every_patch_is_read_again_after_a_growing_wait() -> None:
    p = _running()
    api = Pods([p], patch="conflict")
    stop = Waits()
    marker, metrics = _marker(api, stop)
    assert marker.mark(_fault(p)) is False
    assert (api.gets, api.patches) == (MAX_TRIES, MAX_TRIES)
    assert len(stop.waited) == MAX_TRIES - 1 and 0 < stop.waited[0] <= 0.05 and max(stop.waited) <= 1.0
    assert stop.waited[-1] > stop.waited[0]  # it backs off instead of asking again at once
    snapshot = metrics.snapshot()
    assert (snapshot.conflicts, snapshot.refused) == (MAX_TRIES, 1)


def test_r18_2_a_pod_deleted_under_the_patch_is_read_again_and_skipped_not_counted_as_a_conflict() -> None:
    p = _running()
    api = Pods([p, None], patch="gone")
    marker, metrics = _marker(api)
    assert marker.mark(_fault(p)) is False
    assert (api.gets, api.patches, metrics.snapshot().conflicts, _skips(metrics)) == (2, 1, 0, {"ended": 1})
