"""SPEC R10 on the real broker: replay the source topics with a chosen rule set, twice
byte-identical, equal to the offline replay; into replay topics; diff over topics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import orjson
from kafka import KafkaProducer

from app.replay.kafka_replay import replay_topic
from app.rulefile import load_rules
from app.settings import load
from app.kafka.topics import create_topics

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "examples" / "traces" / "mixed.jsonl"
RULES = ROOT / "examples" / "rules" / "xid-143-critical.toml"


def faultline(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def publish(bootstrap: str, prefix: str, trace: Path) -> int:
    """The trace into the source topics (4 partitions each), keys and order kept."""
    create_topics(load({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": 4}))
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    lines = [orjson.loads(line) for line in trace.read_bytes().splitlines() if line.strip()]
    for line in lines:
        producer.send(prefix + line["topic"], key=line["key"].encode(), value=orjson.dumps(line["value"]))
    producer.flush()
    producer.close()
    return len(lines)


def final_state(path: Path) -> dict[str, dict]:
    """Latest value per (topic, key), revision aside (it counts emissions, docs/rules.md)."""
    latest = {}
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        record["value"].pop("revision", None)
        latest[(record["topic"], record["key"])] = record["value"]
    return latest


def test_r10_replay_from_kafka_is_byte_identical_and_agrees_with_the_offline_replay(kafka_bootstrap, topic_prefix, tmp_path):
    published = publish(kafka_bootstrap, topic_prefix, TRACE)
    first, second, offline = tmp_path / "first.jsonl", tmp_path / "second.jsonl", tmp_path / "offline.jsonl"
    common = ["--from-kafka", "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix]
    run = faultline("replay", *common, "--out", str(first))
    assert f"replayed {published} records" in run.stderr
    faultline("replay", *common, "--out", str(second))
    assert first.read_bytes() == second.read_bytes()  # R7.3 across partitions
    faultline("replay", "--trace", str(TRACE), "--out", str(offline))
    assert final_state(first) == final_state(offline)


def test_r10_replay_into_rule_set_topics_then_diff_over_topics(kafka_bootstrap, topic_prefix, tmp_path):
    publish(kafka_bootstrap, topic_prefix, TRACE)
    common = ["--from-kafka", "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix]
    faultline("replay", *common, "--to-topics")
    faultline("replay", *common, "--to-topics", "--rules", str(RULES))
    settings = load({"bootstrap": kafka_bootstrap, "topic_prefix": topic_prefix})
    base = replay_topic(settings, "faultline.classified-failures", load_rules(None))
    candidate = replay_topic(settings, "faultline.classified-failures", load_rules(RULES))
    assert base != candidate and ".replay.default-" in base
    report = faultline("diff", "--base", f"kafka:{base}", "--candidate", f"kafka:{candidate}", "--bootstrap", kafka_bootstrap, "--format", "json")
    result = json.loads(report.stdout)
    assert result["attempts_compared"] == 10 and len(result["changes"]) == 1
    assert {c["key"] for c in result["changes"]} == {"prod-a/ml/bench-11/score/1"}


def test_r10_replay_time_range_reads_only_that_range(kafka_bootstrap, topic_prefix, tmp_path):
    # Record timestamps are when the records were produced: everything is after `since`
    # in the past, nothing is before a `until` in the past.
    publish(kafka_bootstrap, topic_prefix, TRACE)
    common = ["--from-kafka", "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix]
    empty = tmp_path / "none.jsonl"
    run = faultline("replay", *common, "--until", "2000-01-01T00:00:00Z", "--out", str(empty))
    assert "replayed 0 records" in run.stderr and empty.read_bytes() == b""
    everything = tmp_path / "all.jsonl"
    faultline("replay", *common, "--since", "2000-01-01T00:00:00Z", "--out", str(everything))
    assert msgspec.json.decode(everything.read_bytes().splitlines()[0])["topic"].startswith("faultline.")
