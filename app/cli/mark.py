"""`faultline mark` (SPEC R18): read faultline.faults and mark the pods whose GPU a trusted
critical fault names, until SIGTERM (docs/mark.md). Its settings: the mark's own
(app/mark/settings.py), Kafka's (app/settings.py) and the API server's (app/bridge/settings.py),
each a flag generated from its one declaration: flag > FAULTLINE_* environment > default.
"""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

from app import settings as settings_mod
from app.bridge import settings as bridge_settings_mod
from app.cli.bridge import _on_signals, _setup_logging
from app.cli.common import KAFKA, add_rules_option, fail, need, rules_from_args
from app.cli.settings_flags import settings_flags
from app.mark import settings as mark_settings_mod
from app.settings import SettingsError

KAFKA_NAMES = [*KAFKA, "fetch_wait_ms", "log_level"]
# The API server: which cluster, how to reach it, how long to retry it.
CLUSTER_NAMES = ["cluster", "kubeconfig", "context", "backoff_initial", "backoff_max", "give_up_after"]
MARK_NAMES = [info.name for info in mark_settings_mod.describe()]

log = logging.getLogger("faultline.mark")


def register(commands: argparse._SubParsersAction) -> None:
    parents = [
        settings_flags(mark_settings_mod.describe(), MARK_NAMES, "mark settings"),
        settings_flags(bridge_settings_mod.describe(), CLUSTER_NAMES, "cluster settings"),
        settings_flags(settings_mod.describe(), KAFKA_NAMES, "Kafka settings"),
    ]
    p = commands.add_parser(
        "mark",
        parents=parents,
        help="read faultline.faults and add the condition faultline.io/GPUFault to each running pod a trusted critical GPU "
        "fault names, for a Job's podFailurePolicy (opt-in; SIGTERM/Ctrl-C to stop)",
    )
    add_rules_option(p)  # the Xid table and attempt labels of the rule set the workers run
    p.set_defaults(run=run_mark)


def _load(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    kafka = settings_mod.load({name: getattr(args, name) for name in KAFKA_NAMES})
    cluster = bridge_settings_mod.load({name: getattr(args, name) for name in CLUSTER_NAMES})
    mark = mark_settings_mod.load({name: getattr(args, name) for name in MARK_NAMES})
    return kafka, cluster, mark


def run_mark(args: argparse.Namespace) -> int:
    need("mark", "bridge", "kubernetes", "kafka")
    try:
        kafka, cluster, mark = _load(args)
    except SettingsError as exc:
        return fail(str(exc), 2)
    rules = rules_from_args(args)
    _setup_logging(kafka.log_level)
    from kafka.errors import KafkaError

    from app.bridge.client import api_client
    from app.bridge.errors import BridgeError
    from app.mark import consumer
    from app.mark.kube import MarkApiError, PodApi
    from app.mark.marker import Marker, Stopped
    from app.mark.metrics import MarkMetrics
    from app.mark.server import MetricsServer

    try:
        api = PodApi(api_client(cluster.kubeconfig, cluster.context, connections=mark.mark_concurrency + 2))
    except BridgeError as exc:
        return fail(str(exc))
    metrics, stop = MarkMetrics(), threading.Event()
    server = None
    if mark.mark_metrics_port:
        try:
            server = MetricsServer(metrics, mark.mark_metrics_host, mark.mark_metrics_port).start()
        except OSError as exc:
            api.close()
            return fail(
                f"cannot serve /metrics on {mark.mark_metrics_host}:{mark.mark_metrics_port} ({exc.strerror or exc}): "
                "choose another --mark-metrics-port (FAULTLINE_MARK_METRICS_PORT), or 0 to serve none"
            )
    marker = Marker(
        api, cluster=cluster.cluster, condition_type=mark.mark_condition_type, rules=rules, metrics=metrics, stop=stop,
        concurrency=mark.mark_concurrency, remembered=mark.mark_remembered, backoff_initial=cluster.backoff_initial,
        backoff_max=cluster.backoff_max, give_up_after=cluster.give_up_after,
    )  # fmt: skip
    # SIGINT/SIGTERM: finish the batch in hand (or leave it uncommitted while a call waits
    # to be retried), commit, and exit; a second signal interrupts at once.
    restore = _on_signals(stop, False, "finishing the faults in hand", log)
    reader = None
    try:
        reader = consumer.consumer(kafka, mark)
        log.info(
            "marking pods of cluster %s with %s from %s (group %s, rules %s)%s",
            cluster.cluster, mark.mark_condition_type, kafka.topic("faultline.faults"), kafka.topic_prefix + mark.mark_group,
            rules.version, f"; /metrics on {mark.mark_metrics_host}:{server.port}" if server else "",
        )  # fmt: skip
        consumer.run(reader, marker, metrics, stop)
    except (MarkApiError, BridgeError, consumer.TopicMissing) as exc:
        return fail(str(exc))
    except KafkaError as exc:
        return fail(f"Kafka: {exc}")
    except Stopped:
        pass  # the batch in hand stays uncommitted: read again at the next start
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    finally:
        restore()
        stop.set()
        marker.close()
        if reader is not None:
            reader.close(autocommit=False)
        if server is not None:
            server.stop()
        api.close()
        s = metrics.snapshot()
        skipped = ", ".join(f"{n} {reason}" for reason, n in s.skips.items() if n) or "none"
        log.info("%d fault record(s) read: %d pod(s) marked; skipped: %s; %d refused", s.records, s.marks, skipped, s.refused)
    return 0
