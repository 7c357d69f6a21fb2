"""What a failure cost (issue 30): the GPU-seconds its pods ran, from the records' own times.

A failure's GPU-seconds are the sum, over its candidate pods (SPEC R4: a pod task's pod; a
CRD's child pods, of that generation for a JobSet restarted in place, R8), of the GPUs each
requested times the whole seconds it ran: from its first container start to when it
stopped, the first of its latest container finish, its deletion and the failure (R5.1's
anchor, clamped to the failure). A pod waiting for Kueue to readmit its gang (R9, R15) has
been deleted: it ran until then, and the pods that come back start again, so a wait is never
counted. docs/fleet.md (*GPU time*) defines every figure; pure functions, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Final

import msgspec

from app.core.verdicts.relevance import anchor_of, run_began
from app.core.base.rules import Rules
from app.model.facts import NodeGpuSeconds, PodFacts
from app.model.k8s import Pod, PodSpec, Workload

UNKNOWN_NODE = "unknown-node"  # a trusted fault of a pod with no node (node trust off)

# One pod's GPUs, at most: a hostile quantity must not make one failure cost a fleet. No
# node sold today has more than 16 GPUs; DRA claims counted one device each (below).
MAX_GPUS_PER_POD: Final = 64
# One Workload's GPUs, at most (R17.1): its pod sets' counts are the tenant's job's. Kueue
# admits no more than a ClusterQueue's quota; this keeps a hostile record's figures finite.
MAX_GPUS_PER_WORKLOAD: Final = 1 << 20
# A container runtime reports the Unix epoch as the start of a container it never started
# (a StartError: kubernetes/kubernetes#120331): such a container ran no time.
_NEVER_STARTED: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_SECOND: Final = timedelta(seconds=1)


class GpuSpan(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One pod's part of a failure's GPU-seconds: its GPUs, from when to when (R17.4
    splits it by the hours it fell in); `pod` its uid."""

    gpus: int
    start: datetime
    end: datetime
    pod: str = ""


class GpuTime(msgspec.Struct, frozen=True, gc=False):
    """A failure's GPU-seconds (None when a GPU pod's start is unknown) and, when known,
    their split by the node each pod ran on (nodes with none left out, by name) and each
    pod's span of them."""

    gpu_seconds: int | None
    nodes: tuple[NodeGpuSeconds, ...] = ()
    spans: tuple[GpuSpan, ...] = ()


# --- what a pod record says (the pod stage keeps only these two numbers) --------------------


def _gpu_quantity(raw: msgspec.Raw) -> int:
    """A GPU resource's quantity as the API server writes it: a plain integer (extended
    resources are whole numbers: kubernetes pkg/apis/core/helper IsIntegerResourceName,
    and validation rejects a fraction). Anything else a record may hold (`500m`, `1e3`, a
    negative or a JSON number with a fraction) still names a GPU (R13.2): one."""
    text = bytes(raw)
    if len(text) >= 2 and text[:1] == b'"' and text[-1:] == b'"':
        text = text[1:-1]
    if not text.isdigit():
        return 1
    return MAX_GPUS_PER_POD if len(text) > 3 else min(int(text), MAX_GPUS_PER_POD)


def gpus_requested(spec: PodSpec, rules: Rules, known: int = 0) -> int:
    """How many GPUs a pod asks for (`known`: what its earlier records said, which stands),
    at most MAX_GPUS_PER_POD: over its regular containers
    the `gpu_resources` quantities of their limits, else their requests (an extended
    resource's request equals its limit when both are set), plus one device per request a
    DRA claim of the pod serves to its containers, else one per claim. The pod does not
    carry a claim's `count` (resource.k8s.io/v1 ExactDeviceRequest: default one): that is
    in the ResourceClaim, which faultline does not watch (docs/fleet.md). Once read, a
    pod's count stands: only CPU and memory can be resized in place (kubernetes.io, *Resize
    CPU and Memory Resources assigned to Containers*) and resourceClaims are immutable."""
    if known:
        return known
    total = 0
    names = rules.gpu_resources
    for container in spec.containers:
        limits, requests = container.resources.limits, container.resources.requests
        for name in names:
            raw = limits.get(name) if name in limits else requests.get(name)
            if raw is not None:
                total += _gpu_quantity(raw)
        if total >= MAX_GPUS_PER_POD:
            return MAX_GPUS_PER_POD
    if spec.resource_claims:
        total += _claimed_devices(spec)
    return min(total, MAX_GPUS_PER_POD)


def workload_gpus(workload: Workload, rules: Rules) -> int:
    """SPEC R17.1: the GPUs a Kueue Workload holds while it holds quota: over its
    `spec.podSets`, `count` times the GPUs one pod of the set's template requests (as a
    pod's, `gpus_requested`: a DRA claim counts as it does there)."""
    total = 0
    for pod_set in workload.spec.pod_sets:
        count = max(pod_set.count, 0)
        if count:
            total += min(count, MAX_GPUS_PER_WORKLOAD) * gpus_requested(pod_set.template.spec, rules)
    return min(total, MAX_GPUS_PER_WORKLOAD)


