"""SPEC R7: time order, late data, determinism, bounded state."""

from __future__ import annotations

import random
from datetime import timedelta

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.model.records import CLASSIFIED_FAILURES, FAULTS
from app.replay.trace import encode_output
from tests.unit.builders import T0, event, minutes, pod, record, running, terminated, updated
from tests.unit.drivers import new_pipeline
from tests.unit.scenario import final_verdicts, run, verdicts
from tests.unit.stories import EVIDENCE_STORIES, STORIES, WORKLOAD_STORIES, late_fault

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def _object_id(r: dict) -> str:
    return r["value"]["object"]["metadata"]["uid"]


def interleave(records: list[dict], rnd: random.Random) -> list[dict]:
    """A random interleaving that keeps each object's own updates in order."""
    queues: dict[str, list[dict]] = {}
    for r in records:
        queues.setdefault(_object_id(r), []).append(r)
    pending = [list(reversed(q)) for q in queues.values()]
    out = []
    while pending:
        queue = rnd.choice(pending)
        out.append(queue.pop())
        if not queue:
            pending.remove(queue)
    return out


def final_state(records: list[dict]) -> dict[str, bytes]:
    """Latest record per (topic, key), revision aside (it counts emissions, R7.2); a
    derived count that went back to zero is the same as none (a revision moved it)."""
    latest: dict[str, bytes] = {}
    for emit in run(records, derived=True):
        value = emit.value
        if emit.topic == CLASSIFIED_FAILURES:
            value = msgspec.structs.replace(value, revision=0)
        latest[f"{emit.topic} {emit.key}"] = msgspec.json.encode(value)
    return {k: v for k, v in latest.items() if not _zero(v)}


def _zero(value: bytes) -> bool:
    record = msgspec.json.decode(value)
    return record.get("failures") == 0 or (record.get("faults") == 0 and record.get("occurrences") == 0)


# Attempts under the orchestrator's labels and workload attempts (SPEC R13: a TrainJob, a
# bare JobSet, an indexed batch Job, a bare pod, and CPU-only CronJob Jobs that are none),
# and more evidence (R14: pods disrupted by the cluster, devices the kubelet reports
# Unhealthy or Unknown, repeated in later pod records).
_ALL = {**STORIES, **WORKLOAD_STORIES, **EVIDENCE_STORIES}
ALL_STORIES = [record for i, story in enumerate(_ALL.values()) for record in story(t0=T0 + timedelta(minutes=7 * i))]
# Two stories end in no failure: the CronJob Jobs are no attempts, and the gang Kueue preempts
# and readmits completes (SPEC R17).
NOT_FAILED = {"cronjob-cpu", "jobset-kueue-preempted"}
FAILED_ATTEMPTS = len(_ALL.keys() - NOT_FAILED)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_r7_1_final_verdicts_do_not_depend_on_arrival_order(rnd):
    expected = final_state(ALL_STORIES)
    assert NOT_FAILED <= _ALL.keys()
    assert len([k for k in expected if k.startswith(CLASSIFIED_FAILURES)]) == FAILED_ATTEMPTS
    assert len([k for k in expected if k.startswith(f"{CLASSIFIED_FAILURES} prod-a/ml/TrainJob/")]) == 1
    decided = [msgspec.json.decode(v) for k, v in expected.items() if k.startswith(CLASSIFIED_FAILURES)]
    assert {v["code"] for v in decided} >= {"PodDisrupted", "GpuUnhealthy"}  # R14 evidence is drawn too
    assert any(k.startswith(f"{FAULTS} ") and b'"DEVICE_HEALTH"' in v for k, v in expected.items())
    assert final_state(interleave(ALL_STORIES, rnd)) == expected


def test_r7_1_fault_arriving_before_its_pod_is_held_until_the_pod_is_known():
    p = pod("p", containers={"main": running()})
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0)}])
    ev = event(p, first=T0 - minutes(1))
    early = run([record(ev, T0 - minutes(1), "ADDED")])
    assert early == []  # nothing to attribute it to yet
    verdict = final_verdicts([record(ev, T0 - minutes(1), "ADDED"), record(p, T0 - minutes(50), "ADDED"), record(failed, T0)])
    assert next(iter(verdict.values())).code == "GpuFallenOffBus"


def test_r7_2_late_relevant_fault_yields_a_new_revision():
    emitted = verdicts(late_fault())
    assert [(v.revision, v.code) for v in emitted] == [(0, "Error"), (1, "GpuEccUncorrectable")]
    assert emitted[0].key == emitted[1].key


def test_r7_2_identical_recomputation_emits_nothing():
    p = pod("p", containers={"main": running()})
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0)}])
    records = [record(p, T0 - minutes(5)), record(failed, T0), record(failed, T0 + minutes(1)), record(failed, T0 + minutes(2), "DELETED")]
    assert len(verdicts(records)) == 1


def test_r7_2_late_fault_outside_the_slack_changes_nothing():
    p = pod("p", containers={"main": running()})
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0)}])
    records = [record(p, T0 - minutes(5)), record(failed, T0), record(event(p, first=T0 + minutes(3)), T0 + minutes(3), "ADDED")]
    assert len(verdicts(records)) == 1


def _replay_bytes(records: list[dict]) -> bytes:
    pipeline = new_pipeline()
    return b"".join(encode_output(e) + b"\n" for r in records for e in pipeline.feed(r["topic"], r["key"], orjson.dumps(r["value"])))


def test_r7_3_same_records_same_order_give_byte_identical_output():
    shuffled = interleave(ALL_STORIES, random.Random(7))
    first, second = _replay_bytes(shuffled), _replay_bytes(shuffled)
    assert first == second and first.count(b"\n") > 10


def test_r7_4_attempt_state_is_dropped_after_retention_in_stream_time():
    pipeline = new_pipeline()
    for r in late_fault():
        pipeline.feed(r["topic"], r["key"], orjson.dumps(r["value"]))
    assert len(pipeline.states["attempts"]) == 1 and len(pipeline.states["pods"]) == 1

    def tick(at):
        other = pod("other", labels={"app": "unrelated"}, gpus=0)
        pipeline.feed("k8s.pods", other["metadata"]["uid"], orjson.dumps(record(other, at)["value"]))

    tick(T0 + timedelta(hours=5, minutes=55))
    assert len(pipeline.states["attempts"]) == 1  # within retention
    # Dropped by the next sweep after the retention (sweeps run every quarter of it).
    tick(T0 + timedelta(hours=6, minutes=2))
    tick(T0 + timedelta(hours=7, minutes=35))
    assert pipeline.states["attempts"] == {} and all(s.pod is None or s.pod.name == "other" for s in pipeline.states["pods"].values())


def test_r7_4_state_stays_bounded_over_many_finished_attempts():
    pipeline = new_pipeline()
    peak = 0
    for day in range(3):
        for i, story in enumerate(STORIES.values()):
            for r in story(run=f"d{day}-{i}", t0=T0 + timedelta(hours=8 * day, minutes=i)):
                pipeline.feed(r["topic"], r["key"], orjson.dumps(r["value"]))
        peak = max(peak, len(pipeline.states["attempts"]))
    assert peak <= 2 * len(STORIES)  # never more than about one batch of attempts alive


def test_r7_faults_are_published_once_per_change():
    published = [e for e in run(late_fault()) if e.topic == FAULTS]
    assert len(published) == 1
