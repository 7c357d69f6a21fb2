"""SPEC R10.1 (rule versions) and R11 (bad input)."""

from __future__ import annotations

import orjson
import pytest

from app.core.base import xid
from app.core.base.rules import Rules
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER
from app.embedded.pipeline import Pipeline
from tests.unit.builders import T0, attempt_labels, condition, kubeflow, minutes, pod, record, running, terminated, updated
from tests.unit.drivers import new_pipeline
from tests.unit.scenario import only_verdict, run
from tests.unit.stories import pod_task_nvlink

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def test_r10_1_rules_version_names_the_rule_set():
    assert Rules().version.startswith("default@")
    assert Rules(name="wider").version.startswith("wider@")
    assert only_verdict(pod_task_nvlink()).rules_version == Rules().version


def test_r10_1_changing_a_setting_changes_the_version():
    base = Rules().version
    assert Rules(window_seconds=3600).version != base
    assert Rules(node_trust=False).version != base
    assert Rules().version == base  # stable for the same rules


def test_r10_1_changing_the_xid_table_changes_the_version():
    base = Rules().version
    table = xid.DEFAULT_XID_TABLE
    assert Rules(xid=xid.XidTable(critical=table.critical | {143})).version != base
    assert Rules(xid=xid.XidTable(names={**table.names, 143: "GPU init error"})).version != base
    assert Rules(xid=xid.XidTable()).version == base


# --- R11 --------------------------------------------------------------------------------------


def _feed(pipeline: Pipeline, topic: str, key: str, value: bytes, offset: int):
    return pipeline.feed(topic, key, value, offset=offset, partition=3)


def test_r11_1_malformed_records_go_to_the_dead_letter_topic_and_nothing_valid_is_lost():
    good = pod_task_nvlink()
    pod_json = good[0]["value"]
    bad_values = [
        ("k8s.pods", b"{not json"),
        ("k8s.pods", orjson.dumps({"type": "ADDED", "cluster": "prod-a", "object": pod_json["object"]})),  # no observed_at
        ("k8s.pods", orjson.dumps({**pod_json, "type": "UPSERTED"})),
        ("k8s.pods", orjson.dumps({**pod_json, "observed_at": "2026-08-25T12:00:00"})),  # no zone
        ("k8s.pods", orjson.dumps({**pod_json, "object": {**pod_json["object"], "status": {"phase": 7}}})),
        ("k8s.pods", orjson.dumps({**pod_json, "object": {"metadata": {"name": "no-uid"}}})),
        ("k8s.events", orjson.dumps({**pod_json, "object": {"reason": ["GPUXidError"]}})),
        ("k8s.nodes", orjson.dumps(pod_json)),
    ]
    pipeline = new_pipeline()
    out = []
    offset = 0
    for r in good:
        for topic, value in bad_values[:2]:
            out += _feed(pipeline, topic, "k", value, offset)
            offset += 1
        out += _feed(pipeline, r["topic"], r["key"], orjson.dumps(r["value"]), offset)
        offset += 1
    for topic, value in bad_values[2:]:
        out += _feed(pipeline, topic, "k", value, offset)
        offset += 1
    letters = [e.value for e in out if e.topic == DEAD_LETTER]
    assert len(letters) == 2 * len(good) + len(bad_values) - 2 == pipeline.counts["dead_letters"]
    assert all(letter.partition == 3 and letter.offset is not None and letter.reason for letter in letters)
    reasons = " | ".join(letter.reason for letter in letters)
    for expected in ("envelope", "observed_at", "UPSERTED", "metadata.uid", "unknown source topic 'k8s.nodes'", "Pod object", "Event object"):
        assert expected in reasons
    verdicts = [e.value for e in out if e.topic == CLASSIFIED_FAILURES]
    assert verdicts[-1].code == only_verdict(good).code == "GpuNvlinkError"


def test_r11_2_unknown_fields_kinds_and_versions_are_ignored():
    p = pod("p", containers={"main": running()})
    p["spec"]["brandNewField"] = {"x": 1}
    p["status"]["resize"] = "Proposed"
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0), "allocatedResourcesStatus": []}])
    spark = kubeflow("MPIJob", "sp", labels=attempt_labels(action="spark"))
    spark["kind"], spark["apiVersion"] = "SparkApplication", "sparkoperator.k8s.io/v1beta2"
    future = kubeflow("MPIJob", "fut", labels=attempt_labels(action="future"), conditions=[condition("Failed", "MPIJobFailed", "", T0)])
    future["apiVersion"] = "kubeflow.org/v9"
    records = [record(p, T0 - minutes(5)), record(spark, T0 - minutes(4)), record(future, T0 - minutes(3)), record(failed, T0)]
    emitted = run(records)
    assert sorted((e.topic, e.key) for e in emitted) == [
        (CLASSIFIED_FAILURES, "prod-a/ml/run-abc/a0/1"),  # extra fields changed nothing
        (CLASSIFIED_FAILURES, "prod-a/ml/run-abc/future/1"),  # a newer version of a known group is read the same
    ]