def _claimed_devices(spec: PodSpec) -> int:
    """core/v1 PodResourceClaim names a claim; a container's ResourceClaim names the claim
    and one of its requests ("" = all of it): each request named is at least one device."""
    served: dict[str, set[str]] = {}
    for container in spec.containers:
        for use in container.resources.claims:
            if use.request:
                served.setdefault(use.name, set()).add(use.request)
    total = 0
    for claim in {c.name for c in spec.resource_claims}:
        total += len(served.get(claim, ())) or 1
        if total >= MAX_GPUS_PER_POD:
            break
    return total


def started_at_of(pod: Pod, observed_at: datetime, known: datetime | None) -> datetime | None:
    """When the pod started: the earliest start of its regular containers in the first of its
    records that showed one (`known`: the earlier records' answer, which stands: a later
    record shows the same starts, or a restarted container's newer one), i.e.
    `state.running.startedAt` or `state.terminated.startedAt`, capped by that record's
    observed_at (R2.7c) and never before the pod's creation (the API server's clock). A
    container the runtime never started (its start at the Unix epoch) ran no time: its
    start is its finish."""
    if known is not None:
        return known
    earliest: datetime | None = None
    for status in pod.status.container_statuses:
        state = status.state
        at = state.running.started_at if state.running is not None else None
        terminated = state.terminated
        if terminated is not None and terminated.started_at is not None:
            ran = terminated.started_at
            at = terminated.finished_at if ran <= _NEVER_STARTED else ran
        if at is not None and (earliest is None or at < earliest):
            earliest = at
    if earliest is None:
        return known
    earliest = min(earliest, observed_at)
    created = pod.metadata.creation_timestamp
    return min(created, observed_at) if created is not None and earliest < created else earliest


# --- what a failure cost ---------------------------------------------------------------------


def has_run(pod: PodFacts) -> bool:
    """Whether the pod shows it ran (Running or Succeeded, or a container terminated): if so
    and no start was shown, its GPU time is unknown; if not, it never started (0)."""
    return pod.phase in ("Running", "Succeeded") or any(c.terminated for c in pod.containers)


def pod_gpu_span(pod: PodFacts, failed_at: datetime, since: datetime | None = None) -> GpuSpan | None:
    """One candidate pod's part of a failure at `failed_at`: its GPUs, from its start
    (`since`, where an earlier generation of the same pod ended: a restart in place,
    R16.2) to when it stopped (R5.1's anchor, never past the failure). None when it asks
    for no GPU or never ran (0 GPU-seconds); raises `UnknownStart` when it ran from an
    unknown start."""
    if pod.gpus <= 0:
        return None
    start = pod.started_at
    if start is None:
        if has_run(pod):
            raise UnknownStart
        return None
    began = run_began(pod, since)
    if began is not None and began > start:
        start = began
    end = anchor_of(pod, failed_at, clamp=True)
    return GpuSpan(pod.gpus, start, end, pod.uid) if end > start else None


class UnknownStart(Exception):
    """A pod that ran, whose records never showed when it started."""


def pod_gpu_seconds(pod: PodFacts, failed_at: datetime, since: datetime | None = None) -> int | None:
    """One candidate pod's GPU-seconds for a failure at `failed_at`: its GPUs times the whole
    seconds of its span (`pod_gpu_span`); 0 for a pod asking for no GPU or that never
    started; None when its start is unknown."""
    try:
        span = pod_gpu_span(pod, failed_at, since)
    except UnknownStart:
        return None
    return span.gpus * ((span.end - span.start) // _SECOND) if span is not None else 0


def gpu_time_of(pods: Iterable[PodFacts], failed_at: datetime, since: datetime | None = None) -> GpuTime:
    """A failure's GPU-seconds over its candidate pods (from `since` for pods an earlier
    generation kept), by the node each ran on (a pod with no node on `unknown-node`) and
    each pod's span; unknown (None, no nodes) if any pod's is."""
    total = 0
    by_node: dict[str, int] = {}
    spans = []
    for pod in pods:
        try:
            span = pod_gpu_span(pod, failed_at, since)
        except UnknownStart:
            return GpuTime(None)
        if span is None:
            continue
        seconds = span.gpus * ((span.end - span.start) // _SECOND)
        if seconds:
            total += seconds
            node = pod.node_name or UNKNOWN_NODE
            by_node[node] = by_node.get(node, 0) + seconds
            spans.append(span)
    return GpuTime(total, tuple(NodeGpuSeconds(node, by_node[node]) for node in sorted(by_node)), tuple(spans))
