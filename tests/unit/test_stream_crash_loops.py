"""The Faust driver's crash-loop protection (app/stream/in_flight.py) and stop deadline
(app/stream/stopping.py), each on its own; on a real broker: tests/integration/
test_stream_crash_loop.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import NamedTuple

import pytest

from app.stream.in_flight import InFlight
from app.stream.stopping import StopDeadline


class _Message(NamedTuple):
    topic: str
    partition: int
    offset: int


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
