"""The Faust worker's memory (RSS) as it works through a backlog: does it stay flat?

    python -m bench.rss [--records N] [--store rocksdb|memory] [--worker-args '...'] [--smoke]

N source records (bench/tracegen.py) are pre-loaded into 4-partition topics, then one
`faultline worker` is started; its resident set size is read from /proc every half
second together with how many source and re-keyed records its group has committed. The
figures are the RSS when a tenth, a quarter, half, three quarters and all of them were
processed, and the peak: with bounded state, the tables stay flat, so RSS late should be
close to RSS early. Run it from another checkout (`cd` there, `python -m bench.rss`) to
compare two versions on the same machine.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kafka.errors import KafkaError

from app.kafka.topics import create_topics
from app.settings import load
from bench import pipeline
from bench.broker import kafka
from bench.tracegen import generate

MARKS = (0.10, 0.25, 0.50, 0.75, 1.00)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def measure(bootstrap: str, records: list, tmp: Path) -> tuple[dict[float, float], float, float]:
    """RSS (MB) at each mark of the work done, the peak, and the seconds it took."""
    prefix = f"br{uuid.uuid4().hex[:6]}."
    settings = load({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": pipeline.PARTITIONS})
    create_topics(settings)
    pipeline._produce(bootstrap, prefix, records)
    lag_of = pipeline.GroupLag(bootstrap)
    topics = pipeline.stage_inputs(prefix)
    log = tmp / "worker.log"
    worker = pipeline.start_worker(bootstrap, prefix, tmp / "worker", log)
    at: dict[float, float] = {}
    peak, start = 0.0, time.monotonic()
    try:
        initial = None
        while len(at) < len(MARKS):
            if worker.poll() is not None:
                raise SystemExit(f"worker exited: {log.read_text()[-2000:]}")
            try:
                lag = lag_of(settings.app_id, topics)
            except KafkaError:  # the group's coordinator is not there yet
                time.sleep(0.5)
                continue
            initial = max(initial or 0, lag)  # re-keyed records are added as it goes
            rss = rss_mb(worker.pid)
            peak = max(peak, rss)
            done = 1 - lag / initial if initial else 0.0
            for mark in MARKS:
                if mark not in at and (done >= mark or (mark == 1.0 and lag == 0)):
                    at[mark] = rss
            time.sleep(0.5)
        return at, peak, time.monotonic() - start
    finally:
        pipeline.stop_worker(worker)
        lag_of.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--store", choices=["memory", "rocksdb"], default="rocksdb", help="the worker's table store")
    parser.add_argument("--worker-args", default="", help="more worker flags, e.g. '--rocksdb-block-cache-bytes 8388608'")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    pipeline.WORKER_ARGS[:] = ["--store", args.store, *shlex.split(args.worker_args)]
    records = list(generate(1_000 if args.smoke else args.records))
    with kafka() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        at, peak, took = measure(bootstrap, records, Path(tmp))
    print(f"records: {len(records)}")
    print(f"worker_flags: {' '.join(pipeline.WORKER_ARGS)}")
    for mark in MARKS:
        print(f"rss_mb_at_{round(mark * 100)}pct: {at[mark]:.0f}")
    print(f"rss_mb_peak: {peak:.0f}")
    print(f"seconds: {took:.0f}")
    growth = at[1.0] / at[0.25] if at[0.25] else float("nan")
    print(f"summary: worker RSS {at[0.25]:.0f} MB at a quarter of {len(records)} records, {at[1.0]:.0f} MB at the end ({growth:.2f}x), peak {peak:.0f} MB ({args.store})")


if __name__ == "__main__":
    sys.exit(main())
