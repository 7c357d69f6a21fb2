"""The Faust app, built from `Settings` (no module-level app: each worker, test and
prefix gets its own)."""

from __future__ import annotations

from pathlib import Path

import faust

from app.core.rules import DEFAULT_RULES, Rules
from app.settings import Settings
from app.stream.agents import Stages
from app.stream.fleet_stage import FleetStage
from app.stream.faust_fixes import (
    bounded_rocksdb_memory,
    on_stop_signal,
    seek_uncommitted_partitions_to_beginning,
    short_fetch_wait_between_rebalances,
)


def build_app(settings: Settings, rules: Rules = DEFAULT_RULES) -> tuple[faust.App, Stages, FleetStage]:
    """The app with its stages; the caller mounts a web surface on it before running it."""
    seek_uncommitted_partitions_to_beginning()
    if settings.store == "rocksdb":
        bounded_rocksdb_memory(settings.rocksdb_block_cache_bytes, settings.rocksdb_write_buffer_bytes)
    datadir = Path(settings.worker_dir)
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
    fleet = FleetStage(stages, settings.fleet(), run=settings.fleet_stage)
    return app, stages, fleet


def run_worker(app: faust.App, stages: Stages, settings: Settings) -> int:
    """Run one worker in the foreground until SIGTERM/SIGINT, or until it decides to
    stop; either way it exits within `stop_timeout` of that (app/stream/stopping.py)."""
    worker = faust.Worker(app, loglevel=settings.log_level.upper(), quiet=True)
    deadline = stages.delivery.stop
    on_stop_signal(worker, lambda name: deadline.arm(f"{name} received", code=0))
    crash = app.crash

    async def crashing(reason: BaseException) -> None:
        deadline.arm(f"{type(reason).__name__}: {reason}")
        await crash(reason)

    app.crash = crashing  # type: ignore[method-assign]
    worker.execute_from_commandline()  # exits the process when the worker stops
    return 0
