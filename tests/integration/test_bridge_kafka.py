"""The bridge on the real broker: API server double → bridge → Kafka; positions in the
compacted topic survive a restart; and, with `faultline worker`, a verdict end to end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
from conftest import stop_process
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from app.bridge.bridge import Bridge
from app.bridge.resources import KINDS
from app.bridge.client import KubeApi, api_client
from app.bridge.kafka_sink import KafkaPositions, KafkaSink, ensure_topics
from app.bridge.records import BRIDGE_GAPS, BRIDGE_POSITIONS
from app.bridge.settings import BridgeSettings
from app.kafka.topics import create_topics
from app.model.records import CLASSIFIED_FAILURES
from app.settings import Settings
from tests.bridge.apiserver import FakeKube
from tests.bridge.helpers import Running, apply_story, bump, pod, wait_for

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "it-a"
PARTITIONS = 2


def read_all(bootstrap: str, topic: str) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records: list = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def changes_in(bootstrap: str, topic: str) -> list:
    """A source topic's change records, without the bridge's progress records."""
    return [r for r in read_all(bootstrap, topic) if orjson.loads(r.value)["type"] != "BOOKMARK"]


def watch_settings(**overrides) -> BridgeSettings:
    values = {"cluster": CLUSTER, "kinds": "Pod,Event", "backoff_initial": 0.05, "backoff_max": 0.5, "checkpoint_interval": 0.1, "crd_recheck": 0.5}
    values.update(overrides)
    return BridgeSettings(**values)


@pytest.fixture(autouse=True)
def no_threads_left_behind():
    """The bridge's watchers, the producer's sender and the consumers' threads all end."""
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 10
    left: list = []
    while time.monotonic() < deadline:
        left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError(f"threads left behind: {left}")


@pytest.fixture
def kube(tmp_path):
    server = FakeKube().start()
    yield server
    server.stop()


@pytest.fixture
def kafka_settings(kafka_bootstrap: str, topic_prefix: str) -> Settings:
    settings = Settings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, partitions=PARTITIONS)
    create_topics(settings)
    ensure_topics(settings)
    return settings


def run_bridge(kube: FakeKube, kafka_settings: Settings, tmp_path: Path, **overrides) -> tuple[Running, KafkaSink, KubeApi]:
    api = KubeApi(api_client(kubeconfig=str(kube.write_kubeconfig(tmp_path / "kubeconfig"))))
    sink = KafkaSink(kafka_settings)
    return Running(Bridge(api, sink, watch_settings(**overrides))), sink, api


def stop_bridge(running: Running, sink: KafkaSink, api: KubeApi) -> None:
    try:
        running.stop()
    finally:
        sink.close()
        api.close()


def saved_position(kafka_settings: Settings, kind: str) -> str | None:
    saved = KafkaPositions(kafka_settings, producer=None).load(CLUSTER).get(kind)  # type: ignore[arg-type]
    return saved.resource_versions.get("*") if saved else None


