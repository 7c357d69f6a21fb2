"""A broker that is down is connected to ever less often, at most RECONNECT_MAX_SECONDS
apart, and again at once when a probe finds it back (app/stream/faust_fixes.py, patch 14),
on a real TCP port that refuses, then accepts, connections. The worker's CPU and log lines
during a broker outage: bench/outage.py; its log: tests/integration/test_worker_logs.py."""

from __future__ import annotations

import asyncio
import socket

import pytest

pytest.importorskip("aiokafka")

from app.stream import faust_fixes  # noqa: E402
from app.stream.faust_fixes import RECONNECT_FIRST_SECONDS, RECONNECT_MAX_SECONDS, _Reconnects  # noqa: E402


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connections_to_a_broker_that_is_down_are_spaced_out_and_bounded() -> None:
    async def waits() -> list[float]:
        reconnects = _Reconnects("127.0.0.1", _closed_port())
        loop = asyncio.get_running_loop()
        spaced = []
        for _ in range(12):
            reconnects.failed()
            spaced.append(reconnects.next_at - loop.time())
        assert reconnects.probe is not None
        reconnects.connected()  # the probe ends with the outage
        await asyncio.wait_for(reconnects.probe, timeout=5)
        return spaced

    spaced = asyncio.run(waits())
    assert spaced[0] == pytest.approx(RECONNECT_FIRST_SECONDS, abs=0.05)
    assert all(b >= a - 0.05 for a, b in zip(spaced, spaced[1:]))  # ever longer
    assert max(spaced) <= RECONNECT_MAX_SECONDS + 0.05 and spaced[-1] == pytest.approx(RECONNECT_MAX_SECONDS, abs=0.05)


def test_a_connection_waiting_for_a_broker_that_is_down_is_made_as_soon_as_the_probe_finds_it_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faust_fixes, "PROBE_SECONDS", 0.2)
    port = _closed_port()

    async def waited() -> tuple[float, float]:
        reconnects = _Reconnects("127.0.0.1", port)
        loop = asyncio.get_running_loop()
        for _ in range(10):
            reconnects.failed()  # the next attempt is RECONNECT_MAX_SECONDS away
        started = loop.time()
        waiting = asyncio.ensure_future(reconnects.wait())
        await asyncio.sleep(0.5)
        assert not waiting.done()  # still down: still waiting
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)  # the broker is back
        back = loop.time()
        try:
            await asyncio.wait_for(waiting, timeout=RECONNECT_MAX_SECONDS)
        finally:
            server.close()
        return loop.time() - back, loop.time() - started

    after_back, in_all = asyncio.run(waited())
    assert after_back < 1.0 and in_all < RECONNECT_MAX_SECONDS / 2
