"""The fleet stage on a real broker: derived topics and the worker's web surface agree
with the embedded fold over the same trace (issue: fleet health on the worker)."""

from __future__ import annotations

import socket
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import orjson

from app.cli.fleet import pipeline_pods, replay_counted
from app.core.fleet import evidence_of
from app.model.fleet_records import DERIVED_TOPICS, QUARANTINE_CANDIDATES
from app.replay.pipeline import Pipeline
from app.replay.trace import encode_output, read_lines
from app.core.fleet_view import LiveFleet

MIXED = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed.jsonl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.status, response.read()


def _embedded() -> tuple[LiveFleet, dict[tuple[str, str], Any]]:
    """The embedded fold over the trace: its view and its derived records, latest per key."""
    pipeline = Pipeline()
    live = LiveFleet(pods=lambda key: pipeline_pods(pipeline, key))
    latest: dict[tuple[str, str], Any] = {}
    for emit in replay_counted(read_lines(MIXED), pipeline, live):
        for derived in live.observe(emit):
            latest[(derived.topic, derived.key)] = orjson.loads(encode_output(derived))["value"]
    return live, latest


# What of the derived records does not depend on the order in which the fleet stage
# reads the output topics' partitions (the embedded runner reads one ordered trace):
# - a quarantine record lists the faults that made the count reach the threshold, the
#   first ones to arrive: only whether the node or GPU is a candidate is the same;
# - a JobSet restarted in place has a verdict per generation, and a fault that arrives
#   after the next generation's verdict can no longer revise the earlier one (the attempt
#   stage keeps one current verdict per key), so a restart may be counted under a
#   different code: only the failures per namespace and hour are the same.
ORDER_FREE = {
    "faultline.node-fault-rates": lambda v: v,
    "faultline.gpu-fault-rates": lambda v: v,
    "faultline.preemption-waits": lambda v: v,
    "faultline.quarantine-candidates": lambda v: {k: v[k] for k in ("cluster", "scope", "node", "gpu", "state")},
}


def _order_free(latest: dict[tuple[str, str], Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for (topic, key), value in latest.items():
        if topic == "faultline.failure-rates":
            bucket = ("failures", value["cluster"], value["namespace"], value["hour"])
            out[bucket] = out.get(bucket, 0) + value["failures"]
        else:
            out[(topic, key)] = ORDER_FREE[topic](value)
    return out


def test_fleet_stage_streams_the_embedded_fleet_health_and_serves_it(stream_stack) -> None:
    live, expected = _embedded()
    assert any(topic == QUARANTINE_CANDIDATES for topic, _ in expected)  # the example has one

    port = _free_port()
    stream_stack.publish(MIXED)
    stream_stack.start_worker(extra=("--web-port", str(port)))
    stream_stack.wait_settled()

    streamed: dict[tuple[str, str], Any] = {}
    for topic in DERIVED_TOPICS:
        for record in stream_stack.read(topic):
            streamed[(topic, record.key.decode())] = orjson.loads(record.value)
    assert _order_free(streamed) == _order_free(expected)

    status, body = _get(port, "/fleet/api/fleet")
    assert status == 200
    totals, want = orjson.loads(body)["totals"], orjson.loads(msgspec.json.encode(live.summary()))["totals"]
    same = ("faults", "occurrences", "severity", "failures", "candidates", "nodes", "gpus", "attempts", "dead_letters")
    assert {k: totals[k] for k in same} == {k: want[k] for k in same}
    assert totals["candidates"] == 2 and totals["failures"] == 11

    # One attempt's evidence: its faults and verdicts from the fleet table, its pods (with
    # their phase) from the attempt stage's table, as the embedded view has them.
    key = "prod-a/ml/late-1/eval/1"
    status, body = _get(port, f"/fleet/api/attempts/{key}")
    evidence = orjson.loads(body)
    assert status == 200 and evidence["pods"] and all(pod["phase"] for pod in evidence["pods"])
    want = orjson.loads(msgspec.json.encode(evidence_of(live.state, key, live.pods_of(key))))
    assert (evidence["pods"], evidence["faults"]) == (want["pods"], want["faults"])
    # `revision` counts emissions, which depends on the interleaving; the verdict does not.
    assert {**evidence["current"], "revision": 0} == {**want["current"], "revision": 0}

    status, body = _get(port, "/fleet/")
    assert status == 200 and body.startswith(b"<!doctype html>")

    status, body = _get(port, "/metrics")
    metrics = body.decode()
    assert status == 200
    sources: Counter[str] = Counter()
    for _, line in read_lines(MIXED):
        record = orjson.loads(line)  # progress goes to every partition (SPEC R12.2): read once on each
        sources[record["topic"]] += stream_stack.partitions if record["value"]["type"] == "BOOKMARK" else 1
    for topic, n in sources.items():
        assert f'faultline_records_total{{topic="{topic}"}} {n}' in metrics
    assert "faultline_verdicts_total{" in metrics and "faultline_consumer_lag{" in metrics
