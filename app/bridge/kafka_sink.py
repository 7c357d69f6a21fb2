"""The Kafka sink: source records with kafka-python (acks=all, idempotent), progress
records on every partition of their source topic, gap markers on `faultline.bridge-gaps`,
positions on the compacted `faultline.bridge-positions`."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import msgspec
from kafka import KafkaProducer, TopicPartition
from kafka.errors import KafkaError, MessageSizeTooLargeError, TopicAlreadyExistsError

from app.bridge.errors import BridgeError, DeliveryError
from app.bridge.positions import decode_position, encode_position, position_key
from app.bridge.records import (
    BRIDGE_GAPS,
    BRIDGE_POSITIONS,
    BridgeGap,
    BridgePosition,
    SourceRecord,
)
from app.kafka import clients
from app.kafka.config import KafkaUnreachable
from app.model.envelope import SOURCE_TOPICS
from app.settings import Settings

log = logging.getLogger("faultline.bridge")

# Throughput: a relist publishes thousands of records at once; batching them for 20 ms
# in batches of up to 512 KiB costs little latency next to a watch's.
LINGER_MS = 20
BATCH_SIZE = 512 * 1024
FLUSH_TIMEOUT = 120.0
LOAD_TIMEOUT = 60.0

_gap_encoder = msgspec.json.Encoder()


def ensure_topics(settings: Settings) -> None:
    """The source topics must exist (`faultline topics create`: their partition count is
    shared with the workers); the bridge's own two are created when missing."""
    try:
        admin = clients.admin(settings, client_id="faultline-bridge-admin")
    except KafkaUnreachable as exc:  # says why and what to fix
        raise BridgeError(str(exc)) from None
    except KafkaError as exc:
        raise BridgeError(
            f"cannot reach Kafka at {settings.bootstrap} ({exc}): start a broker or point --bootstrap / FAULTLINE_BOOTSTRAP at one"
        ) from None
    try:
        existing = set(admin.list_topics())
        missing = [settings.topic(t) for t in SOURCE_TOPICS if settings.topic(t) not in existing]
        if missing:
            raise BridgeError(
                f"topic(s) {', '.join(missing)} do not exist: run `faultline topics create` with the same "
                f"--topic-prefix ({settings.topic_prefix!r}) first (Kafka would auto-create them with the wrong partition count)"
            )
        wanted = {
            settings.topic(BRIDGE_POSITIONS): {"cleanup.policy": "compact"},
            settings.topic(BRIDGE_GAPS): {},
        }
        request = {
            name: {"num_partitions": 1, "replication_factor": settings.replication, "configs": config}
            for name, config in wanted.items()
            if name not in existing
        }
        if request:
            result = admin.create_topics(request, raise_errors=False, wait_for_metadata=True)
            for topic in result["topics"]:
                code = topic.get("error_code", 0)
                if code and code != TopicAlreadyExistsError.errno:  # a concurrent create is fine
                    raise BridgeError(f"creating topic {topic['name']} failed: {topic.get('error_message') or code}")
                log.info("created topic %s", topic["name"])
    except KafkaError as exc:
        raise BridgeError(f"checking the topics on {settings.bootstrap} failed: {exc}") from None
    finally:
        admin.close()


class KafkaPositions:
    """Positions in the compacted topic, key `<cluster>/<kind>`: the latest record per key
    is the position. Written through the sink's producer, so a flush covers them."""

    def __init__(self, settings: Settings, producer: KafkaProducer) -> None:
        self._settings = settings
        self._producer = producer
        self.topic = settings.topic(BRIDGE_POSITIONS)
        self.where: str | None = f"topic {self.topic}"

    def load(self, cluster: str) -> dict[str, BridgePosition]:
        consumer = clients.consumer(
            self._settings,
            enable_auto_commit=False,
            client_id="faultline-bridge-positions",
        )
        try:
            partitions = consumer.partitions_for_topic(self.topic)
            if not partitions:
                return {}
            tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            end = consumer.end_offsets(tps)
            found: dict[str, BridgePosition] = {}
            deadline = time.monotonic() + LOAD_TIMEOUT
            while any(consumer.position(tp) < end[tp] for tp in tps):
                if time.monotonic() > deadline:
                    raise BridgeError(f"reading the positions from {self.topic} took over {LOAD_TIMEOUT:g}s")
                for records in consumer.poll(timeout_ms=500).values():
                    for rec in records:
                        key = rec.key.decode("utf-8", "replace") if rec.key else ""
                        if not key.startswith(cluster + "/"):
                            continue
                        position = decode_position(rec.value)
                        if position is None:
                            found.pop(key, None)
                        else:
                            found[key] = position
        except KafkaError as exc:
            raise BridgeError(f"reading the positions from {self.topic} failed: {exc}") from None
        finally:
            consumer.close()
        return {p.kind: p for p in found.values()}

    def save(self, positions: Iterable[BridgePosition]) -> None:
        for position in positions:
            key = position_key(position.cluster, position.kind).encode()
            self._producer.send(self.topic, key=key, value=encode_position(position))


