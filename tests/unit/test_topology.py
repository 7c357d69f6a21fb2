"""The stage topology as both in-process drivers run it: keys carry the cluster, a fold
that raises fails only its record, and the wire driver's codecs change nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from app.core.engine import topology
from app.core.engine.topology import STAGE_OF, STAGES
from app.model.envelope import SOURCE_TOPICS
from app.model.facts import INTERNAL_TOPICS
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, FAULTS, GANG_TRANSITIONS
from app.embedded.pipeline import Pipeline
from app.replay.trace import encode_output
from tests.unit.drivers import new_pipeline
from tests.unit.stories import pod_task_nvlink, pod_task_plain_failure

pytestmark = pytest.mark.usefixtures("driver")

MIXED = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed.jsonl"


def _lines(cluster: str) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in MIXED.read_bytes().splitlines() if line.strip()]
    for line in lines:
        line["value"]["cluster"] = cluster
    return lines


def _latest(emits: list, topic: str) -> dict[str, Any]:
    """Latest value per key on `topic`, with the cluster taken out of keys and values."""
    latest = {}
    for emit in emits:
        if emit.topic == topic:
            value = orjson.loads(encode_output(emit))["value"]
            value.pop("revision", None)  # counts emissions: interleaving may change it
            latest[emit.key.split("/", 1)[1]] = orjson.dumps(value).replace(b"prod-b", b"prod-a")
    return latest


def _replay(lines: list[dict[str, Any]]) -> list:
    pipeline = new_pipeline()
    out = []
    for line in lines:
        out += pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
    return out


def test_every_stage_key_carries_the_cluster_two_clusters_with_the_same_uids_stay_apart() -> None:
    """An etcd snapshot restored into a second cluster repeats every uid."""
    alone = _replay(_lines("prod-a"))
    a, b = _lines("prod-a"), _lines("prod-b")
    both = _replay([line for pair in zip(a, b, strict=True) for line in pair])
    for topic in (CLASSIFIED_FAILURES, FAULTS, GANG_TRANSITIONS):
        expected = _latest(alone, topic)
        assert expected, f"the trace yields no {topic}"
        of_a = _latest([e for e in both if e.key.startswith("prod-a/")], topic)
        of_b = _latest([e for e in both if e.key.startswith("prod-b/")], topic)
        assert of_a == expected and of_b == expected


def test_a_fold_that_raises_dead_letters_its_record_and_the_stream_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = pod_task_nvlink()
    victim = broken[-2]["value"]["object"]["metadata"]["uid"]
    real = topology.PODS_STAGE.inputs[0]
    assert real.topic == "k8s.pods"

    def fold_pod(state, key, envelope, rules, marks):  # type: ignore[no-untyped-def]
        if envelope.object.metadata.uid == victim and envelope.object.status.phase == "Failed":
            raise ZeroDivisionError("a bug in the rules")
        return real.fold(state, key, envelope, rules, marks)

    monkeypatch.setitem(topology.INPUT_OF, "k8s.pods", msgspec.structs.replace(real, fold=fold_pod))
    records = broken + pod_task_plain_failure()
    pipeline = new_pipeline()
    out = []
    for offset, r in enumerate(records):
        out += pipeline.feed(r["topic"], r["key"], orjson.dumps(r["value"]), offset=offset, partition=0)
    letters = [e.value for e in out if e.topic == DEAD_LETTER]
    assert len(letters) == 2  # the failed pod's two records (the second is its deletion)
    assert all("stage pods failed on this record: ZeroDivisionError: a bug in the rules" in x.reason for x in letters)
    assert [x.offset for x in letters] == [4, 5] and letters[0].topic == "k8s.pods"
    # the other attempt is classified; the broken pod's state is as before its failed records
    assert [e.value.run for e in out if e.topic == CLASSIFIED_FAILURES] == ["etl-19"]
    state = pipeline.states["pods"][f"prod-a/{victim}"]
    assert state.pod is not None and state.pod.phase == "Running"


def test_the_wire_driver_gives_byte_identical_outputs() -> None:
    lines = _lines("prod-a")
    outputs = {}
    for wire in (False, True):
        pipeline = Pipeline(wire=wire)
        outputs[wire] = [
            encode_output(e) for line in lines for e in pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
        ]
    assert outputs[False] == outputs[True] and len(outputs[True]) > 20


def test_every_topic_a_stage_reads_has_one_reader_and_every_internal_topic_a_writer() -> None:
    read = [topic for stage in STAGES for topic in stage.topics]
    assert len(read) == len(set(read)) == len(STAGE_OF)
    assert set(SOURCE_TOPICS) | set(INTERNAL_TOPICS) == set(read)
    written = {topic for stage in STAGES for topic in stage.outputs}
    assert set(INTERNAL_TOPICS) <= written
