"""The Faust app, built from `Settings` (no module-level app: each worker, test and
prefix gets its own)."""

from __future__ import annotations

from pathlib import Path

import faust

from app.core.base.rules import DEFAULT_FLEET, DEFAULT_RULES, Rules
from app.kafka.config import faust_kwargs
from app.settings import Settings
from app.stream.agents import Stages
from app.stream.faust_fixes import (
    back_off_reconnects,
    bounded_rocksdb_memory,
    close_stores,
    deliver_records_without_tasks_when_nothing_can_wait,
    hold_read_offsets_on_rewind,
    leave_the_group_when_stopping,
    on_stop_signal,
    require_targets,
    rocksdb_closed_before_exit,
    seek_uncommitted_partitions_to_beginning,
    short_fetch_wait_between_rebalances,
    take_assignment_made_for_an_earlier_url,
    without_per_event_monitor,
)
from app.stream.read_model import FleetReadModel


def build_app(settings: Settings, rules: Rules = DEFAULT_RULES) -> tuple[faust.App, Stages, FleetReadModel]:
    """The app with its stages and its fleet read model; the caller mounts a web surface
    on it before running it. The fleet settings are the rules' (a rule file's, with the
    flags and variables the user set: app/cli/common.py `rules_from_args`); `fleet_stage`
    false derives no fleet health."""
    fleet = rules.fleet or DEFAULT_FLEET
    rules = rules if settings.fleet_stage else rules.without_fleet_stage()
    require_targets()  # a Faust the patches do not fit stops here, naming what changed
    seek_uncommitted_partitions_to_beginning()
    take_assignment_made_for_an_earlier_url()
    deliver_records_without_tasks_when_nothing_can_wait()
    back_off_reconnects()
    leave_the_group_when_stopping()
    if settings.store == "rocksdb":
        bounded_rocksdb_memory(settings.rocksdb_block_cache_bytes, settings.rocksdb_write_buffer_bytes)
        rocksdb_closed_before_exit()
    datadir = Path(settings.worker_dir)
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
        producer_linger=settings.produce_linger_ms / 1000,
        consumer_group_instance_id=settings.worker_id or None,
        web_enabled=settings.web_port != 0,
        web_port=settings.web_port or 6066,
        web_bind=settings.web_host,
        **_identity(settings),
        # Faust's own pages show raw stage state (/table/), hosts and partitions (/router/)
        # and internals (/, /graph): off unless asked for (docs/streaming.md).
        web_router_enabled=settings.web_faust_routes,
        web_tables_enabled=settings.web_faust_routes,
        web_stats_enabled=settings.web_faust_routes,
        web_graph_enabled=settings.web_faust_routes,
        autodiscover=False,
    )
    short_fetch_wait_between_rebalances(app, settings.fetch_wait_ms, settings.fetch_min_bytes)
    without_per_event_monitor(app)
    hold_read_offsets_on_rewind(app)
    stages = Stages(app, settings, rules)
    view = FleetReadModel(stages, settings, rules, fleet)
    if settings.fleet_stage and settings.web_port != 0:
        # Only the web surface reads the view: a worker without one does not read every
        # derived record and verdict into it (the live benchmark's workers run so).
        app.add_dependency(view)
    return app, stages, view


def _identity(settings: Settings) -> dict[str, str]:
    """The URL a worker gives its group. Faust derives it from the hostname and web port and
    keeps it in the assignment the broker holds for a static member (--worker-id): a worker
    restarted under the same id on another port or host (a recreated container) was handed
    that assignment back and stopped consuming. It only routes Faust's /router/ and /table/
    requests, so without those routes a worker with an id is named by the id alone."""
    if settings.worker_id and not settings.web_faust_routes:
        return {"canonical_url": f"http://{settings.worker_id}.{settings.app_id}.invalid/"}
    return {}


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
    try:
        worker.execute_from_commandline()  # exits the process when the worker stops
    finally:
        close_stores(app)  # the loop has ended: no RocksDB database may outlive it (patch 16)
    return 0
