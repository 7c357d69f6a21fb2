"""The Faust app, built from `Settings` (no module-level app: each worker, test and
prefix gets its own)."""

from __future__ import annotations

from pathlib import Path

import faust

from app.core.rules import DEFAULT_RULES, Rules
from app.kafka.config import faust_kwargs
from app.settings import Settings
from app.web.faust_mount import mount
from app.stream.agents import Stages
from app.stream.fleet_stage import FleetStage
from app.stream.faust_fixes import seek_uncommitted_partitions_to_beginning, short_fetch_wait_between_rebalances


def build_app(settings: Settings, rules: Rules = DEFAULT_RULES) -> tuple[faust.App, Stages]:
    seek_uncommitted_partitions_to_beginning()
    datadir = Path(settings.data_dir) / settings.app_id
    datadir.parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,  # the consumer group; changelog topics are <app_id>-<table>-changelog
        **faust_kwargs(settings),
        store="rocksdb://" if settings.store == "rocksdb" else "memory://",
        datadir=str(datadir),
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication,
        # Payloads are the contract's JSON, encoded by us: no Faust model metadata.
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        consumer_max_fetch_size=settings.fetch_partition_bytes,
        processing_guarantee="at_least_once",
        producer_acks=-1,  # all in-sync replicas
        consumer_group_instance_id=settings.worker_id or None,
        web_enabled=settings.web_port != 0,
        web_port=settings.web_port or 6066,
        autodiscover=False,
    )
    short_fetch_wait_between_rebalances(app, settings.fetch_wait_ms)
    stages = Stages(app, settings, rules)
    fleet = FleetStage(stages, settings.fleet(), run=settings.fleet_stage)
    if settings.web_port != 0:
        mount(app, fleet)  # the fleet page under /fleet/, Prometheus /metrics
    return app, stages


def run_worker(settings: Settings, rules: Rules = DEFAULT_RULES) -> int:
    """Run one worker in the foreground until SIGTERM/SIGINT."""
    app, _ = build_app(settings, rules)
    worker = faust.Worker(app, loglevel=settings.log_level.upper(), quiet=True)
    worker.execute_from_commandline()  # exits the process when the worker stops
    return 0
