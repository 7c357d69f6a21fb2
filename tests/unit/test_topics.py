"""The topic catalogue (app/kafka/topics.py) against what a worker declares."""

from __future__ import annotations

import pytest

from app.settings import Settings


def test_every_table_a_worker_declares_has_its_changelog_in_the_catalogue() -> None:
    pytest.importorskip("faust")
    from app.kafka.topics import TOPICS
    from app.stream.app import build_app

    settings = Settings(topic_prefix="u.", partitions=3, store="memory", web_port=0)
    app, _, _ = build_app(settings)
    declared = {table.changelog_topic.get_topic_name(): table.partitions or settings.partitions for table in app.tables.values()}
    catalogue = {spec.name(settings): spec.partition_count(settings) for spec in TOPICS if spec.role == "changelog"}
    assert declared == catalogue
