"""Device health as a fault source (SPEC R14.2): a GPU the kubelet reports `Unhealthy`
(or `Unknown`) in a container's `allocatedResourcesStatus` (Kubernetes 1.36+, KEP-4680:
kubernetes/api core/v1/types.go ResourceStatus, ResourceHealth).

The field has no time of its own: a device is first seen at the `observed_at` of the first
pod record showing it so, last seen at that of the last one (the bridge's clock) — except
that a record showing it on a container that has terminated dates it no later than that
container's `finishedAt`: the kubelet writes no device health after a container ended, so
a pod first listed after it failed (a restart, a relist, a burst after an outage) keeps the
evidence an uninterrupted watch saw (R12.7). The
kubelet writes pod status, so this source is trusted as the API server is (R2.7): no node
or reporter check. What was seen stands: a device shown Healthy again keeps its fault.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

import msgspec

from app.core.base.bounds import Trim
from app.core.base.rules import Rules
from app.model.k8s import Pod
from app.model.records import DEVICE_HEALTH, GpuFault, PodRef, Severity

Health = Literal["Unhealthy", "Unknown"]
# kubernetes/api core/v1/types.go ResourceHealthStatus{Unhealthy,Unknown}; Healthy is no fault.
UNHEALTHY: Final = "Unhealthy"
UNKNOWN_HEALTH: Final = "Unknown"
_RANK: Final[dict[str, int]] = {UNKNOWN_HEALTH: 1, UNHEALTHY: 2}
# R14.2: Unhealthy is critical; Unknown (e.g. the device plugin unregistered) is data only.
SEVERITY_OF: Final[dict[str, Severity]] = {UNHEALTHY: "CRITICAL", UNKNOWN_HEALTH: "WARN"}
NAME_OF: Final[dict[str, str]] = {UNHEALTHY: "GPU unhealthy", UNKNOWN_HEALTH: "GPU health unknown"}
DRA_CLAIM_PREFIX: Final = "claim:"  # `claim:<claim>/<request>` or `claim:<claim>` (ResourceStatus.Name)
DROPPED_DEVICE_HEALTH: Final = "dropped_device_health"
GPU_UNHEALTHY: Final = "GpuUnhealthy"  # the failure code of an Unhealthy GPU (R14.2), as R3 gives one per Xid


class Shown(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One device as one pod record shows it; `ended`: when the container showing it
    terminated, if it has (its `finishedAt`)."""

    resource: str
    health: Health
    message: str
    ended: datetime | None = None


