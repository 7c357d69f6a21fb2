"""The Kueue preemption / readmission state machine of one JobSet (SPEC R9).

One fold per JobSet, keyed by `gang_key` (cluster + JobSet uid), over the JobSet's records
(k8s.jobs) and its Workloads' records (k8s.workloads); one `faultline.GangTransition/v2`
per state change (R9.11), keyed as v1 under the orchestrator's labels and by the
workload attempt key otherwise (R15.6, `attempt.gang_attempt`).

Choices where SPEC is silent:
- `at` is when the decision became knowable: the latest `observed_at` among the
  observations it rests on (e.g. JobSet seen suspended, Workload seen evicted). That is
  the record that caused the transition in the bridge's order; a burst moves it (R12.7
  lists what must not move: `from`, `to`, `code`, `retry`, `waited_seconds`).
- `waited_seconds` on readmission: Kueue's, from its Evicted condition's time to its
  Admitted one; without them, its `at` − the `at` of the wait.
- Started (R9.3), "unsuspended while its Workload was admitted": the Workload as it stood
  when the job's controller says it resumed.
- The policy is read from the JobSet observation that starts the suspension (R9.2).
- With the policy off, R9.6 waits for the Workload too (setting
  `await_eviction_with_policy_off`, default on): ending at once would make one preemption
  `user` or `system` by arrival order. Off gives Flyte's immediate `system` ending.
- The wait for certainty is reported with R9.6's reason text.
- A JobSet deleted while waiting emits nothing; the gang expires after retention (R7.4).
- The initial Pending is not a change and is not emitted.
- A Workload replaced mid-attempt by a newer one (R9.1: the newest) is followed, but the
  order-independence guarantee does not cover that case.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from app.core.base.bounds import Trim
from app.core.base.clock import after, require_in_range
from app.core.base.emit import Emit
from app.core.base.progress import ANY_PROGRESS, Watermarks
from app.core.base.rules import Rules
from app.core.identity import kueue
from app.core.kinds.jobset import JOBSET
from app.core.stages.fleet_inputs import gang_change
from app.core.stages.gang_decisions import Horizon, decide
from app.core.stages.gang_observations import GangStateData, Status, observe
from app.core.stages.gang_quota import quota_facts
from app.core.verdicts.gpu_time import workload_gpus
from app.model.decode import TypedEnvelope
from app.model.envelope import ChangeType
from app.model.facts import GANG_INPUTS, GangInput
from app.model.k8s import Job, Workload, WorkloadSpec
from app.model.records import (
    GANG_TRANSITIONS,
    STUCK_READMISSIONS,
    WAITING_FOR_READMISSION,
    GangTransition,
    Identity,
    ObjectRef,
    PodRef,
    StuckReadmission,
)

# --- Public API ----------------------------------------------------------------------


def gang_key(cluster: str, obj: Job | Workload, rules: Rules) -> str | None:
    """`<cluster>/<job uid>` the record belongs to (the job Kueue's Workload names), None
    if it belongs to no gang faultline follows.

    UIDs are random per cluster, so a collision needs a cluster restored from another's
    backup; the cluster prefix rules even that out and costs nothing.
    """
    uid = kueue.job_uid_of(obj, rules) if isinstance(obj, Workload) else kueue.job_gang_uid(obj, rules)
    return f"{cluster}/{uid}" if uid else None


def gang_input_of(
    change: ChangeType, observed_at: datetime, cluster: str, obj: Job | Workload, rules: Rules, join: str = ""
) -> Emit | None:
    """A job or Workload record for the gang stage, keyed by its gang (None: it belongs to
    no gang faultline follows); `join`: a job's attempt stage key, where its quota goes (R17)."""
    key = gang_key(cluster, obj, rules)
    if key is None:
        return None
    jobset, workload = (obj, None) if isinstance(obj, Job) else (None, obj)
    if workload is not None:
        require_in_range(_workload_times(workload), rules)
    gpus = 0
    if workload is not None and workload.spec.pod_sets:  # read for routing and R17.1 only: not carried on
        gpus = workload_gpus(workload, rules)
        workload = msgspec.structs.replace(workload, spec=WorkloadSpec(active=workload.spec.active))
    return Emit(GANG_INPUTS, key, GangInput(change, observed_at, cluster, jobset=jobset, workload=workload, gpus=gpus, join=join))


def _workload_times(workload: Workload) -> list[tuple[str, datetime | None]]:
    """R11.3: the Workload's times R9's waits and R17's holds compute with (and publish)."""
    state = workload.status.requeue_state
    times = [(f"Workload condition {c.type[:64]!r} lastTransitionTime", c.last_transition_time) for c in workload.status.conditions]
    times.append(("Workload metadata.deletionTimestamp", workload.metadata.deletion_timestamp))
    times.append(("Workload requeueState.requeueAt", state.requeue_at if state is not None else None))
    return times


def route_workload_record(
    _: None, __: str, envelope: TypedEnvelope[Workload], rules: Rules, marks: Watermarks
) -> tuple[None, list[Emit]]:
    """The jobs stage's fold for k8s.workloads: a Workload to its job's gang (R9.1, R15.1)."""
    gang = gang_input_of(envelope.type, envelope.observed_at, envelope.cluster, envelope.object, rules)
    return None, [gang] if gang is not None else []


def fold_gang(
    state: GangStateData | None, key: str, record: GangInput, rules: Rules, marks: Watermarks
) -> tuple[GangStateData | None, list[Emit]]:
    uid = key.partition("/")[2]
    if not uid:
        return state, []
    if state is None:
        state = GangStateData(cluster=record.cluster, uid=uid, last_seen=record.observed_at)
    trim = Trim(rules)
    before = state
    state, emits = _decided(observe(state, record, rules, trim), rules, marks)
    return state, emits + quota_facts(before, state, record.observed_at) + trim.dropped()


def settle_gang(state: GangStateData, _: str, rules: Rules, marks: Watermarks) -> tuple[GangStateData, list[Emit]]:
    """R12.4: a watermark moved; decide again what was waiting on it."""
    return _decided(state, rules, marks)


def gang_waits_until(state: GangStateData, rules: Rules) -> datetime | None:
    """A gang blocked on an absence settles on any progress of its cluster (R12.4); a
    workload attempt waiting for readmission, once stream time passes
    `max_readmission_wait` (R15.4: it is reported stuck)."""
    if state.blocked:
        return ANY_PROGRESS
    waiting = _waiting_since(state)
    if waiting is not None and state.stuck != waiting:
        return waiting + rules.max_readmission_wait
    return None


def _waiting_since(state: GangStateData) -> datetime | None:
    """When a workload attempt's wait for readmission began, if it waits now (R15.2)."""
    status, track = state.status, state.jobset
    if status is None or track is None or not track.requeued or status.state != WAITING_FOR_READMISSION:
        return None
    return status.at


def _decided(state: GangStateData, rules: Rules, marks: Watermarks) -> tuple[GangStateData, list[Emit]]:
    if state.ended and state.stuck is None:
        return msgspec.structs.replace(state, blocked=False) if state.blocked else state, []  # an ending is final (R7.1)
    emits = []
    if not state.ended:
        steps, blocked = decide(state, Horizon.of(marks, state.cluster), rules.watch_skew)
        status = state.status
        for step in steps[state.steps :]:  # R9.11: one record per state change, each once
            transition = _transition(state, status, step, rules)
            emits += [transition, *gang_change(step.at, transition.value, rules)]
            state, stuck = _wait_over(state, status, step, rules)
            emits += stuck
            status = step
        if emits or blocked != state.blocked:
            state = msgspec.structs.replace(state, status=status, steps=max(state.steps, len(steps)), blocked=blocked)
    stuck = _still_waiting(state, rules, marks.stream_time(state.cluster))
    if stuck is not None:
        state, record = stuck
        emits.append(record)
    return state, emits


# R15.4: a wait past `max_readmission_wait` is reported once, as of the moment it passed
# it, and its end once more; the wait itself goes on. Both records are read from the
# wait's own times, so they are the same whether the readmission or the progress that
# passes the limit is read first (R7.1).


def _still_waiting(state: GangStateData, rules: Rules, now: datetime | None) -> tuple[GangStateData, Emit] | None:
    """A wait still going on when stream time passes its limit: reported now."""
    waiting = _waiting_since(state)
    if waiting is None or state.stuck is not None or now is None or now - waiting < rules.max_readmission_wait:
        return None
    return msgspec.structs.replace(state, stuck=waiting), _stuck_record(state, state.status, waiting, True, rules)


def _wait_over(state: GangStateData, old: Status | None, new: Status, rules: Rules) -> tuple[GangStateData, list[Emit]]:
    """A wait of a workload attempt that `new` ends: its end, if it was reported stuck;
    if it was longer than the limit but not yet reported (the readmission read before
    the progress that passes the limit), both reports."""
    track = state.jobset
    if old is None or old.state != WAITING_FOR_READMISSION or track is None or not track.requeued or old.reconstructed:
        return state, []
    out = []
    if state.stuck != old.at:
        if new.at - old.at < rules.max_readmission_wait:
            return state, []
        out.append(_stuck_record(state, old, old.at, True, rules))
    out.append(_stuck_record(state, old, old.at, False, rules, ended=new.at))
    return msgspec.structs.replace(state, stuck=None), out


def _stuck_record(state: GangStateData, waiting: Status | None, since: datetime, stuck: bool, rules: Rules, ended: datetime | None = None) -> Emit:
    """The report of a wait (`waiting`, begun at `since`): stuck as of the moment it passed
    the limit, or over at `ended`."""
    track = state.jobset
    assert track is not None and waiting is not None
    key = track.key or f"{state.cluster}/{track.namespace}/{track.name}"
    at = ended if ended is not None else since + rules.max_readmission_wait
    record = StuckReadmission(
        key=key,
        cluster=state.cluster,
        namespace=track.namespace,
        identity=track.identity,
        tracked=track.tracked or ObjectRef(kind=track.kind, name=track.name, uid=state.uid),
        workload=waiting.workload,
        queue=track.queue,
        stuck=stuck,
        since=since,
        at=at,
        waited_seconds=(at - since).total_seconds(),
        cause=waiting.cause if stuck else None,
        reason=waiting.reason,
        rules_version=rules.version,
    )
    return Emit(STUCK_READMISSIONS, key, record)


def gang_expires_at(state: GangStateData, rules: Rules) -> datetime | None:
    """R7.4: ended, completed or deleted, and retention has passed in stream time (None:
    not while it lives)."""
    if state.jobset is None:
        done: datetime | None = state.last_seen  # a Workload whose JobSet never came
    else:
        times = [t for t in (state.deleted_at, state.status.at if state.ended and state.status else None) if t]
        done = min(times) if times else None
    return after(done, rules.retention) if done is not None else None



def _transition(state: GangStateData, old: Status | None, new: Status, rules: Rules) -> Emit:
    """R9.11."""
    track = state.jobset
    assert track is not None
    key = track.key or f"{state.cluster}/{track.namespace}/{track.name}"  # a state written before R13: v1's key
    identity: Identity = track.identity if track.key else "labels"
    value = GangTransition(
        key=key,
        cluster=state.cluster,
        namespace=track.namespace,
        identity=identity,
        jobset=PodRef(name=track.name, uid=track.uid or state.uid) if track.kind == JOBSET else None,
        workload=new.workload,
        run=track.run if identity == "labels" else None,
        action=track.action if identity == "labels" else None,
        attempt=track.attempt if identity == "labels" else None,
        tracked=track.tracked or ObjectRef(kind=JOBSET, name=track.name, uid=state.uid),
        queue=track.queue,
        from_=old.state if old is not None else "Pending",
        to=new.state,
        code=new.code,
        retry=new.retry,
        cause=new.cause,
        reason=new.reason,
        at=new.at,
        waited_seconds=new.waited_seconds,
        rules_version=rules.version,
        reconstructed=new.reconstructed,
    )
    return Emit(topic=GANG_TRANSITIONS, key=key, value=value)