class KafkaSink:
    def __init__(
        self,
        settings: Settings,
        *,
        client_id: str = "faultline-bridge",
        flush_timeout: float = FLUSH_TIMEOUT,
        delivery_timeout: float = FLUSH_TIMEOUT,
    ) -> None:
        """`delivery_timeout`: how long a record may wait for the broker before it fails
        (then the next flush raises DeliveryError)."""
        self._settings = settings
        self._flush_timeout = flush_timeout
        self._topics = {logical: settings.topic(logical) for logical in SOURCE_TOPICS}
        self._gaps = settings.topic(BRIDGE_GAPS)
        try:
            self._producer = clients.producer(
                settings,
                acks="all",
                enable_idempotence=True,
                linger_ms=LINGER_MS,
                batch_size=BATCH_SIZE,
                client_id=client_id,
                delivery_timeout_ms=int(delivery_timeout * 1000),
                request_timeout_ms=min(30_000, int(delivery_timeout * 1000) - LINGER_MS),
            )
        except KafkaUnreachable as exc:
            raise BridgeError(str(exc)) from None
        except KafkaError as exc:
            raise BridgeError(f"cannot reach Kafka at {settings.bootstrap} ({exc}); set --bootstrap / FAULTLINE_BOOTSTRAP") from None
        self.positions = KafkaPositions(settings, self._producer)
        self._failure: BaseException | None = None
        self.failed = 0
        self.too_large = 0

    def _on_error(self, exc: BaseException) -> None:
        self.failed += 1
        if self._failure is None:
            self._failure = exc

    def publish(self, record: SourceRecord) -> None:
        try:
            future = self._producer.send(self._topics[record.topic], key=record.key.encode(), value=record.value)
        except MessageSizeTooLargeError as exc:
            # One object larger than the producer may send cannot stall the whole bridge.
            self.too_large += 1
            log.error("skipped a %d-byte record on %s key %s: %s", len(record.value), record.topic, record.key, exc)
            return
        except KafkaError as exc:
            raise DeliveryError(f"publishing to {self._settings.bootstrap} failed: {exc}") from None
        future.add_errback(self._on_error)

    def publish_gap(self, gap: BridgeGap) -> None:
        key = f"{gap.cluster}/{gap.kind}".encode()
        self._producer.send(self._gaps, key=key, value=_gap_encoder.encode(gap)).add_errback(self._on_error)

    def publish_progress(self, topic: str, key: str, value: bytes) -> None:
        """To every partition, explicitly: Kafka orders records only within one."""
        name = self._topics[topic]
        partitions = self._producer.partitions_for(name)
        if not partitions:
            raise DeliveryError(f"no partitions known for topic {name} on {self._settings.bootstrap}")
        for partition in sorted(partitions):
            self._producer.send(name, key=key.encode(), value=value, partition=partition).add_errback(self._on_error)

    def flush(self) -> None:
        try:
            self._producer.flush(timeout=self._flush_timeout)
        except KafkaError as exc:
            raise DeliveryError(
                f"records were not acknowledged by {self._settings.bootstrap} within {self._flush_timeout:g}s: {exc}"
            ) from None
        if self._failure is not None:
            raise DeliveryError(
                f"{self.failed} record(s) could not be written to Kafka ({self._failure}); no position after them was saved, "
                "so a restarted bridge publishes them again"
            )

    def close(self) -> None:
        """Deliver what is buffered (within the flush timeout), then close. Never raises:
        what could not be delivered has no position and no progress after it."""
        try:
            self._producer.flush(timeout=self._flush_timeout)
        except KafkaError as exc:
            log.error("flushing the producer on close failed: %s", exc)
        try:
            self._producer.close(timeout=10)
        except KafkaError as exc:
            # kafka-python's close() flushes first and raises when records are still
            # pending; its sender thread must still end.
            log.error("records still unsent on close are dropped: %s", exc)
            sender = getattr(self._producer, "_sender", None)
            if sender is not None:
                sender.force_close()
                sender.join(10)
