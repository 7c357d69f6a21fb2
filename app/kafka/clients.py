"""The Kafka clients, each built from `Settings` with its security (app/kafka/config.py).

kafka-python serves the short-lived commands (topics, publish, tail, the bridge); aiokafka
the replay reader and the worker's committed-offset reader; Faust builds its own aiokafka
clients from `config.faust_kwargs`. The kafka-python builders probe the bootstrap servers
first, so an unreachable broker or a rejected certificate is said within seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.kafka.config import aiokafka_kwargs, kafka_python_kwargs, probe
from app.settings import Settings

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer


def producer(settings: Settings, **options: Any) -> KafkaProducer:
    from kafka import KafkaProducer

    probe(settings)
    return KafkaProducer(**kafka_python_kwargs(settings), **options)


def consumer(settings: Settings, **options: Any) -> KafkaConsumer:
    from kafka import KafkaConsumer

    probe(settings)
    # kafka-python asks the broker to create a topic a consumer names; a reader never
    # makes a topic: the workers and `faultline topics` do, with their partitions and settings.
    options.setdefault("allow_auto_create_topics", False)
    return KafkaConsumer(**kafka_python_kwargs(settings), **options)


def admin(settings: Settings, **options: Any) -> KafkaAdminClient:
    from kafka import KafkaAdminClient

    probe(settings)
    return KafkaAdminClient(**kafka_python_kwargs(settings), **options)


def aio_consumer(settings: Settings, **options: Any) -> AIOKafkaConsumer:
    """Not probed: it is built inside an event loop, and aiokafka fails fast on its own."""
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(**aiokafka_kwargs(settings), **options)
