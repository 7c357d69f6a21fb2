"""The Faust driver's crash-loop protection (app/stream/in_flight.py) and stop deadline
(app/stream/stopping.py), each on its own; on a real broker: tests/integration/
test_stream_crash_loop.py."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pytest

from app.settings import Settings
from app.stream.in_flight import REASON, InFlight
from app.stream.stopping import StopDeadline


class _Message(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes = b"pod-1"
    value: bytes = b"{}"


A, B = _Message("k8s.pods", 1, 107), _Message("k8s.pods", 1, 108)


def _dies_handling(directory: Path, message: _Message) -> None:
    """A run of the agent that dies with `message` in hand (the note is all that stays)."""
    noted = InFlight(directory, "pods_stage")
    noted.begin(message)


def test_r11_3_a_record_in_hand_at_two_deaths_in_a_row_is_poison(tmp_path: Path) -> None:
    _dies_handling(tmp_path, A)
    second = InFlight(tmp_path, "pods_stage")
    assert (second.suspect is not None, second.poisoned(A)) == (True, False)  # handled once more
    second.begin(A)  # ... and it dies again
    third = InFlight(tmp_path, "pods_stage")
    assert third.poisoned(A) and not third.poisoned(B) and not third.poisoned(_Message("k8s.events", 1, 107))
    third.report()


def test_r11_3_one_death_or_two_on_different_records_poisons_nothing(tmp_path: Path) -> None:
    _dies_handling(tmp_path, A)
    _dies_handling(tmp_path, B)  # the suspect was A: B is the new suspect, A is not poison
    noted = InFlight(tmp_path, "pods_stage")
    assert not noted.poisoned(A) and not noted.poisoned(B) and noted.suspect is not None


def test_r11_3_a_suspect_handled_without_a_death_is_cleared(tmp_path: Path) -> None:
    _dies_handling(tmp_path, A)
    survivor = InFlight(tmp_path, "pods_stage")
    survivor.begin(A)
    survivor.end(A)
    assert survivor.suspect is None
    _dies_handling(tmp_path, A)  # an unrelated death later, with A in hand again: a suspect only
    assert not InFlight(tmp_path, "pods_stage").poisoned(A)


def test_r11_3_each_agent_keeps_its_own_note(tmp_path: Path) -> None:
    _dies_handling(tmp_path, A)
    InFlight(tmp_path, "jobs_stage").begin(A)
    other = InFlight(tmp_path, "jobs_stage")
    assert not other.poisoned(A)
    pods = InFlight(tmp_path, "pods_stage")
    pods.begin(A)
    assert InFlight(tmp_path, "pods_stage").poisoned(A)


class _Producer:
    """What a batch's records reach: each acknowledged at once, as a broker would."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def send(self, topic: str, key: bytes, value: bytes, partition: Any, timestamp: Any, headers: Any) -> asyncio.Future[None]:
        self.sent.append((topic, value))
        acknowledged: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        acknowledged.set_result(None)
        return acknowledged


def _run(directory: Path, deliveries: list[_Message], *, dies_before_acknowledged: bool = False) -> list[tuple[str, int, int]]:
    """One run of the pods agent's delivery (app/stream/delivery.py, its real batch and
    note) over the records delivered to it, in order: each dead-lettered if it is the
    poison record, then the batch written; or the run dies (`dies_before_acknowledged`)
    before Kafka acknowledged the batch's records. The source (topic, partition, offset)
    of each crash-loop dead letter Kafka acknowledged."""
    pytest.importorskip("faust")
    from faust.types import TP

    from app.stream.app import build_app
    from app.stream.delivery import Batch

    app, stages, _ = build_app(Settings(topic_prefix="u.", partitions=2, web_port=0, data_dir=str(directory / "worker")))
    noted, producer = InFlight(directory, "pods_stage"), _Producer()

    async def deliver() -> None:
        batch = Batch(app, asyncio.Queue(), None, producer, noted=noted)
        for message in deliveries:
            if noted.poisoned(message):
                stages.delivery.dead_letter_poison(noted, message, batch)  # type: ignore[arg-type]
            batch.add(TP(message.topic, message.partition), message.offset)
        if not dies_before_acknowledged:
            await batch.flush()

    app.loop.run_until_complete(deliver())
    letters = [msgspec.json.decode(value) for _, value in producer.sent]
    return [(x["topic"], x["partition"], x["offset"]) for x in letters if x["reason"] == REASON]


def _poison(directory: Path, message: _Message) -> None:
    """Two runs that died with `message` in hand."""
    _dies_handling(directory, message)
    InFlight(directory, "pods_stage").begin(message)


def test_r11_3_a_poison_record_delivered_twice_in_one_run_is_dead_lettered_once(tmp_path: Path) -> None:
    _poison(tmp_path, A)
    # A fetch handed to the agent before the seek to the committed offsets, fetched again after it.
    assert _run(tmp_path, [A, B, A, B]) == [(A.topic, A.partition, A.offset)]


def test_r11_3_a_poison_record_delivered_again_after_a_restart_is_not_dead_lettered_again(tmp_path: Path) -> None:
    _poison(tmp_path, A)
    assert _run(tmp_path, [A]) == [(A.topic, A.partition, A.offset)]
    # The run died once its dead letter was acknowledged, before its offset was committed.
    assert _run(tmp_path, [A, B]) == []
    assert InFlight(tmp_path, "pods_stage").poisoned(A)  # and it is still never handled


def test_r11_3_a_poison_record_whose_dead_letter_was_not_acknowledged_is_dead_lettered_after_a_restart(tmp_path: Path) -> None:
    _poison(tmp_path, A)
    assert _run(tmp_path, [A], dies_before_acknowledged=True) == []
    assert _run(tmp_path, [A]) == [(A.topic, A.partition, A.offset)]  # not lost


def test_r11_3_a_note_written_before_the_dead_letter_slot_keeps_its_poison_record(tmp_path: Path) -> None:
    _poison(tmp_path, A)
    note = tmp_path / "pods_stage.note"
    note.write_bytes(note.read_bytes()[: 3 * 24])  # the three slots of an earlier release
    assert InFlight(tmp_path, "pods_stage").poisoned(A)
    assert _run(tmp_path, [A]) == [(A.topic, A.partition, A.offset)]


def test_a_stop_that_hangs_is_cut_short_after_the_timeout_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    exited = threading.Event()
    codes: list[int] = []

    def exit_(code: int) -> None:
        codes.append(code)
        exited.set()

    deadline = StopDeadline(0.2, exit=exit_)
    deadline.arm("agent pods_stage stopped: DroppedRecords: a hole")
    deadline.arm("a second reason")  # the first one given is the one reported
    assert exited.wait(5) and codes == [1]
    assert "worker stopping: agent pods_stage stopped: DroppedRecords: a hole" in caplog.text
    assert "did not stop within 0.2 s of: agent pods_stage stopped: DroppedRecords: a hole" in caplog.text
    assert "a second reason" not in caplog.text
