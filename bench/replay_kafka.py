"""`faultline replay --from-kafka` over N records in 4-partition source topics, against
the core fold rate over the same records in memory.

    python -m bench.replay_kafka [--records N] [--smoke]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kafka import KafkaProducer

from app.kafka.topics import create_topics
from app.embedded.pipeline import Pipeline
from app.settings import load
from bench.broker import kafka
from bench.tracegen import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    records = 2_000 if args.smoke else args.records
    trace = list(generate(records))

    pipeline = Pipeline()
    start = time.perf_counter()
    for topic, key, value in trace:
        pipeline.feed(topic, key, value)
    fold_rate = len(trace) / (time.perf_counter() - start)

    with kafka() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        prefix = f"bench{uuid.uuid4().hex[:6]}."
        create_topics(load({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": 4}))
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, batch_size=1 << 20, compression_type=None)
        for topic, key, value in trace:
            producer.send(prefix + topic, key=key.encode(), value=value)
        producer.flush()
        producer.close()
        out = Path(tmp) / "out.jsonl"
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "app", "replay", "--from-kafka", "--bootstrap", bootstrap, "--topic-prefix", prefix, "--out", str(out)],
            check=True,
            stderr=subprocess.DEVNULL,
        )
        replay_s = time.perf_counter() - start

    rate = len(trace) / replay_s
    print(f"records: {len(trace)}")
    print(f"replay_from_kafka_records_per_s: {rate:.0f}")
    print(f"fold_records_per_s: {fold_rate:.0f}")
    print(f"ratio_replay_from_kafka_to_fold: {rate / fold_rate:.2f}")
    print(f"summary: replay --from-kafka {rate:.0f} rec/s over {len(trace)} records in 4 partitions = {rate / fold_rate:.2f}x the core fold rate")


if __name__ == "__main__":
    main()