def test_bridge_to_kafka_then_a_restart_resumes_from_the_positions_topic(kube, kafka_settings, tmp_path):
    for i in range(20):
        kube.create("pods", pod(f"p{i:02d}"))
    running, sink, api = run_bridge(kube, kafka_settings, tmp_path)
    try:
        wait_for(lambda: saved_position(kafka_settings, "Pod") == str(kube.rv), timeout=60, what="the Pod position in Kafka")
    finally:
        stop_bridge(running, sink, api)

    # While the bridge is down:
    kube.update("pods", "ml", "p01", bump)
    kube.delete("pods", "ml", "p02")
    kube.create("pods", pod("p20"))
    final_rv = str(kube.rv)

    running, sink, api = run_bridge(kube, kafka_settings, tmp_path)
    try:
        wait_for(lambda: saved_position(kafka_settings, "Pod") == final_rv, timeout=60, what="the restarted bridge's checkpoint")
    finally:
        stop_bridge(running, sink, api)

    records = changes_in(kafka_settings.bootstrap, kafka_settings.topic("k8s.pods"))
    per_key: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for rec in records:
        envelope = orjson.loads(rec.value)
        assert rec.key.decode() == envelope["object"]["metadata"]["uid"] and envelope["cluster"] == CLUSTER
        per_key[envelope["object"]["metadata"]["name"]].append((envelope["type"], int(envelope["object"]["metadata"]["resourceVersion"])))
    assert len(records) == 24  # 20 listed, 4 changes while down: nothing republished
    assert [t for t, _ in per_key["p01"]] == ["ADDED", "MODIFIED"]
    assert [t for t, _ in per_key["p02"]] == ["ADDED", "MODIFIED", "DELETED"]  # deletionTimestamp, then gone
    assert [t for t, _ in per_key["p20"]] == ["ADDED"]
    for changes in per_key.values():
        assert [rv for _, rv in changes] == sorted(rv for _, rv in changes)  # per-key order on its partition

    # The positions topic: compacted, keyed <cluster>/<kind>.
    positions = read_all(kafka_settings.bootstrap, kafka_settings.topic(BRIDGE_POSITIONS))
    assert {r.key.decode() for r in positions} == {f"{CLUSTER}/Pod", f"{CLUSTER}/Event"}
    admin = KafkaAdminClient(bootstrap_servers=kafka_settings.bootstrap)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, kafka_settings.topic(BRIDGE_POSITIONS))])
        config = described["topic"][kafka_settings.topic(BRIDGE_POSITIONS)]
        policy = config["cleanup.policy"]
        assert (policy.get("value") if isinstance(policy, dict) else policy) == "compact"
    finally:
        admin.close()


def test_a_gap_marker_reaches_its_own_topic(kube, kafka_settings, tmp_path):
    for name in ("a", "b"):
        kube.create("pods", pod(name))
    running, sink, api = run_bridge(kube, kafka_settings, tmp_path, kinds="Pod")
    try:
        wait_for(lambda: saved_position(kafka_settings, "Pod") == str(kube.rv), timeout=60, what="the first checkpoint")
        kube.set_unavailable(True)
        wait_for(lambda: not kube.watches, what="the watch to break")
        kube.delete("pods", "ml", "b")
        kube.compact()
        kube.set_unavailable(False)
        wait_for(lambda: running.bridge.stats.gaps == 1, what="the relist")
        wait_for(lambda: saved_position(kafka_settings, "Pod") == str(kube.rv), timeout=60, what="the relisted position")
    finally:
        stop_bridge(running, sink, api)
    [gap] = read_all(kafka_settings.bootstrap, kafka_settings.topic(BRIDGE_GAPS))
    value = orjson.loads(gap.value)
    assert gap.key.decode() == f"{CLUSTER}/Pod"
    assert value["schema"] == "faultline.BridgeGap/v1" and value["deleted"] == 1 and value["relisted_resource_version"] == str(kube.rv)
    pods = [orjson.loads(r.value) for r in changes_in(kafka_settings.bootstrap, kafka_settings.topic("k8s.pods"))]
    # Kafka orders records per partition only: b's own records end with its deletion.
    changes_of_b = [p["type"] for p in pods if p["object"]["metadata"]["name"] == "b"]
    assert changes_of_b[-1] == "DELETED" and changes_of_b.count("DELETED") == 1


def test_the_bridge_refuses_to_start_without_the_source_topics(kafka_bootstrap, topic_prefix):
    from app.bridge.errors import BridgeError

    with pytest.raises(BridgeError) as raised:
        ensure_topics(Settings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix))
    assert "faultline topics create" in str(raised.value) and f"{topic_prefix}k8s.pods" in str(raised.value)


