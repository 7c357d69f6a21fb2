"""The probe that brings every watch back at once when the API server is back (issue 29):
a comeback is a probe that sees the server ready after one that saw it not ready."""

from __future__ import annotations

import threading
import time

from app.bridge.comeback import ServerProbe


def scripted(*answers: bool) -> tuple[ServerProbe, list[bool]]:
    """A probe answering `answers` in turn (then the last one forever)."""
    left = list(answers)
    asked: list[bool] = []

    def ready() -> bool:
        answer = left.pop(0) if len(left) > 1 else left[0]
        asked.append(answer)
        return answer

    return ServerProbe(ready, interval=0.01), asked


def test_a_server_down_then_ready_wakes_a_waiting_watch_at_once():
    probe, asked = scripted(False, False, True)
    started = time.monotonic()
    woke = probe.wait(30.0, since=started, seen=0, stop=threading.Event())
    assert woke == 1 and time.monotonic() - started < 1.0
    assert asked == [False, False, True]


def test_a_server_ready_throughout_wakes_nobody_the_backoff_runs_its_course():
    probe, _ = scripted(True)
    started = time.monotonic()
    assert probe.wait(0.2, since=started, seen=0, stop=threading.Event()) is None
    assert time.monotonic() - started >= 0.2 and probe.comebacks == 0


def test_one_comeback_wakes_a_watch_once():
    probe, _ = scripted(False, True)
    started = time.monotonic()
    first = probe.wait(30.0, since=started, seen=0, stop=threading.Event())
    assert first == 1
    # The server is back but refuses this watch: its next wait is the backoff's.
    assert probe.wait(0.1, since=started, seen=first, stop=threading.Event()) is None


def test_a_comeback_before_the_outage_began_is_not_this_outages():
    probe, _ = scripted(False, True)
    probe.wait(30.0, since=time.monotonic(), seen=0, stop=threading.Event())
    later = time.monotonic() + 0.001
    assert probe.wait(0.1, since=later, seen=0, stop=threading.Event()) is None


def test_many_waiting_watches_share_one_probe_at_a_time():
    calls: list[float] = []
    lock = threading.Lock()

    def slow_ready() -> bool:
        with lock:
            calls.append(time.monotonic())
        time.sleep(0.05)
        return False

    probe = ServerProbe(slow_ready, interval=0.1)
    stop = threading.Event()
    since = time.monotonic()
    threads = [threading.Thread(target=probe.wait, args=(0.5, since, 0, stop)) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # One probe per interval (plus its own duration) for ten watches, not ten.
    assert 2 <= len(calls) <= 5, len(calls)


def test_a_stop_ends_the_wait():
    probe, _ = scripted(False)
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    started = time.monotonic()
    assert probe.wait(30.0, since=started, seen=0, stop=stop) is None
    assert time.monotonic() - started < 1.0
