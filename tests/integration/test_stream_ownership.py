"""Issue 23 (2) on the real broker: progress belongs to one ownership of a partition.

A worker that held every partition at the start, lost most of them to two more workers,
and got them back hours of stream time later (the others stopped, one by one) must judge
the records it reads then against the progress of the partition as it stands now, never
against what it knew of the partition the first time it held it: no valid record is taken
for a clock fault (SPEC R11.4), and every output equals the offline replay's.

A worker that dies instead leaves the group only at its session timeout: its partitions
move after the others' last progress was read, and every scope begins anew with that
rebalance. Each must take up the progress its table partition was written with (R12.3),
or the watermark of a gang partition, which needs progress from every source partition,
is never known again and the gangs waiting on it never settle.

The trace spans three hours of observation time with the bridge's progress every minute;
`max_clock_skew` is one hour.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from trace_gen import builders as b
from trace_gen import generate, write_trace

from app.model.records import CLASSIFIED_FAILURES


def _before(records: list[dict], cut) -> tuple[list[dict], list[dict]]:  # type: ignore[no-untyped-def]
    """Split at the first change observed at or after `cut` (the trace is in observation
    order): the second part begins with changes, the progress before them in the first."""
    for i, r in enumerate(records):
        value = r.get("value")
        at = value.get("observed_at") if isinstance(value, dict) else None
        if isinstance(at, str) and at >= b.ts(cut) and not _progress(r):
            return records[:i], records[i:]
    return records, []


def test_r11_4_a_partition_that_comes_back_is_judged_by_its_progress_now(stream_stack, outputs, tmp_path: Path) -> None:
    _handed_back(stream_stack, outputs, tmp_path, leave=_stop)


def test_r12_3_partitions_left_at_a_session_timeout_are_taken_up_with_their_saved_progress(stream_stack, outputs, tmp_path: Path) -> None:
    """The last of the two to go dies: w1 reads the last half hour of its own partitions
    first, and gets the dead worker's only at the session timeout, in a rebalance that
    also begins its own partitions' scopes anew (the test above, when a worker stopped
    during a rebalance took partitions in it and so left at its session timeout)."""
    _handed_back(stream_stack, outputs, tmp_path, leave=_kill)


def _handed_back(stream_stack, outputs, tmp_path: Path, leave) -> None:  # type: ignore[no-untyped-def]
    records = generate(attempts=240, seed=29)
    expected = outputs.offline(write_trace(tmp_path / "all.jsonl", records))
    early, rest = _before(records, b.T0 + timedelta(minutes=20))
    middle, late = _before(rest, b.T0 + timedelta(minutes=150))
    assert early and middle and late
    dynamic = ("--worker-id", "")  # a worker that stops leaves the group at once: its partitions move now

    # w1 alone holds every partition while the first 20 minutes stream in.
    stream_stack.publish(write_trace(tmp_path / "early.jsonl", early))
    first = stream_stack.start_worker("w1", extra=dynamic)
    stream_stack.wait_for(CLASSIFIED_FAILURES, lambda rs: len(rs) >= 5, timeout=120)
    stream_stack.wait_settled()

    # Two more take most of them while the next two hours stream in, then leave one by
    # one: w1 gets back partitions it last held two hours of stream time ago ...
    second = stream_stack.start_worker("w2", extra=dynamic)
    third = stream_stack.start_worker("w3", extra=dynamic)
    for worker in (second, third):  # both hold partitions before anything more comes
        stream_stack.poll(lambda w=worker: "Executing _on_partitions_assigned" in w.log_text(), f"{worker.worker_id} assigned", timeout=120)
    stream_stack.publish(write_trace(tmp_path / "middle.jsonl", middle))
    stream_stack.wait_settled(timeout=240)
    _stop(stream_stack, second)
    stream_stack.wait_settled(timeout=240)
    leave(stream_stack, third)
    stream_stack.wait_settled(timeout=240)

    # ... and reads the last half hour of them: over an hour past what it knew of them.
    # The bridge says its progress of their first 15 minutes only after their changes (late,
    # which progress may always be): those changes come before any progress of theirs.
    head, tail = _before(late, b.T0 + timedelta(minutes=165))
    late = [r for r in head if not _progress(r)] + [r for r in head if _progress(r)] + tail
    stream_stack.publish(write_trace(tmp_path / "late.jsonl", late))
    stream_stack.wait_settled(timeout=240)
    assert first.proc.poll() is None, first.log_tail()

    streamed = outputs.streamed(stream_stack)
    # A clock fault is folded (R11.4, amended) but moves no stream time: counted, never here.
    clock_faults = {w.worker_id: w.counters().get("clock_faults", 0) for w in (first, second, third)}
    assert not any(clock_faults.values()), f"valid records taken for clock faults: {clock_faults}"
    streamed.assert_equal(expected, redelivered=True)


def _progress(record: dict) -> bool:
    value = record.get("value")
    return isinstance(value, dict) and value.get("type") == "BOOKMARK"


def _stop(stack, worker) -> None:  # type: ignore[no-untyped-def]
    worker.proc.terminate()
    assert worker.proc.wait(timeout=90) == 0, worker.log_tail()
    stack.workers.remove(worker)  # stopped on purpose


def _kill(stack, worker) -> None:  # type: ignore[no-untyped-def]
    stack.kill(worker)  # no LeaveGroup: its partitions stay its own until its session times out