def _worker_available() -> str:
    """'' when `faultline worker` runs here, else why not."""
    res = subprocess.run([sys.executable, "-m", "app", "worker", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    return "" if res.returncode == 0 else (res.stderr.strip().splitlines() or ["no output"])[-1]


def test_bridge_to_kafka_to_worker_gives_a_verdict_end_to_end(kube, kafka_settings, tmp_path):
    missing = _worker_available()
    if missing:
        pytest.skip(f"`faultline worker` is missing (the streaming worker is not installed or not finished): {missing}")
    from tests.unit import builders, stories

    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "app", "worker", "--bootstrap", kafka_settings.bootstrap, "--topic-prefix", kafka_settings.topic_prefix,
             "--partitions", str(PARTITIONS), "--store", "memory", "--data-dir", str(tmp_path / "data"), "--web-port", "0"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    running = sink = api = None
    try:
        running, sink, api = run_bridge(kube, kafka_settings, tmp_path, kinds="")
        wait_for(lambda: len(kube.watches) == len(KINDS), timeout=30, what="the bridge's watches")
        builders.reset_ids()
        story = stories.pod_task_nvlink(t0=datetime.now(timezone.utc) - timedelta(minutes=2))
        apply_story(kube, story)
        key = f"{CLUSTER}/ml/nightly-7f3a/train/1"

        def verdict():
            assert worker.poll() is None, f"the worker exited:\n{log.read_text()[-3000:]}"
            found = [orjson.loads(r.value) for r in read_all(kafka_settings.bootstrap, kafka_settings.topic(CLASSIFIED_FAILURES)) if r.key.decode() == key]
            return found and found[-1]["code"] == "GpuNvlinkError" and found[-1]

        final = wait_for(verdict, timeout=180, what="the worker's verdict")
        assert final["kind"] == "SYSTEM" and final["gpu_fault"]["code"] == 74 and final["cluster"] == CLUSTER
    finally:
        if running is not None:
            stop_bridge(running, sink, api)
        stop_process(worker)


def test_faultline_bridge_command_publishes_and_stops_cleanly_on_sigterm(kube, kafka_settings, tmp_path):
    """The command as a Deployment runs it: settings from the environment, SIGTERM to stop;
    what was received is published and its position saved before the process exits."""
    for i in range(5):
        kube.create("pods", pod(f"p{i}"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
    env.update({
        "PYTHONPATH": str(ROOT),
        "FAULTLINE_CLUSTER": CLUSTER,
        "FAULTLINE_KUBECONFIG": str(kube.write_kubeconfig(tmp_path / "kubeconfig")),
        "FAULTLINE_BOOTSTRAP": kafka_settings.bootstrap,
        "FAULTLINE_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "FAULTLINE_KINDS": "Pod",
        "FAULTLINE_HEARTBEAT_FILE": str(tmp_path / "heartbeat"),
    })
    proc = subprocess.Popen([sys.executable, "-m", "app", "bridge"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: kube.watches, timeout=60, what="the bridge's watch")
        kube.update("pods", "ml", "p0", bump)
        wait_for(lambda: len(changes_in(kafka_settings.bootstrap, kafka_settings.topic("k8s.pods"))) == 6, timeout=60, what="6 records")
        assert (tmp_path / "heartbeat").exists()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, stderr.decode()
    assert b"stopping (signal SIGTERM)" in stderr and b"Traceback" not in stderr
    assert saved_position(kafka_settings, "Pod") == str(kube.rv)


def progress_records(records: list) -> list:
    return [r for r in records if orjson.loads(r.value)["type"] == "BOOKMARK"]


def observed_us(value: bytes) -> int:
    at = datetime.strptime(orjson.loads(value)["observed_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def test_r12_2_progress_reaches_every_partition_after_every_record_of_its_time(kube, kafka_settings, tmp_path):
    for i in range(10):
        kube.create("pods", pod(f"p{i}"))
    running, sink, api = run_bridge(kube, kafka_settings, tmp_path, kinds="Pod", progress_interval=0.05)
    try:
        wait_for(lambda: running.bridge.watches and running.bridge.watches[0].progress.live, what="the watch")
        for _ in range(20):
            for i in range(10):
                kube.update("pods", "ml", f"p{i}", bump)
        wait_for(lambda: running.bridge.stats.records == 210 and running.bridge.stats.progress > 5, timeout=60, what="records and progress")
    finally:
        stop_bridge(running, sink, api)
    records = read_all(kafka_settings.bootstrap, kafka_settings.topic("k8s.pods"))
    by_partition: dict[int, list] = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(r)
    assert set(by_partition) == set(range(PARTITIONS))
    for partition, recs in by_partition.items():
        marks = progress_records(recs)
        assert marks, f"partition {partition} got no progress record"
        for mark in marks:
            assert mark.key == b"Pod"
            at = observed_us(mark.value)
            late = [r for r in recs if r.offset > mark.offset and orjson.loads(r.value)["type"] != "BOOKMARK" and observed_us(r.value) < at]
            assert late == [], f"partition {partition}: a record from before progress {at} came after it"
    # The same progress time on every partition, in the same order.
    times = {p: [observed_us(m.value) for m in progress_records(recs)] for p, recs in by_partition.items()}
    assert len({tuple(t) for t in times.values()}) == 1


def test_r12_2_no_progress_for_records_kafka_did_not_acknowledge(kube, topic_prefix, tmp_path):
    """The broker goes away while the bridge flushes: the records received since were never
    acknowledged (they expire), the bridge stops, and even with the broker back before its
    producer is closed, no progress record claims them."""
    from app.bridge.errors import DeliveryError
    from app.bridge.records import now_us
    from ops.kafka import local_broker

    broker = local_broker.LocalBroker(tmp_path / "kafka", port=local_broker.free_port())
    bootstrap = broker.start()
    try:
        settings = Settings(bootstrap=bootstrap, topic_prefix=topic_prefix, partitions=PARTITIONS)
        create_topics(settings)
        ensure_topics(settings)
        for name in ("a", "b"):
            kube.create("pods", pod(name))
        api = KubeApi(api_client(kubeconfig=str(kube.write_kubeconfig(tmp_path / "kubeconfig"))))
        sink = KafkaSink(settings, flush_timeout=30, delivery_timeout=3)
        running = Running(Bridge(api, sink, watch_settings(kinds="Pod", progress_interval=0.1)))
        try:
            wait_for(lambda: running.bridge.stats.progress >= 3, timeout=60, what="progress while the broker is up")
            broker.stop()  # the connection breaks
            broken = now_us()
            made = [kube.update("pods", "ml", name, bump)["metadata"]["resourceVersion"] for name in ("a", "b", "a")]
            running.join(timeout=60)
            assert isinstance(running.error, DeliveryError), running.error
            broker.start()  # back before the producer is closed: anything it still holds goes out now
        finally:
            sink.close()
            api.close()
        records = read_all(bootstrap, settings.topic("k8s.pods"))
    finally:
        broker.stop()
    written = {orjson.loads(r.value)["object"]["metadata"].get("resourceVersion") for r in records}
    lost = [rv for rv in made if rv not in written]
    assert lost, "the changes made while the broker was away were expected to be lost"
    marks = progress_records(records)
    assert marks, "progress from before the break"
    assert max(observed_us(m.value) for m in marks) < broken  # nothing received after the break is claimed


def test_a_first_start_says_once_that_no_positions_are_saved(kube, kafka_settings, tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="faultline.bridge")
    kube.create("pods", pod("a"))
    for run in (1, 2):
        caplog.clear()
        running, sink, api = run_bridge(kube, kafka_settings, tmp_path, kinds="Pod")
        try:
            wait_for(lambda: saved_position(kafka_settings, "Pod") == str(kube.rv), timeout=60, what="the checkpoint")
        finally:
            stop_bridge(running, sink, api)
        said = [r.getMessage() for r in caplog.records if "no saved positions" in r.getMessage()]
        if run == 1:
            assert said == [f"no saved positions for cluster {CLUSTER} in topic {kafka_settings.topic(BRIDGE_POSITIONS)}: "
                            "a first start, so every kind is listed from the start"]
        else:
            assert said == []
