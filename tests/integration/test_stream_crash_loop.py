"""SPEC R11.3 on the real broker: a record whose handling kills the worker (a C-level
crash or an OOM kill: SIGKILL; an error outside the fold policy: an exception) is
recognised when the worker starts again and dead-lettered the second time, so no single
record causes a crash loop; and a worker that decides to stop exits within
`stop_timeout`, saying why.

The record is made deadly by the fault-injection seam (app/stream/fault_injection.py,
off unless FAULTLINE_FAULT_INJECTION is set): a marker in its value.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import orjson
from trace_gen import builders as b
from trace_gen import generate, write_trace

from app.model.records import DEAD_LETTER
from app.stream.fault_injection import ENV
from app.stream.in_flight import REASON

MARKER = "deadly-4f1c9e"


def _with_poison(tmp_path: Path) -> tuple[Path, Path, dict]:
    valid = generate(attempts=40, seed=31, malformed=False)
    poisoned = b.pod("deadly", labels={"app": "x"}, annotations={"note": MARKER})
    poison = b.record(poisoned, b.T0 + b.minutes(30), "ADDED")
    cut = len(valid) // 3
    trace = write_trace(tmp_path / "trace.jsonl", valid[:cut] + [poison] + valid[cut:])
    return trace, write_trace(tmp_path / "valid.jsonl", valid), poison


def _run_until_it_dies(stream_stack, env: dict[str, str], extra: tuple[str, ...] = ()) -> tuple[int, str, float]:  # type: ignore[no-untyped-def]
    worker = stream_stack.start_worker("w1", store="rocksdb", env=env, extra=extra)
    started = time.monotonic()
    code = worker.proc.wait(timeout=180)
    stream_stack.workers.remove(worker)  # it was meant to die: not a failure of the next one
    return code, worker.log_text(), time.monotonic() - started


def _letters(stream_stack) -> list[dict]:  # type: ignore[no-untyped-def]
    return [orjson.loads(r.value) for r in stream_stack.read(DEAD_LETTER)]


def _assert_valid_outputs(stream_stack, outputs, expected) -> None:  # type: ignore[no-untyped-def]
    """Everything but the poison record's dead letter (checked by itself) is the oracle's."""
    streamed = outputs.streamed(stream_stack)
    streamed.dead_letters = [letter for letter in streamed.dead_letters if letter[2] != REASON]
    streamed.assert_equal(expected, redelivered=True)


def test_r11_3_a_record_that_kills_the_worker_is_dead_lettered_the_second_time(stream_stack, outputs, tmp_path: Path) -> None:
    trace, valid, poison = _with_poison(tmp_path)
    expected = outputs.offline(valid)
    stream_stack.publish(trace)
    env = {ENV: f"kill:{MARKER}"}

    code, log, _ = _run_until_it_dies(stream_stack, env)
    assert code == -signal.SIGKILL, log[-2000:]
    code, log, _ = _run_until_it_dies(stream_stack, env)  # the suspect, handled once more
    assert code == -signal.SIGKILL and "it is handled once more" in log, log[-2000:]

    survivor = stream_stack.start_worker("w1", store="rocksdb", env=env)
    stream_stack.wait_settled()
    assert survivor.proc.poll() is None
    assert "stopped the worker twice" in survivor.log_text()
    letters = _letters(stream_stack)
    assert [(x["key"], x["reason"]) for x in letters] == [(poison["key"], REASON)]
    assert MARKER in letters[0]["value"]
    _assert_valid_outputs(stream_stack, outputs, expected)


def test_r11_3_an_agent_that_raises_stops_the_worker_within_stop_timeout_and_not_for_ever(stream_stack, outputs, tmp_path: Path) -> None:
    trace, valid, poison = _with_poison(tmp_path)
    expected = outputs.offline(valid)
    stream_stack.publish(trace)
    env = {ENV: f"raise:{MARKER}"}
    for _ in range(2):
        code, log, took = _run_until_it_dies(stream_stack, env, extra=("--stop-timeout", "10"))
        assert code == 1, log[-2000:]
        assert "worker stopping: agent pods_stage stopped: InjectedFault: fault injected on" in log, log[-3000:]
        print(f"stopped {took:.1f} s after it started")

    stream_stack.start_worker("w1", store="rocksdb", env=env)
    stream_stack.wait_settled()
    assert [(x["key"], x["reason"]) for x in _letters(stream_stack)] == [(poison["key"], REASON)]
    _assert_valid_outputs(stream_stack, outputs, expected)
