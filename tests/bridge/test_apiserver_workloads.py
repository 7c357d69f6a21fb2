"""Workloads without an orchestrator on a real API server (issue 24, SPEC R13): a Kubeflow
Trainer TrainJob, a bare JobSet, an indexed batch Job and a bare GPU pod fail (and CPU-only
CronJob Jobs come and go), re-enacted as the API calls their controllers make: objects
created, then their status written through the status subresource. `faultline run`
prints a verdict for each of the four, the same as `faultline classify` of the trace
`faultline record` recorded meanwhile, and the same as the stories' own records give."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from tests.bridge.helpers import wait_for
from tests.bridge.realkube import RecordAndRun, StoryPlayer, attempt, changes_in, namespace, verdicts_in
from tests.unit import builders, stories
from tests.unit.scenario import final_verdicts

pytestmark = pytest.mark.apiserver

CLUSTER = "real-w"


def workload_stories(t0: datetime) -> list[dict[str, Any]]:
    builders.reset_ids()
    names = ("trainjob-xid79", "jobset-bare-xid79", "job-indexed-xid48", "pod-bare-xid119", "cronjob-cpu")
    return [r for name in names for r in stories.WORKLOAD_STORIES[name](t0=t0)]


def story_summary(records: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, str, str | None, str | None]]:
    """The stories' own verdicts by (Kind, name): the uids differ on the real server."""
    out = {}
    for key, v in final_verdicts(records).items():
        kind, name = key.split("/")[2:4]
        out[(kind, name)] = (v.code, v.kind, v.gpu_fault.code if v.gpu_fault else None, v.faulted_pod.name if v.faulted_pod else None)
    return out


def test_r13_run_on_the_api_server_prints_the_verdicts_classify_gives_for_the_recorded_trace(apiserver, tmp_path):
    records = workload_stories(datetime.now(timezone.utc) - timedelta(minutes=2))
    expected = story_summary(records)
    assert {kind for kind, _ in expected} == {"TrainJob", "JobSet", "Job", "Pod"}
    ns = namespace(apiserver, "workloads")
    with RecordAndRun(apiserver, ns, CLUSTER, tmp_path) as watching:
        trace, outputs = watching.trace, watching.outputs
        changes = StoryPlayer(apiserver, ns).play(records)
        wait_for(lambda: changes_in(trace) == changes, timeout=60, what=f"{changes} changes in the trace")
        wait_for(lambda: len(verdicts_in(outputs)) == len(expected), timeout=60, what=f"{len(expected)} verdicts from run")
    watching.run_prints_what_classify_gives()
    # ... and both are the stories' own verdicts, by kind and name.
    got = {}
    for key, v in verdicts_in(outputs).items():
        kind, name, *_ = attempt(key)
        got[(kind, name)] = (v["code"], v["kind"], (v["gpu_fault"] or {}).get("code"), (v["faulted_pod"] or {}).get("name"))
    assert got == expected
    # Every kind was recorded; the CPU-only CronJob Jobs among them are no attempts.
    recorded = {orjson.loads(line)["value"]["object"]["metadata"]["name"] for line in trace.read_bytes().splitlines()
                if b'"type":"BOOKMARK"' not in line}
    assert {"report-29000000", "llama-ft", "sweep-lr", "embed-shards", "notebook-gpu-7"} <= recorded
