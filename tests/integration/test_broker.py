"""The broker round trip the stream processor relies on: keyed records keep per-key order."""
from __future__ import annotations

import time
from collections import defaultdict

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

N_RECORDS = 100
KEYS = [f"k{i}" for i in range(10)]


def test_keyed_records_round_trip_in_per_key_order(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}orders"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", retries=5)
    sent: dict[str, list[int]] = defaultdict(list)
    partitions: set[int] = set()
    for seq in range(N_RECORDS):
        key = KEYS[seq % len(KEYS)]
        meta = producer.send(topic, key=key.encode(), value=str(seq).encode()).get(timeout=30)
        partitions.add(meta.partition)
        sent[key].append(seq)
    producer.flush()
    producer.close()
    assert len(partitions) > 1, "10 keys over 4 partitions should spread; otherwise ordering is not exercised"

    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id=f"{topic_prefix}group",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    received: dict[str, list[int]] = defaultdict(list)
    count = 0
    deadline = time.monotonic() + 60
    try:
        while count < N_RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                for rec in records:
                    received[rec.key.decode()].append(int(rec.value))
                    count += 1
    finally:
        consumer.close()

    assert count == N_RECORDS
    assert dict(received) == dict(sent)  # everything arrived, each key in send order
