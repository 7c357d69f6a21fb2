"""SPEC R18.2: `faultline mark` killed mid-stream and started again marks every pod once:
none patched twice, none missed; replaying the faults topic from its start marks nothing.
Real broker, real API server, the mark with its own ServiceAccount's credentials; the
faults are the records the rules make of real pods (tests/bridge/markkube.py)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.kafka.topics import create_topics
from app.model.records import FAULTS
from app.settings import Settings
from tests.bridge import markkube as mk
from tests.bridge.helpers import wait_for
from tests.bridge.realkube import ROOT, faultline_env, interrupt, namespace

pytestmark = pytest.mark.apiserver

CLUSTER = "real-restart"
PODS = 150
MARKED = re.compile(r"marked pod (\S+)/(\S+) ")


def start_mark(kubeconfig: Path, bootstrap: str, prefix: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app", "mark", "--kubeconfig", str(kubeconfig), "--cluster", CLUSTER, "--bootstrap", bootstrap,
             "--topic-prefix", prefix, "--mark-metrics-port", "0", "--fetch-wait-ms", "50", *extra],
            cwd=ROOT, env=faultline_env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def lag(bootstrap: str, group: str, topic: str) -> int:
    """Faults-topic records the group has not committed."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    admin, consumer = KafkaAdminClient(bootstrap_servers=bootstrap), KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        committed = admin.list_group_offsets(group).get(group, {})
        ends = consumer.end_offsets(tps)
        return sum(ends[tp] - (committed[tp].offset if tp in committed else 0) for tp in tps)
    finally:
        admin.close()
        consumer.close()


def marked_in(log: Path) -> list[tuple[str, str]]:
    return MARKED.findall(log.read_text(errors="replace"))


def test_r18_2_a_mark_killed_mid_stream_and_restarted_marks_every_pod_once(apiserver, kafka_bootstrap, topic_prefix, tmp_path):
    from kafka import KafkaProducer

    mk.apply_mark_component(apiserver, bind=False)
    ns = namespace(apiserver, "restart")
    pods = [mk.create_running_pod(apiserver, ns, f"w-{i:03d}") for i in range(PODS)]
    faults = [mk.fault_record(p, CLUSTER, code=79) for p in pods]
    # Among them: a user fault, another cluster's fault, a record that is no fault.
    others = [mk.fault_record(pods[0], CLUSTER, code=31, severity="user"), mk.fault_record(pods[1], "another-cluster")]
    settings = Settings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, partitions=3)
    create_topics(settings)
    topic = settings.topic(FAULTS)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    for fault in [*faults[:5], *others, *faults[5:]]:
        producer.send(topic, key=fault.key.encode(), value=mk.fault_bytes(fault))
    producer.send(topic, key=b"junk", value=b'{"schema": "faultline.Fault/v2", "key": 7}')
    producer.flush()
    producer.close()
    kubeconfig = mk.mark_kubeconfig(apiserver, tmp_path / "kubeconfig")
    group = f"{topic_prefix}faultline-mark"

    # 1. Killed (no shutdown, nothing committed) once it has marked a few pods.
    first_log = tmp_path / "mark-1.log"
    first = start_mark(kubeconfig, kafka_bootstrap, topic_prefix, first_log, "--mark-concurrency", "1")
    try:
        wait_for(lambda: len(marked_in(first_log)) >= 10, timeout=90, what="a first few marks")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    # The pods marked before the kill, and the version each was left at (a kill can land
    # between a patch and its log line: the API server says what was marked).
    served = {p["metadata"]["name"]: apiserver.call("GET", mk.pod_path(ns, p["metadata"]["name"])) for p in pods}
    premarked = {name: pod["metadata"]["resourceVersion"] for name, pod in served.items() if mk.marks(pod)}
    assert 10 <= len(premarked) < PODS, "the kill should land mid-stream"
    assert {name for _, name in marked_in(first_log)} <= set(premarked)

    # 2. Started again: it reads what was not committed, finds the marked pods marked, marks the rest.
    second_log = tmp_path / "mark-2.log"
    second = start_mark(kubeconfig, kafka_bootstrap, topic_prefix, second_log)
    try:
        wait_for(lambda: lag(kafka_bootstrap, group, topic) == 0, timeout=120, what="every fault marked or skipped and committed")
    finally:
        interrupt(second, signal.SIGTERM)
    assert second.returncode == 0, second_log.read_text()[-3000:]
    # None missed, none twice: the restart marked exactly the others, each once, and left
    # the pods marked before the kill as they were.
    again = [name for _, name in marked_in(second_log)]
    assert len(again) == len(set(again)) and set(again) == set(served) - set(premarked)
    assert {name: apiserver.call("GET", mk.pod_path(ns, name))["metadata"]["resourceVersion"] for name in premarked} == premarked
    summary = second_log.read_text()
    assert f"{PODS - len(premarked)} pod(s) marked; skipped:" in summary and "already_marked" in summary and "; 0 refused" in summary
    assert "not a fault record" in first_log.read_text() + summary  # the junk record: said, skipped, committed
    versions = {p["metadata"]["name"]: apiserver.call("GET", mk.pod_path(ns, p["metadata"]["name"]))["metadata"]["resourceVersion"] for p in pods}
    assert all(len(mk.marks_of(apiserver, ns, name)) == 1 for name in versions)

    # 3. The whole topic replayed by a group of its own: nothing is patched again.
    replay_log = tmp_path / "mark-replay.log"
    replay = start_mark(kubeconfig, kafka_bootstrap, topic_prefix, replay_log, "--mark-group", "replay")
    try:
        wait_for(lambda: lag(kafka_bootstrap, f"{topic_prefix}replay", topic) == 0, timeout=120, what="the replay read to the end")
    finally:
        interrupt(replay, signal.SIGTERM)
    assert marked_in(replay_log) == [] and f"0 pod(s) marked; skipped: 1 not_critical, {PODS} already_marked" in replay_log.read_text()
    after: dict[str, Any] = {name: apiserver.call("GET", mk.pod_path(ns, name))["metadata"]["resourceVersion"] for name in versions}
    assert after == versions


def test_r18_2_a_mark_without_its_topic_says_how_to_make_it(apiserver, kafka_bootstrap, topic_prefix, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "app", "mark", "--kubeconfig", str(apiserver.kubeconfig), "--cluster", CLUSTER,
         "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix, "--mark-metrics-port", "0"],
        cwd=ROOT, env=faultline_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"the topic {topic_prefix}faultline.faults does not exist" in result.stderr and "faultline topics create" in result.stderr
    assert "Traceback" not in result.stderr
