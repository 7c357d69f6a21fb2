"""SPEC R11.3: no single record stops processing. A record whose decode, fold or encode
fails for any reason (nesting depth, size, an out-of-range time) is dead-lettered with
the reason, and a dead letter is bounded whatever the record was."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import orjson
import pytest

from app.core.engine import topology
from app.core.base.dead_letters import VALUE_BYTES
from app.core.base.emit import Emit
from app.core.engine.topology import STAGE_OF
from app.model.envelope import PODS
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, FAULTS
from tests.unit import hostile
from tests.unit.builders import CLUSTER, T0
from tests.unit.drivers import new_pipeline
from tests.unit.stories import pod_task_nvlink, pod_task_plain_failure

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def _letters(out: list[Emit]) -> list[Any]:
    return [e.value for e in out if e.topic == DEAD_LETTER]


def _verdict_runs(out: list[Emit]) -> set[str]:
    return {e.value.run for e in out if e.topic == CLASSIFIED_FAILURES}


def test_r11_3_records_nested_too_deeply_are_dead_lettered_and_the_stream_goes_on() -> None:
    out = hostile.feed(new_pipeline(), hostile.nested(T0) + pod_task_nvlink())
    letters = _letters(out)
    assert [(x.topic, x.offset) for x in letters] == [("k8s.pods", 0), ("k8s.events", 1)]
    assert all("nested too deeply" in x.reason for x in letters)
    assert _verdict_runs(out) == {"nightly-7f3a"}


def test_r11_3_a_dead_letter_stays_small_whatever_the_record() -> None:
    pipeline = new_pipeline()
    huge_key = "\x00" * 2_000_000
    lines = [*hostile.huge_garbage(), {"topic": PODS, "key": huge_key, "value": b"\x01" * 900_000}, {"topic": "\x02" * 100_000, "key": "k", "value": b"{}"}]
    for line in lines:
        value = hostile.value_bytes(line)
        [emit] = pipeline.feed(line["topic"], line["key"], value, offset=1, partition=0)
        letter = emit.value
        assert emit.topic == DEAD_LETTER and letter.reason
        assert len(msgspec.json.encode(letter)) < 150 * 1024  # far under the broker's 1 MiB
        assert (letter.size, letter.sha256, letter.truncated) == (len(value), hashlib.sha256(value).hexdigest(), len(value) > VALUE_BYTES)
        assert letter.value == value[:VALUE_BYTES].decode("utf-8", "replace")


def test_r11_3_out_of_range_times_are_dead_lettered_and_move_no_stream_time() -> None:
    pipeline = new_pipeline()
    valid = hostile.feed(pipeline, pod_task_nvlink())
    before = pipeline.clock(STAGE_OF[PODS], CLUSTER)
    out = hostile.feed(pipeline, hostile.out_of_range_times(T0))
    letters = _letters(out)
    assert len(letters) == 3 and all("out of range" in x.reason for x in letters)
    assert pipeline.clock(STAGE_OF[PODS], CLUSTER) == before
    assert not [k for k in pipeline.states["pods"] if "calendar" in str(pipeline.states["pods"][k])]
    assert _verdict_runs(valid) == {"nightly-7f3a"}


def test_r11_3_object_times_at_the_calendars_end_refuse_their_record() -> None:
    """A finishedAt, a fault's first seen time, a failed condition's lastTransitionTime at
    0001-01-01 or 9999-12-31: the rules compute with them and publish them, so the record
    carrying one is dead-lettered; the objects' other records are folded."""
    pipeline = new_pipeline()
    out = hostile.feed(pipeline, hostile.far_object_times("calendar", T0))
    letters = _letters(out)
    assert [x.offset for x in letters] == [2, 3, 4] and all("is out of range" in x.reason for x in letters)
    assert "container finishedAt 9999-12-31" in letters[1].reason and "first seen time 0001-01-01" in letters[0].reason
    assert not [e for e in out if e.topic in (CLASSIFIED_FAILURES, FAULTS)]
    assert {s.pod.phase for s in pipeline.states["pods"].values() if s.pod is not None} == {"Running"}


def test_r11_3_a_slash_in_an_attempt_label_is_dead_lettered_with_its_reason() -> None:
    out = hostile.feed(new_pipeline(), hostile.slash_label(T0) + pod_task_plain_failure())
    letters = _letters(out)
    assert [x.offset for x in letters] == [0, 1] and {x.topic for x in letters} == {"k8s.pods"}
    assert all("label run 'run/with/slashes' contains '/'" in x.reason for x in letters)
    assert _verdict_runs(out) == {"etl-19"}


def test_r11_3_an_output_that_cannot_be_encoded_fails_only_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    real = topology.INPUT_OF[PODS]
    story = pod_task_nvlink()
    victim = story[-2]["value"]["object"]["metadata"]["uid"]

    def fold_pod(state, key, envelope, rules, marks):  # type: ignore[no-untyped-def]
        state, emits = real.fold(state, key, envelope, rules, marks)
        if envelope.object.metadata.uid == victim and envelope.object.status.phase == "Failed":
            emits = [*emits, Emit(FAULTS, key, object())]  # msgspec cannot encode it
        return state, emits

    monkeypatch.setitem(topology.INPUT_OF, PODS, msgspec.structs.replace(real, fold=fold_pod))
    pipeline = new_pipeline()
    out = hostile.feed(pipeline, story + pod_task_plain_failure())
    letters = _letters(out)
    assert [x.offset for x in letters] == [4, 5] and all("TypeError" in x.reason for x in letters)
    assert _verdict_runs(out) == {"etl-19"}  # the nvlink pod's failure never got through
    assert pipeline.states["pods"][f"{CLUSTER}/{victim}"].pod.phase == "Running"  # its state as before


def test_r11_3_records_from_a_hostile_trace_file_are_read_as_the_worker_reads_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A value nested too deeply for any decoder is still found in a trace line, so it is
    dead-lettered by the stage reading its topic with the worker's reason."""
    from app.replay.trace import read_lines, replay

    lines = hostile.nested(T0)
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"".join(hostile.trace_line(line) + b"\n" for line in lines))
    pipeline = new_pipeline()
    letters = [e.value for e in replay(read_lines(trace), pipeline) if e.topic == DEAD_LETTER]
    direct = _letters(hostile.feed(new_pipeline(), lines))
    assert [(x.topic, x.key, x.reason, x.value) for x in letters] == [(x.topic, x.key, x.reason, x.value) for x in direct]
    assert orjson.loads(hostile.trace_line(pod_task_plain_failure()[0]))["topic"] == PODS
