"""The worker's log on a real broker (app/stream/logs.py): no ERROR from a start, and a
broker outage of 20 s under two workers written in a few lines each, where aiokafka wrote
an ERROR per attempt (thousands; issue 23 measured 130,069 lines in ~32 s)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from ops.kafka.local_broker import LocalBroker, free_port
from tests.integration.conftest import StreamStack

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "examples" / "traces" / "mixed.jsonl"
OUTAGE = 20.0
LEVEL = re.compile(r"\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\]")


def test_a_broker_outage_is_a_few_lines_per_worker_and_no_error(tmp_path):
    """A broker of its own (the session's is shared): stopped for 20 s while two workers
    run, then started again on the same port and data folder. Each worker says the outage
    once when it starts and once when it ends, and carries on."""
    port = free_port()
    broker = LocalBroker(tmp_path / "broker", port=port)
    stack = StreamStack(broker.start(), "logs.", tmp_path)
    try:
        stack.create_topics()
        workers = [stack.start_worker("w1", store="memory"), stack.start_worker("w2", store="memory")]
        stack.publish(TRACE)
        stack.wait_settled(timeout=240)
        before = [w.log.stat().st_size for w in workers]
        broker.stop()
        time.sleep(OUTAGE)
        broker = LocalBroker(tmp_path / "broker", port=port)
        broker.start()
        stack.poll(lambda: all("Kafka reachable again" in w.log_text() for w in workers), "both workers: reachable again", timeout=120)
        stack.publish(TRACE)  # and they carry on
        stack.wait_settled(timeout=240)
        during = [w.log.read_bytes()[offset:].decode(errors="replace").splitlines() for w, offset in zip(workers, before)]
        whole = [w.log_text().splitlines() for w in workers]
    finally:
        stack.stop_all()
        broker.stop()
    for worker, lines, everything in zip(workers, during, whole):
        levels = [m.group(1) for line in lines if (m := LEVEL.search(line))]
        assert len(lines) <= 30, f"{worker.worker_id}: {len(lines)} lines during the outage:\n" + "\n".join(lines[:60])
        assert "ERROR" not in levels, "\n".join(lines)
        assert sum("Kafka is unreachable" in line for line in lines) == 1
        assert sum("Kafka reachable again" in line for line in lines) == 1
        errors = [line for line in everything if "[ERROR]" in line]
        assert errors == [], f"{worker.worker_id}: ERROR lines from start to stop:\n" + "\n".join(errors)
