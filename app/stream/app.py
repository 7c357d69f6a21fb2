"""The Faust app, built from `Settings` (no module-level app: each worker, test and
prefix gets its own)."""

from __future__ import annotations

from pathlib import Path

import faust
import msgspec

from app.core.rules import DEFAULT_RULES, Rules
from app.settings import Settings
from app.stream.agents import Stages
from app.stream.faust_fixes import seek_uncommitted_partitions_to_beginning, short_fetch_wait_between_rebalances
from app.stream.read_model import FleetReadModel


def build_app(settings: Settings, rules: Rules = DEFAULT_RULES) -> tuple[faust.App, Stages, FleetReadModel]:
    """The app with its stages and its fleet read model; the caller mounts a web surface
    on it before running it. The fleet settings are the worker's (`fleet_stage` false:
    no fleet health is derived)."""
    fleet = settings.fleet()
    rules = msgspec.structs.replace(rules, fleet=fleet if settings.fleet_stage else None)
    seek_uncommitted_partitions_to_beginning()
    datadir = Path(settings.data_dir) / settings.app_id
    datadir.parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,  # the consumer group; changelog topics are <app_id>-<table>-changelog
        broker=[f"kafka://{server}" for server in settings.bootstrap.split(",")],
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
    view = FleetReadModel(stages, settings, rules, fleet)
    if settings.fleet_stage:
        app.add_dependency(view)
    return app, stages, view


def run_worker(app: faust.App, settings: Settings) -> int:
    """Run one worker in the foreground until SIGTERM/SIGINT."""
    worker = faust.Worker(app, loglevel=settings.log_level.upper(), quiet=True)
    worker.execute_from_commandline()  # exits the process when the worker stops
    return 0
