"""What a broker outage costs a worker: its CPU and log lines while the broker is down,
and how soon it is back at work once the broker is.

    python -m bench.outage [--seconds 60] [--crash] [--store rocksdb|memory]

A broker of its own on a fixed port; one `faultline worker` (web server off) folds an
example trace; then the broker is stopped (`--crash`: killed while the worker folds the trace
published again half a second before) for `--seconds` and started
again on the same port and data folder. Printed: the worker's CPU while the broker was
down as a share of one core (baseline: the same worker idle, with the broker up, for as
long, just before), the lines its log gained during the outage and until it said the
outage was over, and the seconds from the broker's start until the worker said so and
until it had folded a trace published as it started.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path

from app.kafka.topics import create_topics
from app.settings import load
from bench.pipeline import PARTITIONS, GroupLag, _produce, cpu_seconds, stage_inputs, start_worker, stop_worker
from ops.kafka.local_broker import LocalBroker, free_port

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples" / "traces" / "mixed.jsonl"


def _records() -> list[tuple[str, str, bytes]]:
    import orjson

    out = []
    for line in TRACE.read_text().splitlines():
        if line.strip():
            record = orjson.loads(line)
            out.append((record["topic"], record["key"], orjson.dumps(record["value"])))
    return out


def _settled(lag: GroupLag, group: str, topics: list[str], timeout: float) -> float:
    start = time.monotonic()
    while lag(group, topics) > 0:
        if time.monotonic() - start > timeout:
            raise SystemExit(f"not settled after {timeout:.0f}s")
        time.sleep(0.2)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--crash", action="store_true", help="kill the broker (SIGKILL) instead of stopping it, half a second after a trace is published")
    parser.add_argument("--store", choices=["memory", "rocksdb"], default="rocksdb")
    args = parser.parse_args()
    records = _records()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        broker = LocalBroker(Path(tmp) / "broker", port=port)
        bootstrap = broker.start()
        prefix = "outage."
        settings = load({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": PARTITIONS})
        create_topics(settings)
        log = Path(tmp) / "worker.log"
        worker = start_worker(bootstrap, prefix, Path(tmp) / "data", log, "w1", args=["--store", args.store])
        lag = GroupLag(bootstrap)
        topics = stage_inputs(prefix)
        try:
            _produce(bootstrap, prefix, records)
            _settled(lag, settings.app_id, topics, 240)
            idle_from, idle_cpu = time.monotonic(), cpu_seconds(worker.pid) or 0.0
            time.sleep(args.seconds)
            idle = ((cpu_seconds(worker.pid) or 0.0) - idle_cpu) / (time.monotonic() - idle_from)
            lines_before = len(log.read_text(errors="replace").splitlines())
            lag.close()
            pid = broker.pid()
            if args.crash and pid is not None:
                _produce(bootstrap, prefix, records)  # killed while the worker folds them and sends
                time.sleep(0.5)
                os.kill(pid, signal.SIGKILL)  # no shutdown: its partitions' leaders are elected again at its start
            broker.stop()
            down_from, down_cpu = time.monotonic(), cpu_seconds(worker.pid) or 0.0
            time.sleep(args.seconds)
            down = ((cpu_seconds(worker.pid) or 0.0) - down_cpu) / (time.monotonic() - down_from)
            lines_down = len(log.read_text(errors="replace").splitlines()) - lines_before
            broker = LocalBroker(Path(tmp) / "broker", port=port)
            broker.start()
            back_from = time.monotonic()
            lag = GroupLag(bootstrap)
            _produce(bootstrap, prefix, records)  # a trace published as soon as the broker is back
            _settled(lag, settings.app_id, topics, 300)
            folded_after = time.monotonic() - back_from
            while "Kafka reachable again" not in log.read_text(errors="replace"):
                if worker.poll() is not None or time.monotonic() - back_from > 300:
                    raise SystemExit("the worker never said Kafka was reachable again:\n" + log.read_text(errors="replace")[-3000:])
                time.sleep(0.2)
            said_after = time.monotonic() - back_from
            text = log.read_text(errors="replace").splitlines()
            outage_lines = text[lines_before:]
            said = [line for line in outage_lines if "Kafka" in line and ("unreachable" in line or "reachable again" in line)]
        finally:
            stop_worker(worker)
            lag.close()
            broker.stop()
    print(f"outage_seconds: {args.seconds:.0f} ({'killed' if args.crash else 'stopped'}, {args.store})")
    print(f"worker_cpu_idle: {100 * idle:.1f}% of one core (the broker up, nothing to fold)")
    print(f"worker_cpu_down: {100 * down:.1f}% of one core while the broker was down")
    print(f"log_lines_down: {lines_down} while it was down; {len(outage_lines)} from the outage to the end")
    for line in said:
        print(f"said: {line}")
    print(f"back_seconds: {said_after:.1f} until the worker said Kafka was reachable again; {folded_after:.1f} until it had folded a trace published as it started")
    print(f"summary: a {args.seconds:.0f} s outage cost {100 * down:.1f}% of a core (idle {100 * idle:.1f}%), {len(outage_lines)} log lines; "
          f"folding again {folded_after:.1f} s after the broker's start (target: < 5% of a core, a few lines)")


if __name__ == "__main__":
    main()
