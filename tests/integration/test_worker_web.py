"""The worker's web server and its identity on the real broker: what it serves, where it
listens, and a restart under the same --worker-id at another address."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "traces" / "mixed.jsonl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on `port` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def start_ready(stream_stack, flags: tuple[str, ...], logs: list[Path]):
    """Worker w1, once Faust says it is ready. One that stops while starting (a start-up
    race of Faust's changelog metadata) is started again as its supervisor would, at most
    twice; one alive that never gets ready is the hang."""
    for attempt in range(3):
        worker = stream_stack.start_worker("w1", store="memory", extra=flags)
        stream_stack.poll(lambda: "Worker ready" in worker.log_text() or worker.proc.poll() is not None, "a ready worker", 90)
        if worker.proc.poll() is None:
            return worker
        stream_stack.workers.remove(worker)
        logs.append(worker.log.rename(worker.log.with_suffix(f".stopped-{len(logs)}.log")))
    raise AssertionError(f"the worker stopped while starting, three times:\n{logs[-1].read_text()[-3000:]}")


@pytest.mark.parametrize("routes", ["false", "true"])
def test_a_worker_restarted_with_its_id_on_another_web_port_goes_on_processing(stream_stack, routes: str) -> None:
    """Faust asserted that the assignment the broker keeps for a static member names the
    member's current URL (host and web port); a restart on another port hung alive,
    consuming nothing. A worker with an id is now named by its id (with Faust's routes
    served, by its URL, and the assignment made for the old one is taken), and must
    process what is published after its restart."""
    logs: list[Path] = []
    first = start_ready(stream_stack, ("--web-port", str(free_port()), "--web-faust-routes", routes), logs)
    stream_stack.publish(MIXED)
    stream_stack.wait_settled()
    first.proc.terminate()
    assert first.proc.wait(timeout=60) == 0, first.log_tail()
    stream_stack.workers.remove(first)  # stopped on purpose
    logs.append(first.log.rename(first.log.with_suffix(".first.log")))
    worker = start_ready(stream_stack, ("--web-port", str(free_port()), "--web-faust-routes", routes), logs)
    stream_stack.publish(MIXED)  # again: new records the restarted worker must process
    stream_stack.wait_settled(timeout=120)
    text = "".join(log.read_text(errors="replace") for log in [*logs, worker.log])
    assert "AssertionError" not in text
    assert ("taking the assignment made for this worker id" in text) == (routes == "true")


def test_the_web_server_listens_on_loopback_and_serves_no_raw_state_by_default(stream_stack) -> None:
    port = free_port()
    worker = stream_stack.start_worker("w1", store="memory", extra=("--web-port", str(port)))
    stream_stack.poll(lambda: status(f"http://127.0.0.1:{port}/metrics") == 200, "the worker's /metrics", timeout=90)
    assert listening_addresses(port) == {"127.0.0.1"}
    assert status(f"http://127.0.0.1:{port}/fleet/") == 200
    for raw in ("/table/", "/router/", "/graph/"):
        assert status(f"http://127.0.0.1:{port}{raw}") == 404, raw
    assert worker.proc.poll() is None


def test_faust_routes_and_a_wider_bind_are_settings(stream_stack) -> None:
    port = free_port()
    stream_stack.start_worker("w1", store="memory", extra=("--web-port", str(port), "--web-host", "0.0.0.0", "--web-faust-routes", "true"))
    stream_stack.poll(lambda: status(f"http://127.0.0.1:{port}/router/") == 200, "the worker's /router/", timeout=90)
    assert listening_addresses(port) == {"0.0.0.0"}
