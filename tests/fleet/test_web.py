"""Every route of the fleet web app, and /metrics, through aiohttp's test client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.cli.fleet import pipeline_evidence, replay_counted
from app.core.fleet.view import Lag, LiveFleet, Waiting, Watermark
from app.embedded.pipeline import Pipeline
from app.replay.trace import read_lines
from app.stream.lag import consumer_lag
from app.web.faust_mount import mount
from app.web.metrics import METRICS
from app.web.server import make_web_app
from tests.fleet import promtext
from tests.fleet.driver import run
from tests.fleet.records import PREEMPTED_ENDING, T0, dead_letter, hours, minutes, transition

MIXED = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed.jsonl"
T = TypeVar("T")


def fed_view() -> LiveFleet:
    """The mixed example (its one gang under Kueue preempted and readmitted after 21 min, in
    queue ml/team-a), two gangs of queue team-a preempted (one readmitted after 15 min), a
    dead letter, and a consumer lag and a topic waited for as a Faust worker would report them."""
    pipeline = Pipeline()
    live = LiveFleet(
        evidence=lambda key: pipeline_evidence(pipeline, key),
        lag=lambda: [Lag("k8s.pods", 0, 12), Lag("k8s.pods", 1, 0)],
        watermarks=lambda: [Watermark(c, t, at) for c, t, at in pipeline.watermarks()],
        waiting=lambda: [Waiting("prod-b", "k8s.workloads")],
    )
    for emit in replay_counted(read_lines(MIXED), pipeline, live, finish=False):
        live.observe(emit)
    gangs = [
        transition("a", to="WaitingForReadmission", at=T0 + hours(1)),
        transition("a", from_="WaitingForReadmission", to="Running", at=T0 + hours(1) + minutes(15), reason="re-admitted", waited_seconds=900.0),
        transition("b", to="Ended", at=T0 + hours(1), code="GangEvicted", retry="user", reason=PREEMPTED_ENDING, cause="Preempted"),
        transition("c", to="WaitingForReadmission", at=T0 + hours(1) + minutes(20)),
    ]
    _, derived = run(gangs)  # through the fleet stage, as the gang stage would have them
    for emit in (*derived, dead_letter()):
        live.observe(emit)
    return live


def against(view: LiveFleet, requests: Callable[[TestClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with TestClient(TestServer(make_web_app(view))) as client:
            return await requests(client)

    return asyncio.run(main())


def get_json(view: LiveFleet, path: str, status: int = 200) -> Any:
    async def go(client: TestClient) -> Any:
        response = await client.get(path)
        assert response.status == status, await response.text()
        assert response.content_type == "application/json"
        return await response.json()

    return against(view, go)


@pytest.fixture(scope="module")
def view() -> LiveFleet:
    return fed_view()


def test_the_page_is_self_contained_html(view: LiveFleet) -> None:
    async def go(client: TestClient) -> tuple[int, str, str]:
        response = await client.get("/")
        return response.status, response.content_type, await response.text()

    status, content_type, text = against(view, go)
    assert (status, content_type) == (200, "text/html")
    assert "fleet health" in text and 'getJSON("api/fleet")' in text  # relative URLs: works under a prefix
    assert "http://" not in text and "https://" not in text and "<script src" not in text  # no CDN


def test_api_fleet_is_the_summary(view: LiveFleet) -> None:
    fleet = get_json(view, "/api/fleet")
    assert fleet["stream_time"] == "2026-08-25T13:39:00Z"
    assert fleet["totals"]["faults"] == 10 and fleet["totals"]["candidates"] == 2 and fleet["totals"]["dead_letters"] == 1
    assert [h["hour"] for h in fleet["hours"]] == ["2026-08-25T11:00:00Z", "2026-08-25T12:00:00Z", "2026-08-25T13:00:00Z"]
    assert fleet["nodes"][0]["node"] == "gpu-17"
    assert {q["queue"] for q in fleet["queues"]} == {"team-a", "ml/team-a"}


def test_api_nodes_and_gpus(view: LiveFleet) -> None:
    nodes = get_json(view, "/api/nodes")
    assert [(n["node"], n["faults"], n["critical"], n["candidate"]) for n in nodes] == [
        ("gpu-17", 7, 4, True), ("gpu-22", 1, 1, False), ("gpu-31", 1, 1, False), ("gpu-20", 1, 0, False),
    ]
    gpus = get_json(view, "/api/gpus")
    assert gpus[0]["key"] == "prod-a/gpu-17/GPU-1234" and gpus[0]["top"] == "Xid 79"


def test_api_failures(view: LiveFleet) -> None:
    rows = get_json(view, "/api/failures")
    by_code = {(r["code"], r["kind"]): r["failures"] for r in rows}
    assert by_code[("GpuEccUncorrectable", "SYSTEM")] == 2
    assert by_code[("Error", "USER")] == 2  # late-1's first verdict moved to GpuEccUncorrectable
    assert sum(by_code.values()) == 11


def test_gpu_seconds_api_cost_by_code_node_and_namespace(view: LiveFleet) -> None:
    """Issue 30: the GPU-seconds failures burned, every row; the three splits add up alike."""
    body = get_json(view, "/api/cost")
    totals = get_json(view, "/api/fleet")["totals"]
    for split in ("by_code", "by_namespace", "by_node"):
        assert sum(r["gpu_seconds"] for r in body[split]) == totals["gpu_seconds"] > 0, split
        assert all(r["gpu_seconds"] == r["user_gpu_seconds"] + r["system_gpu_seconds"] for r in body[split])
    assert body["by_node"][0]["key"] == "prod-a/gpu-17" and body["by_namespace"][0]["key"] == "prod-a/ml"
    assert totals["system_gpu_seconds"] == sum(r["system_gpu_seconds"] for r in body["by_code"])


def test_api_quarantine(view: LiveFleet) -> None:
    body = get_json(view, "/api/quarantine")
    assert [(c["scope"], c["node"], c["gpu"], c["faults"]) for c in body["candidates"]] == [("node", "gpu-17", "", 4), ("gpu", "gpu-17", "GPU-1234", 4)]
    assert {e["state"] for e in body["events"]} == {"candidate"}
    assert body["events"][0]["schema"] == "faultline.QuarantineCandidate/v1"


def test_api_queues(view: LiveFleet) -> None:
    rows = {row["queue"]: row for row in get_json(view, "/api/queues")}
    assert {q: (r["preemptions"], r["readmissions"], r["waiting"], r["wait_seconds_avg"]) for q, r in rows.items()} == {
        "team-a": (3, 1, 1, 900.0),
        "ml/team-a": (1, 1, 0, 1260.0),  # the example's gang: Kueue's 21 minutes
    }


def test_api_verdicts_with_a_limit(view: LiveFleet) -> None:
    rows = get_json(view, "/api/verdicts?limit=3")
    assert [r["key"] for r in rows] == ["prod-a/ml/ckpt-4/train/2", "prod-a/ml/bench-11/score/1", "prod-a/ml/late-1/eval/1"]
    assert rows[2]["revision"] == 1 and rows[2]["fault"] == "Xid 48 CRITICAL"
    assert len(get_json(view, "/api/verdicts")) == 10  # every attempt: fewer than the default 20


@pytest.mark.parametrize("limit", ["abc", "0", "100000"])
def test_api_verdicts_refuses_a_bad_limit(view: LiveFleet, limit: str) -> None:
    body = get_json(view, f"/api/verdicts?limit={limit}", 400)
    assert "integer from 1 to 1000" in body["error"]


def test_api_attempt_evidence(view: LiveFleet) -> None:
    evidence = get_json(view, "/api/attempts/prod-a/ml/llm-pretrain-42/pretrain/1")
    assert [f["fault"]["code"] for f in evidence["faults"]] == [92, 63]  # time order
    assert [v["code"] for v in evidence["verdicts"]] == ["MPIJobFailed"]
    pods = {p["name"]: p for p in evidence["pods"]}
    assert pods["llm-pretrain-42-pretrain-worker-2"]["faults"] == 1
    assert pods["llm-pretrain-42-pretrain-launcher"]["phase"] == "Failed"  # from the embedded runner's state
    revised = get_json(view, "/api/attempts/prod-a/ml/late-1/eval/1")
    assert [(v["revision"], v["code"]) for v in revised["verdicts"]] == [(0, "Error"), (1, "GpuEccUncorrectable")]


def test_r16_4_each_try_of_a_rayjobs_drawer_shows_the_pods_of_the_try_its_verdict_is_about() -> None:
    """Each try is kept in a state of its own (its RayCluster's key, R13.4): the attempt's
    key opens the state that wrote its final verdict, `…/try/0` the retried try's."""
    pipeline = Pipeline()
    for _ in replay_counted(read_lines(MIXED.parent / "rayjob-retried.jsonl"), pipeline, LiveFleet()):
        pass
    key = "prod-a/ml/RayJob/rl-sweep/rayjob-000001"
    final, tried = pipeline_evidence(pipeline, key), pipeline_evidence(pipeline, f"{key}/try/0")
    assert final is not None and final.current is not None and final.current.terminal
    assert [p.name for p in final.pods] == ["rl-sweep-p7d3x-worker-gpu-w4m7z"]  # its GPU pod (R13.4)
    assert tried is not None and tried.current is not None and (tried.current.terminal, tried.current.key) == (False, f"{key}/try/0")
    assert [f.fault.code for f in tried.faults] == [79]


def test_api_attempt_unknown_is_404_with_a_reason(view: LiveFleet) -> None:
    body = get_json(view, "/api/attempts/prod-a/ml/nope/x/1", 404)
    assert "no attempt 'prod-a/ml/nope/x/1'" in body["error"] and "<cluster>/<namespace>/<run>/<action>/<attempt>" in body["error"]


def metrics_text(view: LiveFleet) -> tuple[str, str]:
    async def go(client: TestClient) -> tuple[str, str]:
        response = await client.get("/metrics")
        assert response.status == 200
        return response.headers["Content-Type"], await response.text()

    return against(view, go)


def test_metrics_in_prometheus_text_format(view: LiveFleet) -> None:
    content_type, text = metrics_text(view)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    types, samples = promtext.parse(text)
    assert set(types) == set(METRICS)  # every family exposed when there is data for it
    v = promtext.value
    assert v(samples, "faultline_records_total", topic="k8s.pods") == 49 + 11  # changes and progress records
    assert v(samples, "faultline_records_total", topic="k8s.events") == 11 + 11
    assert v(samples, "faultline_dead_letters_total") == 1
    assert v(samples, "faultline_failed_attempts", code="GpuEccUncorrectable", kind="SYSTEM") == 2
    assert v(samples, "faultline_failed_attempts", code="Error", kind="USER") == 2  # attempts, not revisions
    assert v(samples, "faultline_gpu_faults", severity="critical") == 6
    assert v(samples, "faultline_quarantine_candidates", scope="node") == 1
    assert v(samples, "faultline_consumer_lag", topic="k8s.pods", partition="0") == 12
    assert v(samples, "faultline_preemptions_total", cluster="prod-a", queue="team-a") == 3
    assert v(samples, "faultline_readmission_wait_seconds_sum", cluster="prod-a", queue="team-a") == 900
    assert v(samples, "faultline_readmission_wait_seconds_count", cluster="prod-a", queue="team-a") == 1
    assert v(samples, "faultline_gangs_waiting", cluster="prod-a", queue="team-a") == 1
    assert v(samples, "faultline_readmission_wait_seconds_sum", cluster="prod-a", queue="ml/team-a") == 1260
    assert v(samples, "faultline_stream_time_seconds") == 1787665140
    assert types["faultline_readmission_wait_seconds"] == "summary"


def test_metrics_of_an_empty_view_leave_out_what_is_not_known() -> None:
    types, samples = promtext.parse(metrics_text(LiveFleet())[1])
    assert "faultline_consumer_lag" not in types and "faultline_stream_time_seconds" not in types
    assert promtext.value(samples, "faultline_quarantine_candidates", scope="gpu") == 0
    assert promtext.value(samples, "faultline_gpu_faults", severity="user") == 0


def test_metric_label_values_are_escaped() -> None:
    live = LiveFleet()
    live.count_input('odd"topic\\with\nnewline')
    _, samples = promtext.parse(metrics_text(live)[1])
    assert promtext.value(samples, "faultline_records_total", topic='odd\\"topic\\\\with\\nnewline') == 1


# --- the Faust worker ---------------------------------------------------------------------------


def test_mounted_on_a_faust_web_server(view: LiveFleet) -> None:
    faust = pytest.importorskip("faust", reason="faust-streaming (the stream extra) is not installed")

    async def main() -> dict[str, tuple[int, str]]:
        app = faust.App("fleet-mount-test", broker="kafka://127.0.0.1:1", store="memory://", autodiscover=False)
        mount(app, view)
        results = {}
        async with TestClient(TestServer(app.web.web_app)) as client:
            for path in ("/fleet", "/fleet/", "/fleet/api/fleet", "/fleet/api/attempts/prod-a/ml/late-1/eval/1", "/metrics"):
                response = await client.get(path, allow_redirects=False)
                results[path] = (response.status, response.headers.get("Location") or (await response.text())[:40])
        return results

    results = asyncio.run(main())
    assert results["/fleet"] == (302, "/fleet/")
    assert results["/fleet/"][0] == 200 and results["/fleet/"][1].startswith("<!doctype html>")
    assert results["/fleet/api/fleet"][0] == 200
    assert results["/fleet/api/attempts/prod-a/ml/late-1/eval/1"][0] == 200
    assert results["/metrics"][0] == 200 and results["/metrics"][1].startswith("# HELP faultline_records_total")


class _TP:
    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition


class _Consumer:
    def __init__(self, ends: dict[Any, int | None]) -> None:
        self.ends = ends

    def assignment(self) -> set[Any]:
        return set(self.ends)

    def highwater(self, tp: Any) -> int:
        end = self.ends[tp]
        if end is None:
            raise KeyError(tp)  # a partition being revoked
        return end


def test_consumer_lag_from_read_offsets_and_highwaters() -> None:
    a0, a1, b0, b1 = _TP("staging.k8s.pods", 0), _TP("staging.k8s.pods", 1), _TP("staging.k8s.events", 0), _TP("staging.k8s.events", 1)
    consumer = _Consumer({a0: 100, a1: 50, b0: 10, b1: None})
    lags = consumer_lag(consumer, {a0: 89, a1: None, b0: 9, b1: 3}, {"staging.k8s.pods": "k8s.pods"})
    # a1: nothing read yet (unknown); b1: no highwater (skipped); b0 caught up.
    assert lags == [Lag("staging.k8s.events", 0, 0), Lag("k8s.pods", 0, 10)]
