"""`faultline mark`'s loop (SPEC R18.2): read `faultline.faults` in a consumer group of its
own, mark or skip every record of a poll (app/mark/marker.py), then commit the group's
offsets. A record is committed only after its pod was marked or skipped; a restart (a
crash, a kill, a rebalance) reads again from the last commit, and what it reads again
finds its pod already marked. Replaying the topic from its start marks nothing twice.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import msgspec
from kafka.errors import CommitFailedError, KafkaError

from app.kafka import clients
from app.mark.marker import Marker
from app.mark.metrics import MarkMetrics
from app.mark.settings import MarkSettings
from app.model import records_v1
from app.model.records import FAULTS, Fault
from app.settings import Settings

log = logging.getLogger("faultline.mark")

POLL_MS = 500
MAX_POLL_RECORDS = 500

_decode = msgspec.json.Decoder(Fault | records_v1.Fault).decode


def decode_fault(value: bytes | None) -> Fault:
    """A faults-topic value as a `Fault` (v1 records, written before device health, read
    as v2 with no action). Raises msgspec.DecodeError/ValidationError for anything else."""
    if value is None:
        raise msgspec.DecodeError("a tombstone (no value)")
    fault = _decode(value)
    if isinstance(fault, records_v1.Fault):
        fields = msgspec.to_builtins(fault)
        fields.pop("schema", None)
        return msgspec.convert(fields, Fault, from_attributes=False)
    return fault


def consumer(settings: Settings, mark: MarkSettings) -> Any:
    """The faults topic in the mark's group; offsets committed by `run` only. A group
    never committed starts at the topic's beginning: faults of pods that ended cost one
    read each and are skipped."""
    kafka = clients.consumer(
        settings,
        group_id=settings.topic_prefix + mark.mark_group,
        client_id="faultline-mark",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=settings.fetch_wait_ms,
        max_poll_records=MAX_POLL_RECORDS,
        allow_auto_create_topics=False,  # a topic the workers never made is said, not made (the broker's default)
    )
    topic = settings.topic(FAULTS)
    if not kafka.partitions_for_topic(topic):  # a group subscribed to no topic would wait in silence
        kafka.close(autocommit=False)
        raise TopicMissing(
            f"the topic {topic} does not exist on {settings.bootstrap}: create the topics (faultline topics create, "
            "with the workers' --topic-prefix) and run the workers, or fix --topic-prefix / FAULTLINE_TOPIC_PREFIX"
        )
    kafka.subscribe([topic])
    return kafka


class TopicMissing(RuntimeError):
    """The faults topic does not exist (the message says how to make it)."""


def run(kafka: Any, marker: Marker, metrics: MarkMetrics, stop: threading.Event) -> None:
    """Until `stop`: poll, handle the whole poll, commit. What stops the marker (a stop
    asked for mid-batch, a fatal API error) leaves that poll uncommitted."""
    while not stop.is_set():
        polled = kafka.poll(timeout_ms=POLL_MS)
        if not polled:
            continue
        faults: list[Fault] = []
        for partition, records in polled.items():
            for record in records:
                metrics.read()
                try:
                    faults.append(decode_fault(record.value))
                except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                    metrics.unreadable()  # bad input never stops the mark (R11): counted, said, passed
                    log.warning("skipped %s[%d] offset %d: not a fault record (%s)", partition.topic, partition.partition, record.offset, exc)
        marker.handle(faults)
        try:
            kafka.commit()
        except CommitFailedError as exc:
            # A rebalance took partitions away meanwhile: their new owner reads these again
            # and finds the pods marked (R18.2).
            log.warning("the offsets of a batch could not be committed (%s): its faults are read again, and skipped", exc)
        except KafkaError as exc:
            log.warning("the offsets of a batch could not be committed (%s): read again after a restart, and skipped", exc)
