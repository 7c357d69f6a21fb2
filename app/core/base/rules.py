"""The rule set: every setting the rules read, in one typed place (SPEC R10.1).

`rules_version` names the rule set: its name plus a hash of the Xid table and these
settings, so changing either changes the version stamped on every verdict.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Annotated, Any

import msgspec

from app.core.base.xid import DEFAULT_XID_TABLE, XidAction, XidTable

# Labels set by an operator or a batch Job on the pods it creates: such a pod is a child
# pod of a tracked CRD, never the tracked pod of a pod task (docs/rules.md). The one place
# outside app/core/kinds that spells a kind's labels: a rule setting's default must be
# known to the rule set (R10.1); tests/unit/test_kinds.py holds it to every kind's own.
DEFAULT_CHILD_POD_LABELS = (
    "ray.io/cluster",
    "ray.io/node-type",
    "ray.io/originated-from-crd",
    "training.kubeflow.org/job-name",
    "training.kubeflow.org/operator-name",
    "jobset.sigs.k8s.io/jobset-name",
    "batch.kubernetes.io/job-name",
    "job-name",
)


# R14.1: the DisruptionTarget reasons of the control plane and the kubelet; R16.6: a DRA
# device taint's, and Kueue's failure recovery's (Rules.disruption_reasons).
DEFAULT_DISRUPTION_REASONS = (
    "PreemptionByScheduler",
    "DeletionByTaintManager",
    "EvictionByEvictionAPI",
    "DeletionByPodGC",
    "TerminationByKubelet",
    "DeletionByDeviceTaintManager",
    "KueueForcefullyDeleted",
)


class AttemptLabels(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The label keys that identify an attempt (SPEC R1), configurable."""

    managed: str = "flyte.org/managed"
    run: str = "run"
    action: str = "action"
    attempt: str = "attempt"


# At most a century: a time plus any of them stays a time (SPEC R11.3: no overflow).
CENTURY = 100 * 366 * 86400
Seconds = Annotated[float, msgspec.Meta(ge=0, le=CENTURY)]
Count = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
Length = Annotated[int, msgspec.Meta(ge=16, le=1 << 20)]


class FleetSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the fleet stage derives fleet health (docs/fleet.md): the `[fleet]` table of a
    rule file, the one declaration of these settings. Each also has a flag and an
    environment variable, named by `setting` (app/settings.py `fleet_settings`: flag >
    environment > rule file > this default). The first three shape the derived records,
    so they are part of `rules_version` (SPEC R10.1)."""

    threshold: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="critical faults within the quarantine window that make a node or GPU a quarantine candidate",
            extra={"setting": "quarantine_threshold"},
        ),
    ] = 3
    window_seconds: Annotated[
        int,
        msgspec.Meta(
            ge=60,
            description="stream time the quarantine count slides over, at least a minute: seconds in a rule file; "
            "the flag and variable also take 90m, 24h, 1d",
            extra={"setting": "quarantine_window", "duration": True},
        ),
    ] = 86_400
    history_hours: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=24 * 90,
            description="hourly fleet buckets kept (stream time); at least the quarantine window",
            extra={"setting": "fleet_history_hours"},
        ),
    ] = 48
    # Not in rules_version: it sizes the read model's recent-verdicts list, never a record.
    recent_verdicts: Annotated[
        int,
        msgspec.Meta(ge=1, le=10_000, description="verdicts kept for the fleet page's recent verdicts", extra={"setting": "recent_verdicts"}),
    ] = 100

    def __post_init__(self) -> None:
        if self.window_seconds > self.history_hours * 3600:
            raise ValueError(
                f"window_seconds = {self.window_seconds} is longer than history_hours = {self.history_hours}: "
                "faults inside the quarantine window must still be kept; raise history_hours"
            )

    @property
    def window(self) -> timedelta:
        return timedelta(seconds=self.window_seconds)

    @property
    def history(self) -> timedelta:
        return timedelta(hours=self.history_hours)


DEFAULT_FLEET = FleetSettings()
RuleSetName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)]


class Rules(msgspec.Struct, frozen=True, forbid_unknown_fields=True, dict=True):
    name: RuleSetName = "default"
    labels: AttemptLabels = AttemptLabels()
    # R13.1: without the orchestrator's labels, an attempt is named by its workload object
    # (TrainJob, JobSet, RayJob, Kubeflow job, GPU batch Job, bare GPU pod); false: labels only.
    workload_identity: bool = True
    # R13.2: the resource names that make a batch Job or a bare pod a GPU workload (a DRA
    # resourceClaim always does).
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    # R5.3: a fault explains a failure iff it overlaps [anchor - window, anchor + slack].
    window_seconds: Seconds = 30 * 60
    slack_seconds: Seconds = 2 * 60
    # R2.5b: a fault event must come from the pod's node.
    node_trust: bool = True
    # R2.7d: when not empty, only fault events whose reporter (reportingController, else
    # reportingComponent, else source.component) is listed are trusted.
    trusted_reporters: tuple[str, ...] = ()
    # R7.4: stream time an attempt's state is kept after its terminal verdict.
    retention_seconds: Annotated[float, msgspec.Meta(gt=0, le=CENTURY)] = 6 * 3600
    # R9.2: resume a preempted gang, per JobSet annotation, else this default.
    resume_after_preemption: bool = False
    resume_annotation: str = "faultline.io/resume-after-preemption"
    # R9.6 with the policy off: wait for Kueue to record the eviction before ending, as
    # with the policy on (order independent); false ends at once as `system` (Flyte).
    await_eviction_with_policy_off: bool = True
    # R9.6, R9.7: how long after a JobSet is seen suspended Kueue's eviction may still be
    # recorded (the two watches deliver with independent delays).
    watch_skew_seconds: Seconds = 10
    # R15.4: a workload attempt waiting longer than this (stream time) for Kueue to readmit
    # it is reported once as stuck (the wait goes on).
    max_readmission_wait_seconds: Annotated[float, msgspec.Meta(gt=0, le=CENTURY)] = 6 * 3600
    # R17.3: a Workload holding quota while no pod of its attempt runs for longer than this
    # (stream time), or evicted while it still holds it (kubernetes-sigs/kueue#14811), is
    # reported once on faultline.idle-quota (and once more when that ends).
    max_idle_quota_seconds: Annotated[float, msgspec.Meta(gt=0, le=CENTURY)] = 15 * 60
    child_pod_labels: tuple[str, ...] = DEFAULT_CHILD_POD_LABELS
    # R3: the Xid table is part of the rule set.
    xid: XidTable = DEFAULT_XID_TABLE
    # R14.1: the `DisruptionTarget` pod condition reasons that say the cluster disrupted a
    # pod; empty: disruptions never decide a verdict. The reasons Kubernetes (v1.37.2)
    # writes: kubernetes/api core/v1/types.go (PodReasonPreemptionByScheduler,
    # PodReasonTerminationByKubelet), kubernetes/kubernetes
    # pkg/controller/tainteviction/taint_eviction.go (DeletionByTaintManager),
    # pkg/registry/core/pod/storage/eviction.go (EvictionByEvictionAPI),
    # pkg/controller/podgc/gc_controller.go (DeletionByPodGC),
    # pkg/controller/devicetainteviction/device_taint_eviction.go (DeletionByDeviceTaintManager,
    # R16.6: a DRA device tainted NoExecute). And R16.6's Kueue failure recovery, whose
    # KueueFailureRecovery pod condition and Warning Event both carry KueueForcefullyDeleted
    # (kueue v0.19.2 pkg/controller/failurerecovery/pod_termination_controller.go).
    disruption_reasons: tuple[str, ...] = DEFAULT_DISRUPTION_REASONS
    # R14.3: the action advised for a GPU the kubelet reports Unhealthy (R14.2,
    # docs/rules.md says why a GPU reset); an Unknown health advises nothing (UNKNOWN).
    device_health_action: XidAction = "RESET_GPU"
    # Fleet health (docs/fleet.md), derived from the same records; None: not derived.
    fleet: FleetSettings | None = DEFAULT_FLEET
    # R11.4: a source record observed more than this ahead of its topic's watermark is a
    # clock fault (dead-lettered; stream time does not move on it).
    max_clock_skew_seconds: Seconds = 3600
    # R11.5: what one key's state may hold (docs/rules.md, *Bounded state*).
    max_faults_per_pod: Annotated[int, msgspec.Meta(ge=8, le=1_000_000)] = 32  # >= the 6 always kept
    max_token_chars: Length = 256  # a fault's tokens (gpu_uuid, pci, node, process), reasons
    max_message_chars: Length = 4096  # a message (pod, container, condition)
    max_generations: Count = 64  # JobSet generations restarted in place an attempt keeps
    # The most bytes of one state value or output record (JSON): a record whose fold would
    # write more is dead-lettered. Well under the broker's 1 MiB message limit.
    max_value_bytes: Annotated[int, msgspec.Meta(ge=4096, le=900 * 1024)] = 512 * 1024

    @cached_property
    def window(self) -> timedelta:
        return timedelta(seconds=self.window_seconds)

    @cached_property
    def slack(self) -> timedelta:
        return timedelta(seconds=self.slack_seconds)

    @cached_property
    def watch_skew(self) -> timedelta:
        return timedelta(seconds=self.watch_skew_seconds)

    @cached_property
    def max_readmission_wait(self) -> timedelta:
        return timedelta(seconds=self.max_readmission_wait_seconds)

    @cached_property
    def max_idle_quota(self) -> timedelta:
        return timedelta(seconds=self.max_idle_quota_seconds)

    @cached_property
    def retention(self) -> timedelta:
        return timedelta(seconds=self.retention_seconds)

    @cached_property
    def max_clock_skew(self) -> timedelta:
        return timedelta(seconds=self.max_clock_skew_seconds)

    @cached_property
    def time_margin(self) -> timedelta:
        """The most the rules add to or take from a record time (R11.3: a record time
        closer than this to the calendar's ends is out of range)."""
        longest = max(self.window_seconds, self.slack_seconds, self.watch_skew_seconds, self.retention_seconds, self.max_clock_skew_seconds, self.max_readmission_wait_seconds, self.max_idle_quota_seconds)
        return timedelta(seconds=longest, days=366)  # and room for any window a reader of the outputs adds

    @cached_property
    def usable_times(self) -> tuple[datetime, datetime]:
        """The first and last record times the rules can compute with (R11.3)."""
        return datetime.min.replace(tzinfo=timezone.utc) + self.time_margin, datetime.max.replace(tzinfo=timezone.utc) - self.time_margin


    @cached_property
    def version(self) -> str:
        """`<name>@<hash>`: the hash covers the Xid table and every setting that can change
        an output record, the fleet's included (R10.1: the derived records are outputs)."""
        settings = msgspec.to_builtins(self, str_keys=True, order="deterministic")  # sets sorted: the same hash in every process
        settings.pop("name")
        if settings.get("fleet") is not None:
            settings["fleet"].pop("recent_verdicts")  # the read model's, never in a record
        payload = msgspec.json.encode(_integral(settings), order="deterministic")  # sorts keys and sets
        return f"{self.name}@{hashlib.sha256(payload).hexdigest()[:12]}"

    def without_fleet_stage(self) -> Rules:
        """The same rule set, deriving no fleet health (a worker's `fleet_stage` false,
        `classify` without `--fleet`): a driver's choice, not another rule set, so the
        verdicts keep this set's `rules_version` (R10.1)."""
        off = msgspec.structs.replace(self, fleet=None)
        off.__dict__["version"] = self.version  # the cached_property's slot
        return off


DEFAULT_RULES = Rules()


def _integral(value: Any) -> Any:
    """`value` with every whole float as an int: `window_seconds = 1800` in a file and the
    default 1800 are one setting, so one version (a float field keeps what it was given)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral(item) for item in value]
    return value