class DeviceSeen(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One device of a pod, at the worst health any of its records showed (Unhealthy
    over Unknown): when records first and last showed it so, and whether the latest
    record still does (then an otherwise unchanged record still moves `last_seen`)."""

    resource: str
    health: Health
    message: str
    first_seen: datetime
    last_seen: datetime
    showing: bool


def is_gpu_resource(name: str, rules: Rules) -> bool:
    """R14.2: a resource in `gpu_resources`, or a DRA claim."""
    return name in rules.gpu_resources or name.startswith(DRA_CLAIM_PREFIX)


def devices_shown(pod: Pod, rules: Rules, trim: Trim) -> dict[str, Shown]:
    """The GPUs this pod record shows Unhealthy or Unknown, by resourceID (cut to
    `max_token_chars`). A device several containers share (or listed twice) is the worst
    any entry shows; ties keep the first entry, in the order the kubelet wrote them."""
    shown: dict[str, Shown] = {}
    for status in pod.status.container_statuses:
        terminated = status.state.terminated
        ended = terminated.finished_at if terminated is not None else None
        for resource in status.allocated_resources_status:
            if not resource.resources or not is_gpu_resource(resource.name, rules):
                continue
            for device in resource.resources:
                if device.health not in _RANK or not device.resource_id:
                    continue
                rid = trim.token(device.resource_id)
                known = shown.get(rid)
                if known is None or _RANK[device.health] > _RANK[known.health]:
                    shown[rid] = Shown(trim.token(resource.name), device.health, trim.message(device.message or ""), ended)  # type: ignore[arg-type]
                elif device.health == known.health and ended is not None and (known.ended is None or ended < known.ended):
                    shown[rid] = msgspec.structs.replace(known, ended=ended)  # shown so by a container that ended earlier
    return shown


def _dated(shown: Shown, observed_at: datetime) -> datetime:
    """When a record shows a device so: its `observed_at`, no later than the `finishedAt`
    of the terminated container showing it (R14.2)."""
    return observed_at if shown.ended is None else min(shown.ended, observed_at)


def merged(devices: dict[str, DeviceSeen], shown: dict[str, Shown], observed_at: datetime) -> dict[str, DeviceSeen]:
    """`devices` with one pod record (observed at `observed_at`) taken in. A device's
    interval is that of its worst health: a device first Unknown, then Unhealthy, is first
    seen when a record first showed it Unhealthy; a record showing it on a terminated
    container dates it no later than that container's end, whichever record does so."""
    if not shown and not any(d.showing for d in devices.values()):
        return devices
    out: dict[str, DeviceSeen] = {}
    for rid, seen in devices.items():
        now = shown.get(rid)
        if now is None or _RANK[now.health] < _RANK[seen.health]:
            out[rid] = seen if not seen.showing else msgspec.structs.replace(seen, showing=False)
        elif now.health == seen.health:
            out[rid] = msgspec.structs.replace(
                seen,
                first_seen=min(seen.first_seen, _dated(now, observed_at)),
                last_seen=max(seen.last_seen, observed_at),
                message=now.message or seen.message,
                resource=now.resource,
                showing=True,
            )
        else:  # worse than before: its interval starts again
            out[rid] = DeviceSeen(now.resource, now.health, now.message, _dated(now, observed_at), observed_at, True)
    for rid, now in shown.items():
        if rid not in devices:
            out[rid] = DeviceSeen(now.resource, now.health, now.message, _dated(now, observed_at), observed_at, True)
    return out


def kept_devices(devices: dict[str, DeviceSeen], rules: Rules) -> tuple[dict[str, DeviceSeen], int]:
    """R11.5: at most `max_faults_per_pod` devices of one pod, and how many were left out:
    the Unhealthy ones first (they can decide a verdict), the earliest first, then by
    resourceID. Below the limit nothing changes."""
    limit = rules.max_faults_per_pod
    if len(devices) <= limit:
        return devices, 0
    order = sorted(devices, key=lambda rid: (-_RANK[devices[rid].health], devices[rid].first_seen, rid))
    keep = set(order[:limit])
    return {rid: seen for rid, seen in devices.items() if rid in keep}, len(devices) - limit


def is_showing(devices: dict[str, DeviceSeen]) -> bool:
    """Whether the latest pod record showed a device Unhealthy or Unknown."""
    return any(d.showing for d in devices.values())


def device_fault_id(pod_uid: str, resource_id: str) -> str:
    """What identifies a device-health fault among a pod's faults: its faultline.faults
    key is `<cluster>/<pod uid>/<resourceID>` (R14.2)."""
    return f"{pod_uid}/{resource_id}"


def device_fault(resource_id: str, seen: DeviceSeen, pod_name: str, pod_uid: str, node: str, rules: Rules) -> GpuFault:
    """The GpuFault a device stands for (R14.2): code 0 (no Xid), the resourceID as its
    GPU, the pod's node (R2.7b), NVIDIA's action for an Unhealthy GPU as the rule set
    says (R14.3: `device_health_action`; Unknown advises nothing)."""
    return GpuFault(
        kind=DEVICE_HEALTH,
        code=0,
        name=NAME_OF[seen.health],
        severity=SEVERITY_OF[seen.health],
        gpu_uuid=resource_id,
        gpu_index=None,
        pci_bus_id="",
        node=node,
        pid=None,
        process="",
        first_seen=seen.first_seen,
        last_seen=seen.last_seen,
        count=1,
        pod=PodRef(name=pod_name, uid=pod_uid),
        action=rules.device_health_action if seen.health == UNHEALTHY else "UNKNOWN",
        resource=seen.resource,
        message=seen.message,
    )
