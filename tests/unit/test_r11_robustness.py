"""SPEC R11 as a property: no input, however malformed, stops the pipeline."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.engine.topology import decode_record
from app.model.decode import BadRecord
from app.model.records import DEAD_LETTER
from tests.unit.drivers import new_pipeline
from tests.unit.stories import mpijob_row_remap

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=20,
)

# Real records with one field replaced by junk: the shapes a buggy producer sends.
REAL = mpijob_row_remap()


def _mutate(value, path: list[str], junk):
    if not path or not isinstance(value, dict):
        return junk
    head, *rest = path
    if head not in value:
        return {**value, head: junk}
    return {**value, head: _mutate(value[head], rest, junk)}


paths = st.lists(
    st.sampled_from(["value", "object", "metadata", "status", "spec", "containerStatuses", "state", "terminated", "labels", "uid", "observed_at", "type", "cluster", "conditions", "involvedObject", "message", "series", "count"]),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_r11_1_no_malformed_record_raises_and_each_is_dead_lettered_or_read(data):
    pipeline = new_pipeline()
    for record in REAL:
        if data.draw(st.booleans()):
            mutated = _mutate(record, data.draw(paths), data.draw(json_values))
            value = json.dumps(mutated.get("value")).encode() if isinstance(mutated, dict) else b"\x00junk"
            topic = mutated.get("topic") if isinstance(mutated, dict) and isinstance(mutated.get("topic"), str) else "k8s.pods"
        else:
            value, topic = orjson.dumps(record["value"]), record["topic"]
        try:
            decode_record(topic, value)
            readable = True
        except BadRecord:
            readable = False
        before = pipeline.counts["dead_letters"]
        out = pipeline.feed(topic, record["key"], value)
        letters = [e for e in out if e.topic == DEAD_LETTER]
        # an unreadable record is one dead letter with its reason; a readable one none
        assert len(letters) == pipeline.counts["dead_letters"] - before == (0 if readable else 1)
        assert all(letter.value.reason and letter.value.topic == topic for letter in letters)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(["k8s.pods", "k8s.events", "k8s.jobs", "k8s.workloads"]))
def test_r11_1_arbitrary_bytes_become_a_dead_letter(value, topic):
    out = new_pipeline().feed(topic, "k", value)
    assert [e.topic for e in out] == [DEAD_LETTER]  # no bytes this short make a source record
