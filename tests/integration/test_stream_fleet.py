"""The fleet stage on a real broker: derived topics and the worker's web surface agree
with the embedded runner over the same trace."""

from __future__ import annotations

import socket
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import orjson

from app.cli.fleet import pipeline_evidence, replay_counted
from app.core.fleet.view import LiveFleet
from app.model.fleet_records import DERIVED_TOPICS, QUARANTINE_CANDIDATES
from app.embedded.pipeline import Pipeline
from app.replay.trace import encode_output, read_lines

MIXED = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed.jsonl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.status, response.read()


def _embedded() -> tuple[LiveFleet, dict[tuple[str, str], Any]]:
    """The embedded runner over the trace: its fleet view and its derived records, latest per key."""
    pipeline = Pipeline()
    live = LiveFleet(evidence=lambda key: pipeline_evidence(pipeline, key))
    latest: dict[tuple[str, str], Any] = {}
    for emit in replay_counted(read_lines(MIXED), pipeline, live):
        live.observe(emit)
        if emit.topic in DERIVED_TOPICS:
            latest[(emit.topic, emit.key)] = orjson.loads(encode_output(emit))["value"]
    return live, latest


# Derived records are the same, latest per key, whatever order the stages read their
# partitions in (counts back at zero aside: a count moved by a revision), except a
# quarantine record's list of the faults it counts while they arrive: whether a node or
# GPU is a candidate is the same. (An hour every attempt moved out of, its queue known
# later, counts no attempt: as none.)
ORDER_FREE = {
    "faultline.node-fault-rates": lambda v: v,
    "faultline.gpu-fault-rates": lambda v: v,
    "faultline.preemption-waits": lambda v: v,
    "faultline.gang-queues": lambda v: v,
    "faultline.failure-rates": lambda v: v,
    "faultline.node-gpu-time": lambda v: v,  # GPU-seconds lost per node-hour (issue 30)
    "faultline.goodput": lambda v: v,  # where the GPU-hours went per namespace, queue and hour (SPEC R17.4)
    "faultline.quarantine-candidates": lambda v: {k: v[k] for k in ("cluster", "scope", "node", "gpu", "state")},
}


def _order_free(latest: dict[tuple[str, str], Any]) -> dict[Any, Any]:
    return {
        (topic, key): ORDER_FREE[topic](value)
        for (topic, key), value in latest.items()
        if value.get("failures") != 0 and (value.get("faults"), value.get("occurrences")) != (0, 0) and value.get("attempts") != 0
    }


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

    # The page reads the derived topics: it has them all once it shows the same totals.
    want = orjson.loads(msgspec.json.encode(live.summary()))["totals"]
    same = ("faults", "occurrences", "severity", "failures", "candidates", "nodes", "gpus", "dead_letters", "gpu_seconds", "system_gpu_seconds")

    def page_totals() -> dict[str, Any]:
        status, body = _get(port, "/fleet/api/fleet")
        assert status == 200
        return {k: orjson.loads(body)["totals"][k] for k in same}

    stream_stack.poll(lambda: page_totals() == {k: want[k] for k in same}, "the page shows the embedded totals")
    assert want["candidates"] == 2 and want["failures"] == 11

    # One attempt's evidence, from the attempt stage's table, as the embedded runner has it.
    key = "prod-a/ml/late-1/eval/1"
    status, body = _get(port, f"/fleet/api/attempts/{key}")
    evidence = orjson.loads(body)
    assert status == 200 and evidence["pods"] and all(pod["phase"] for pod in evidence["pods"])
    want = orjson.loads(msgspec.json.encode(live.evidence(key)))
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
    assert "faultline_failed_attempts{" in metrics and "faultline_consumer_lag{" in metrics
