"""A worker stopped in the middle of a rebalance leaves the consumer group at once, on the
real broker (app/stream/faust_fixes.py patch 15): its partitions go to the others now,
not at its session timeout.

aiokafka's consumer leaves the group only once its group coordination has finished what
it was doing; in a rebalance that is the JoinGroup answer or Faust's rebalance callback,
which a stopping worker may never finish, so it used to end at its stop deadline still a
member, holding the partitions of the new generation until the broker's session timeout.
The fault-injection seam holds the joining worker's callback on the partitions assigned
(app/stream/fault_injection.py, `hold-assignment`), which makes that moment certain.
"""

from __future__ import annotations

import time
from pathlib import Path

from trace_gen import generate, write_trace

from app.stream.fault_injection import ENV

SESSION_TIMEOUT_SECONDS = 60  # Faust's broker_session_timeout, which the workers keep
DYNAMIC = ("--worker-id", "")  # a member without a group instance id leaves when it stops


def test_a_worker_stopped_during_a_rebalance_leaves_the_group_and_its_partitions_move_at_once(stream_stack, outputs, tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "trace.jsonl", generate(attempts=40, seed=37))
    expected = outputs.offline(trace)
    first = stream_stack.start_worker("w1", extra=DYNAMIC)
    stream_stack.poll(lambda: "Worker ready" in first.log_text(), "w1 ready", timeout=120)

    # w2 joins: both take partitions in the new generation; w2's callback does not end.
    second = stream_stack.start_worker("w2", extra=(*DYNAMIC, "--stop-timeout", "10"), env={ENV: "hold-assignment:600"})
    stream_stack.poll(lambda: "Executing _on_partitions_assigned" in second.log_text(), "w2 assigned", timeout=120)
    second.proc.terminate()
    stopped = time.monotonic()
    assert second.proc.wait(timeout=60) == 0, second.log_tail()
    stream_stack.workers.remove(second)  # stopped on purpose
    assert "LeaveGroup request succeeded" in second.log_text(), second.log_tail(80)

    stream_stack.publish(trace)
    stream_stack.wait_settled(timeout=SESSION_TIMEOUT_SECONDS)
    took = time.monotonic() - stopped
    print(f"settled {took:.1f} s after w2 was stopped")
    assert took < SESSION_TIMEOUT_SECONDS, "w2's partitions moved only at its session timeout"
    outputs.streamed(stream_stack).assert_equal(expected, redelivered=True)
