"""The streaming commands around the worker: settings, `topics create`, `publish`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from trace_gen import generate, write_trace

from app import settings
from app.model.envelope import SOURCE_TOPICS
from app.kafka.topics import TOPICS

# --- settings: one typed place, flag > env > default, errors that say what to fix ----------


def test_settings_flags_override_environment_which_overrides_defaults() -> None:
    assert settings.load(env={}) == settings.Settings()
    env = {"FAULTLINE_PARTITIONS": "8", "FAULTLINE_STORE": "memory", "FAULTLINE_TOPIC_PREFIX": "staging."}
    loaded = settings.load({"partitions": 2, "store": None}, env=env)
    assert (loaded.partitions, loaded.store, loaded.topic_prefix) == (2, "memory", "staging.")
    assert loaded.topic("k8s.pods") == "staging.k8s.pods" and loaded.app_id == "staging.faultline"


@pytest.mark.parametrize(
    ("env", "flags", "names"),
    [
        ({"FAULTLINE_PARTITIONS": "many"}, {}, ["partitions", "FAULTLINE_PARTITIONS", "--partitions"]),
        ({}, {"partitions": 0}, ["partitions", ">= 1"]),
        ({"FAULTLINE_STORE": "redis"}, {}, ["store", "'rocksdb', 'memory'"]),
        ({"FAULTLINE_BOOTSTRAP": "localhost"}, {}, ["bootstrap", "host:port"]),
        ({"FAULTLINE_TOPIC_PREFIX": "a b"}, {}, ["topic_prefix"]),
        ({}, {"web_port": 70000}, ["web_port", "<= 65535"]),
    ],
)
def test_settings_errors_name_the_setting_and_the_fix(env: dict, flags: dict, names: list[str]) -> None:
    with pytest.raises(settings.SettingsError) as err:
        settings.load(flags, env=env)
    for name in names:
        assert name in str(err.value)


def test_every_setting_has_an_env_var_a_flag_a_default_and_a_doc() -> None:
    infos = settings.describe()
    assert {i.name for i in infos} >= {"bootstrap", "topic_prefix", "partitions", "replication", "store", "data_dir", "web_port", "app_name", "worker_id"}
    for info in infos:
        assert info.env == "FAULTLINE_" + info.name.upper() and info.flag.startswith("--") and info.doc


def _faultline(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120,
                          env={**clean, **(env or {})}, stdin=subprocess.DEVNULL)


def test_worker_with_a_bad_setting_exits_2_naming_it() -> None:
    res = _faultline("worker", "--bootstrap", "127.0.0.1:1", env={"FAULTLINE_STORE": "redis"})
    assert res.returncode == 2 and "FAULTLINE_STORE" in res.stderr


# --- topics ----------------------------------------------------------------------------------


def test_topics_create_is_idempotent_and_shapes_every_topic(stream_stack) -> None:
    again = stream_stack.create_topics()  # the fixture created them once already
    lines = again.splitlines()
    assert len(lines) == len(TOPICS) and all(line.startswith("exists") for line in lines)
    admin = KafkaAdminClient(bootstrap_servers=stream_stack.bootstrap)
    try:
        shape = settings.Settings(topic_prefix=stream_stack.prefix, partitions=stream_stack.partitions)
        names = [spec.name(shape) for spec in TOPICS]
        described = {t["name"]: len(t["partitions"]) for t in admin.describe_topics(names)}
        assert described == {s.name(shape): s.partitions or stream_stack.partitions for s in TOPICS}
        # the fleet fold is keyed like the others: it spreads over every partition
        assert described[stream_stack.topic("faultline.fleet-inputs")] == stream_stack.partitions
        # the workers' changelogs too, so a starting worker never races Faust's creation of them
        assert described[f"{stream_stack.app_id}-fleet-changelog"] == stream_stack.partitions
        assert described[f"{stream_stack.app_id}-pods-changelog"] == stream_stack.partitions
        compacted = stream_stack.topic("faultline.classified-failures")
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, compacted)], config_filter="all")
        policy = configs["topic"][compacted]["cleanup.policy"]
        assert (policy["value"] if isinstance(policy, dict) else policy) == "compact"
    finally:
        admin.close()

    res = _faultline("topics", "create", "--bootstrap", stream_stack.bootstrap, "--topic-prefix", stream_stack.prefix, "--partitions", "8")
    assert res.returncode == 1 and "has 4 partitions but partitions = 8" in res.stderr


def test_worker_refuses_to_start_without_its_topics(kafka_bootstrap: str, topic_prefix: str) -> None:
    res = _faultline("worker", "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix, "--web-port", "0")
    assert res.returncode == 1
    assert f"topic {topic_prefix}k8s.pods does not exist" in res.stderr and "faultline topics create" in res.stderr


# --- publish ---------------------------------------------------------------------------------


def test_publish_keeps_keys_and_per_key_order_and_skips_unreadable_lines(stream_stack, tmp_path: Path) -> None:
    records = generate(attempts=30, seed=3, malformed=False)
    trace = write_trace(tmp_path / "t.jsonl", records)
    with trace.open("ab") as f:
        f.write(b"this line is not JSON\n")
        f.write(orjson.dumps({"topic": "k8s.nodes", "key": "n1", "value": {}}) + b"\n")
    res = _faultline("publish", str(trace), *stream_stack.flags())
    assert res.returncode == 0, res.stderr
    changes = sum(r["value"]["type"] != "BOOKMARK" for r in records)
    assert f"published {changes} records and {len(records) - changes} progress records" in res.stdout
    assert "line" in res.stderr and "k8s.nodes" in res.stderr

    sent: dict[tuple[str, str], list[bytes]] = defaultdict(list)
    progress: dict[str, list[bytes]] = defaultdict(list)
    for r in records:
        if r["value"]["type"] == "BOOKMARK":
            progress[r["topic"]].append(orjson.dumps(r["value"]))
        else:
            sent[(r["topic"], r["key"])].append(orjson.dumps(r["value"]))
    assert progress, "the generated trace carries the bridge's progress"
    got: dict[tuple[str, str], list[bytes]] = defaultdict(list)
    got_progress: dict[tuple[str, int], list[bytes]] = defaultdict(list)
    for topic in SOURCE_TOPICS:
        for r in stream_stack.read(topic):
            if orjson.loads(r.value)["type"] == "BOOKMARK":
                got_progress[(topic, r.partition)].append(r.value)
            else:
                got[(topic, r.key.decode())].append(r.value)
    assert {k: [orjson.loads(v) for v in vs] for k, vs in got.items()} == {k: [orjson.loads(v) for v in vs] for k, vs in sent.items()}
    # SPEC R12.2: each progress record on every partition of its topic, in file order
    for topic, values in progress.items():
        for partition in range(stream_stack.partitions):
            assert [orjson.loads(v) for v in got_progress[(topic, partition)]] == [orjson.loads(v) for v in values]


def test_docs_list_every_setting() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "streaming.md").read_text()
    for info in settings.describe():
        flag = info.name in settings.SECRETS or f"`{info.flag}`" in doc  # a secret has no flag
        assert f"`{info.env}`" in doc and flag, f"docs/streaming.md does not list {info.name}"
