"""SPEC R12.5 with R12.7 on the real broker: a worker that reads one topic's backlog after
every other topic's answers as the offline replay of the trace in order does.

A worker started on retained topics (a first deployment, a new group replaying history)
reads each topic at its own pace. Here the Events (the Xid faults) come only after two
days of every other topic, progress included. A stage's stream time waits for progress
of every topic it hears, so the pod stage keeps each failed pod until the Events' progress
says what came before it; it used to take the least over the topics it had heard of, and
with only the pods' progress heard, the failed pods expired at the next sweep before their
Xid Events came: on this trace 8 faults were lost and 8 verdicts differed (a double-bit ECC
error, Xid 48, read as the user's `Error`). tests/unit/test_r12_7_order_across_kinds.py
holds the same orders in both embedded drivers.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import orjson
from trace_gen import write_trace

from app.model.envelope import EVENTS, SOURCE_TOPICS
from app.model.records import CLASSIFIED_FAILURES
from tests.unit import builders as b

SWEEP_SECONDS = 0.5
TRACE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed.jsonl"


def test_r12_5_a_worker_reading_the_events_two_days_behind_the_other_topics_keeps_every_gpu_fault(stream_stack, outputs, tmp_path: Path) -> None:
    lines = [orjson.loads(raw) for raw in TRACE.read_bytes().splitlines()]
    last = max(datetime.fromisoformat(line["value"]["observed_at"]) for line in lines)
    lines += [b.progress(topic, last + timedelta(hours=h)) for h in range(1, 49) for topic in SOURCE_TOPICS]
    expected = outputs.offline(write_trace(tmp_path / "in-order.jsonl", lines))
    faulted = [v for v in expected.latest[CLASSIFIED_FAILURES].values() if v.get("gpu_fault")]
    assert len(faulted) >= 4  # what is at stake: the Events' Xid faults

    stream_stack.publish(write_trace(tmp_path / "others.jsonl", [line for line in lines if line["topic"] != EVENTS]))
    worker = stream_stack.start_worker(sweep_interval=SWEEP_SECONDS)
    stream_stack.wait_settled()
    # Expiry runs on a timer: let it look a few times at what the worker has folded so far.
    time.sleep(10 * SWEEP_SECONDS)
    assert worker.counters(), worker.log_tail()  # it swept
    stream_stack.publish(write_trace(tmp_path / "events.jsonl", [line for line in lines if line["topic"] == EVENTS]))
    stream_stack.wait_settled()
    outputs.streamed(stream_stack).assert_equal(expected)
