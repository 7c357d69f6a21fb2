"""Regenerate examples/traces/ from the attempt stories: `python -m tests.unit.make_examples`."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.unit import builders
from tests.unit.restart_stories import RESTART_STORIES
from tests.unit.stories import EVIDENCE_STORIES, R16_STORIES, STORIES, WORKLOAD_STORIES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"

# file name -> the stories it holds, in order
TRACES = {
    "mpijob-xid63.jsonl": ["mpijob-row-remap"],
    "pod-task-xid74.jsonl": ["pod-task-nvlink"],
    "jobset-restart-xid94.jsonl": ["jobset-restart-complete"],
    "mixed.jsonl": list(STORIES),
    # Workloads without an orchestrator (SPEC R13), one trace each, and all of them with
    # CPU-only CronJob Jobs that are no attempts.
    "trainjob-xid79.jsonl": ["trainjob-xid79"],
    "jobset-bare-xid79.jsonl": ["jobset-bare-xid79"],
    "job-indexed-xid48.jsonl": ["job-indexed-xid48"],
    "pod-bare-xid119.jsonl": ["pod-bare-xid119"],
    "workloads.jsonl": list(WORKLOAD_STORIES),
    # More evidence (SPEC R14): a bare JobSet's worker drained off its node, and every
    # evidence story (disruptions, device health, a drain after an Xid 79).
    "jobset-drained-worker.jsonl": ["jobset-drained-worker"],
    "evidence.jsonl": list(EVIDENCE_STORIES),
    # JobSet v0.12's restart modes (SPEC R16.1, R16.2): a child Job recreated alone, twice;
    # pods restarted in place.
    "jobset-job-restarts.jsonl": ["jobset-job-restarts"],
    "jobset-in-place-restart.jsonl": ["jobset-in-place-restart"],
    # KubeRay v1.7's retried tries (SPEC R16.4): one try retried on a new RayCluster, then failed.
    "rayjob-retried.jsonl": ["rayjob-retried"],
    # Kinds and evidence shipped in 2026 (SPEC R16): a Kubeflow JAXJob whose worker's GPU
    # fell off the bus; a pod evicted by a DRA device taint; a pod Kueue's failure recovery
    # force-deleted from an unreachable node.
    "jaxjob-xid79.jsonl": ["jaxjob-xid79"],
    "job-device-taint.jsonl": ["job-device-taint"],
    "job-kueue-force-deleted.jsonl": ["job-kueue-force-deleted"],
    # A LeaderWorkerSet's group recreated after an Xid 79 on its worker (SPEC R16.3).
    "lws-group-recreated.jsonl": ["lws-group-recreated"],
}
_ALL = {**STORIES, **WORKLOAD_STORIES, **EVIDENCE_STORIES, **RESTART_STORIES, **R16_STORIES}


def trace(stories: list[str]) -> bytes:
    builders.reset_ids()
    records = []
    for i, name in enumerate(stories):
        records += _ALL[name](t0=builders.T0 + timedelta(minutes=11 * i))
    # The bridge publishes in observation order, with its progress (SPEC R12.1).
    records.sort(key=lambda r: r["value"]["observed_at"])
    return builders.trace_bytes(builders.with_progress(records, every=timedelta(minutes=15)))


def main() -> None:
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    for name, stories in TRACES.items():
        (EXAMPLES / name).write_bytes(trace(stories))
        print(EXAMPLES / name)


if __name__ == "__main__":
    main()
