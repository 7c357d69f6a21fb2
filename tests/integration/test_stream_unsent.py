"""Issue 23 on the real broker: a worker killed once a batch's states are durable but
before any record they caused was sent restarts and sends those records, so no gang
transition is missing and every chain of transitions is whole.

The kill is forced by the fault-injection seam (`kill-before-outputs`): at the first
batch whose records to send hold a gang's move from Pending to Running. Such a move is
decided when progress comes (R12.4), so after the restart nothing folds the progress
record again (the stage's progress is taken up from the table, where it was written
with the states) and the gang no longer waits: only the entries' outboxes hold the
transition, and a new ownership reads them (app/stream/unsent.py).
"""

from __future__ import annotations

from pathlib import Path

from trace_gen import generate, write_trace

from app.model.records import GANG_TRANSITIONS
from app.stream.fault_injection import ENV

MARKER = '"from":"Pending","to":"Running"'


def test_r7_3_records_caused_before_a_kill_between_states_and_sends_are_sent_after_the_restart(stream_stack, outputs, tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "trace.jsonl", generate(attempts=40, seed=31, malformed=False))
    expected = outputs.offline(trace)
    assert [v for vs in expected.transitions.values() for v in vs if MARKER.encode() in v], "a gang starts running"
    stream_stack.publish(trace)

    doomed = stream_stack.start_worker("w1", store="rocksdb", env={ENV: f"kill-before-outputs:{MARKER}"})
    assert doomed.proc.wait(timeout=180) == -9, doomed.log_tail()
    stream_stack.workers.remove(doomed)
    assert not [r for r in stream_stack.read(GANG_TRANSITIONS) if MARKER.encode() in r.value]  # killed before any left

    restarted = stream_stack.start_worker("w1", store="rocksdb")
    stream_stack.wait_settled()
    streamed = outputs.streamed(stream_stack)
    streamed.assert_equal(expected, redelivered=True)  # chains whole
    assert streamed.transitions == expected.transitions  # none missing
    assert "may be unsent; sent again before anything is folded" in restarted.log_text()
