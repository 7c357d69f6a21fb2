"""The attempt stage's account of where an attempt's GPU-hours went (SPEC R17): it keeps
the quota of the attempt's Kueue Workloads (`QuotaFacts`, from the gang stage) beside the
pods it already joins, and

- puts the attempt's figures on its terminal verdict (`terminal_goodput`, R17.4);
- tells the fleet stage the attempt's figures per UTC hour of its namespace and queue
  (`GoodputChange`, what changed since it last told it), from which the fleet derives
  `faultline.goodput`: at the next progress after a record that may change them (once per
  progress step, not once per pod record);
- reports idle quota on `faultline.idle-quota` (R17.3): once when a stretch of it passes
  `max_idle_quota` of stream time, once more when it ends. A decision is taken only once
  no record in flight can change it (R12.4): an open stretch when the stage's stream time
  passes its due time, a closed one once the stage is known past its end — so the records
  are the same in every arrival order (R7.1, R12.7).

The arithmetic is `app/core/verdicts/goodput.py`; this module is the stage's state and
records. Only a record that can change a figure costs more than a comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from app.core.base.emit import Emit
from app.core.base.progress import ANY_PROGRESS, Watermarks
from app.core.base.rules import Rules
from app.core.stages.fleet_inputs import goodput_changes
from app.core.verdicts.gpu_time import GpuSpan
from app.core.verdicts.goodput import Episode, HourFigures, Run, attempt_figures, episodes, failed_until, hourly, run_end, runs_of
from app.model.envelope import PODS
from app.model.facts import END_OF_TIME, AttemptId, JobFacts, PodFacts, QuotaFacts
from app.model.records import IDLE_QUOTA, GoodputFigures, IdleQuota, ObjectRef, PodRef

if TYPE_CHECKING:
    from app.core.stages.attempts import AttemptState

REPORTED_KEPT = 16  # idle-quota stretches whose end was reported, kept (R11.5): older ones are done


class Reported(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """An idle-quota stretch reported: `open` while its end is not yet."""

    since: datetime
    why: str
    open: bool


class Failures(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """What R17 reads of the attempt's verdicts: whether the latest is terminal, when the
    attempt failed (its terminal verdict's time), and each failure's kind and its pods'
    spans (its lost GPU-seconds). Kept as the fold that could change them saw them, so
    that deciding on progress needs no verdicts recomputed."""

    terminal: bool = False
    ended: datetime | None = None
    losses: tuple[tuple[str, tuple[GpuSpan, ...]], ...] = ()


NO_FAILURES = Failures()


def failures_of(verdicts: Sequence[Any]) -> Failures:
    if not verdicts:
        return NO_FAILURES
    ended = next((v.failed_at for v in reversed(verdicts) if v.terminal), None)
    return Failures(verdicts[-1].terminal, ended, tuple((v.outcome.kind, v.gpu.spans) for v in verdicts))


class AttemptUsage(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """What the attempt stage keeps for R17 beside an attempt's pods and verdicts (stored
    without the fields at their defaults, as `AttemptState`: it is encoded with every
    write of the attempt)."""

    quota: QuotaFacts | None = None
    where: tuple[str, str] | None = None  # the (namespace, queue) its hours were counted under
    hours: tuple[HourFigures, ...] = ()  # what it told the fleet, by hour (the latest history_hours)
    reported: tuple[Reported, ...] = ()
    floor: datetime | None = None  # idle stretches that began at or before it are done
    wake: datetime | None = None  # R12.4: when its idle quota is to be decided again
    untold: bool = False  # a figure may have changed since it last told the fleet: told on progress
    failures: Failures = NO_FAILURES  # its verdicts, as R17 reads them


def with_quota(usage: AttemptUsage | None, fact: QuotaFacts) -> AttemptUsage:
    """The latest quota facts supersede (the gang stage sends them whole)."""
    return msgspec.structs.replace(usage or AttemptUsage(), quota=fact)


# --- when a record can change a figure -----------------------------------------------------


def _verdict_changed(before: AttemptState, state: AttemptState) -> bool:
    """A verdict changed (its lost GPU-seconds, what it ended), or the attempt is known now."""
    if before.counted is not state.counted or before.emitted is not state.emitted:
        return True
    return before.identity is not state.identity and before.identity != state.identity


def _matters(before: AttemptState, state: AttemptState, fact: Any) -> bool:
    """Whether `fact` can change a figure: most pod records cannot (a pod's run that only
    began counts once it ended, and ends idle quota only where a Workload holds some).
    A pod's run is (its GPUs, its start, its end): each end is worked out only where the
    others leave the answer open (this runs for every pod record)."""
    if _verdict_changed(before, state):
        return True
    if not isinstance(fact, PodFacts):
        return not isinstance(fact, JobFacts)  # the quota's facts; a job's matter through its verdicts and identity (above)
    was = before.pods.get(fact.uid)
    ran = was is not None and was.gpus > 0 and was.started_at is not None
    if fact.gpus <= 0 or fact.started_at is None:
        return ran  # no run now: it matters only if there was one
    if ran and was.gpus == fact.gpus and was.started_at == fact.started_at:
        if (
            was.phase == fact.phase
            and was.containers == fact.containers
            and was.deleted == fact.deleted
            and was.deletion_timestamp == fact.deletion_timestamp
            and was.failed_observed_at == fact.failed_observed_at
        ):
            return False  # what its end is read from is the same (a third of the pod records)
        end = run_end(fact)
        was_end = run_end(was)
        if was_end == end:
            return False  # the same run
    elif (end := run_end(fact)) is not None:
        return True  # a run that ended, unlike the one before (or none)
    else:
        was_end = run_end(was) if ran else None
    if end is None and was_end is None:  # it began running (or began anew)
        # A run with no end counts in no hour until the attempt failed (its terminal verdict
        # ends it; an earlier failure counted it only if it had a start, which stays): it can
        # only end a stretch of idle quota.
        return (state.usage is not None and state.usage.quota is not None) or (state.emitted is not None and state.emitted.terminal)
    return True


# --- the fold's part -----------------------------------------------------------------------


def accounted(
    before: AttemptState, state: AttemptState, fact: Any, verdicts: Sequence[Any], rules: Rules, marks: Watermarks, emits: list[Emit]
) -> tuple[AttemptState, list[Emit]]:
    """`state` (the attempt after `fact`, with `verdicts`) with its hours to tell the fleet
    and its idle quota to decide, and the records that takes, after `emits`.

    Both wait for the next progress (`settle_attempt`): the pods of an attempt end
    together, each with a record of its own, and the fleet hears of them in one change per
    progress step rather than one per pod record. A verdict that changed is told at once
    (the fold has the verdicts in hand; waiting would cost a settle per failure). The idle decisions rest on progress anyway (R12.4),
    and what is told is a function of the state, so the figures are the same whenever it
    is told. Where the stage has seen no progress at all (a trace without any), nothing
    would settle before the end: told at once."""
    if not _matters(before, state, fact):
        return state, emits
    usage = state.usage or AttemptUsage()
    failures = failures_of(verdicts)
    if marks.latest and not _verdict_changed(before, state):
        if usage.untold and usage.failures == failures:  # already waiting (ANY_PROGRESS)
            return state, emits
        return msgspec.structs.replace(state, usage=msgspec.structs.replace(usage, untold=True, wake=ANY_PROGRESS, failures=failures)), emits
    # Told now: everything up to this record (idle quota sets its own wake, below).
    usage = msgspec.structs.replace(usage, failures=failures, untold=False, wake=None)
    runs = _runs(state, failures)
    usage, told = _hours(usage, state, runs, failures, rules, state.last_activity)
    usage, idle = _idle(usage, state, runs, rules, marks)
    if usage == (state.usage or AttemptUsage()):
        return state, emits
    return msgspec.structs.replace(state, usage=usage), [*emits, *told, *idle]


def _runs(state: AttemptState, failures: Failures) -> list[Run]:
    """Its pods' runs. One whose records never say when it stopped runs until the attempt
    failed (its terminal verdict: the caller ends it there) or, the attempt not failed,
    until its failures counted it (a pod of an earlier generation deleted with no time of
    its own): lost time is running time."""
    if failures.terminal or not failures.losses:
        return runs_of(state.pods.values())
    return runs_of(state.pods.values(), failed_until(span for _, spans in failures.losses for span in spans))


def settle_attempt(state: AttemptState, _: str, rules: Rules, marks: Watermarks) -> tuple[AttemptState, list[Emit]]:
    """R12.4: progress came: the attempt's hours told to the fleet if they may have
    changed, its idle quota decided again."""
    usage = state.usage
    if usage is None or (not usage.untold and usage.quota is None):
        return state, []  # nothing to tell, no idle quota to decide
    runs = _runs(state, usage.failures)
    told: list[Emit] = []
    if usage.untold:
        usage, told = _hours(usage, state, runs, usage.failures, rules, state.last_activity)
        usage = msgspec.structs.replace(usage, untold=False, wake=None)  # idle quota sets its own, below
    usage, idle = _idle(usage, state, runs, rules, marks)
    return (state if usage == state.usage else msgspec.structs.replace(state, usage=usage)), [*told, *idle]


def attempt_waits_until(state: AttemptState, rules: Rules) -> datetime | None:
    usage = state.usage
    return usage.wake if usage is not None else None


def terminal_goodput(state: AttemptState, verdicts: Sequence[Any]) -> GoodputFigures | None:
    """R17.4: the figures of the attempt on its terminal verdict, up to its failure."""
    last = verdicts[-1] if verdicts else None
    if last is None or not last.terminal:
        return None
    lost = sum(v.gpu.gpu_seconds or 0 for v in verdicts)
    quota = state.usage.quota if state.usage is not None else None
    return attempt_figures(_runs(state, failures_of(verdicts)), quota, lost, last.failed_at)


# --- R17.4: the hours, for the fleet -------------------------------------------------------


def _hours(
    usage: AttemptUsage, state: AttemptState, runs: list[Any], failures: Failures, rules: Rules, observed_at: datetime
) -> tuple[AttemptUsage, list[Emit]]:
    ident = state.identity
    fleet = rules.fleet
    if ident is None or fleet is None:
        return usage, []
    if not usage.hours and usage.quota is None and failures.ended is None and not failures.losses and _none_ended(runs):
        return usage, []  # nothing has passed yet, and nothing was told: no hours (most attempts as they begin)
    hours = hourly(runs, usage.quota, failures.losses, failures.ended, fleet.history_hours)
    where = (ident.namespace, usage.quota.queue if usage.quota is not None else "")
    if hours == usage.hours and (where == usage.where or not hours):
        return usage, []
    told = goodput_changes(ident.cluster, observed_at, usage.where, usage.hours, where, hours, rules)
    return msgspec.structs.replace(usage, where=where if hours else usage.where, hours=hours), told


def _none_ended(runs: list[Run]) -> bool:
    for run in runs:  # a loop, not all(): it runs for every attempt as it begins
        if run.end is not None:
            return False
    return True


# --- R17.3: idle quota ---------------------------------------------------------------------


def _horizon(marks: Watermarks, cluster: str) -> tuple[datetime | None, datetime | None]:
    """(known, now): how far every record is known (the end of the input: all of it), and
    the stage's stream time (R12.5; None at the end of an input: no time to run a limit at).
    The stream time waits for progress of every topic the stage hears (`topology.EXPECTED`):
    the pods (what shows a run) and the Workloads (what shows the quota released) among
    them, so a topic read behind the others (R12.7) never lets idle quota be decided with
    a pod's run still in flight."""
    now = marks.stream_time(cluster)
    if now is None:
        return (END_OF_TIME, None) if marks.of(cluster, PODS) == END_OF_TIME else (None, None)
    return now, now


def _idle(usage: AttemptUsage, state: AttemptState, runs: list[Any], rules: Rules, marks: Watermarks) -> tuple[AttemptUsage, list[Emit]]:
    quota, ident = usage.quota, state.identity
    if quota is None or ident is None:
        return usage, []
    known, now = _horizon(marks, ident.cluster)
    reported = {(r.since, r.why): r for r in usage.reported}
    out: list[Emit] = []
    wake: datetime | None = None
    seen = set()
    for episode in episodes(quota, runs, rules.max_idle_quota):
        which = (episode.since, episode.why)
        if usage.floor is not None and episode.since <= usage.floor:
            continue
        seen.add(which)
        told = reported.get(which)
        if episode.end is None:
            if told is not None:
                continue  # idle now, reported: its end is to come
            if now is not None and now >= episode.due:
                out.append(_record(state, ident, quota, episode, True, episode.due, rules))
                reported[which] = Reported(episode.since, episode.why, True)
            else:
                wake = episode.due if wake is None else min(wake, episode.due)
        elif told is None or told.open:
            if known is None or known < episode.end:
                wake = ANY_PROGRESS  # a record still in flight may show a pod ran in it
                continue
            if told is None:
                out.append(_record(state, ident, quota, episode, True, episode.due, rules))
            out.append(_record(state, ident, quota, episode, False, episode.end, rules))
            reported[which] = Reported(episode.since, episode.why, False)
    for which, told in list(reported.items()):
        if told.open and which not in seen and known is not None and known >= told.since:
            # Records that came late show it was not idle after all: it ends where it began.
            gone = Episode(told.since, told.since, told.since, told.why, 0)
            out.append(_record(state, ident, quota, gone, False, told.since, rules))
            reported[which] = Reported(told.since, told.why, False)
    kept, floor = _kept(sorted(reported.values(), key=lambda r: (r.since, r.why)), usage.floor)
    changed = msgspec.structs.replace(usage, reported=kept, floor=floor, wake=wake)
    return changed, out


def _kept(reported: list[Reported], floor: datetime | None) -> tuple[tuple[Reported, ...], datetime | None]:
    """The open stretches and the latest closed ones; older closed ones are done (`floor`)."""
    closed = [r for r in reported if not r.open]
    if len(closed) <= REPORTED_KEPT:
        return tuple(reported), floor
    dropped = closed[: len(closed) - REPORTED_KEPT]
    floor = max([r.since for r in dropped] + ([floor] if floor is not None else []))
    return tuple(r for r in reported if r.open or r.since > floor), floor


def _tracked(state: AttemptState, ident: AttemptId) -> ObjectRef:
    if ident.tracked is not None:
        return ident.tracked
    job: JobFacts | None = state.job
    if job is not None:
        return ObjectRef(kind=job.kind, name=job.name, uid=job.uid)
    return ObjectRef(kind="", name="", uid="")


def _record(state: AttemptState, ident: AttemptId, quota: QuotaFacts, episode: Episode, idle: bool, at: datetime, rules: Rules) -> Emit:
    workload = quota.workloads[episode.workload] if episode.workload < len(quota.workloads) else None
    gpus = workload.gpus if workload is not None else 0
    name = workload.name if workload is not None else "?"
    if episode.why == "evicted-but-held":
        held = next((h for h in workload.evicted if h.start == episode.since), None) if workload is not None else None
        requeue_at = held.requeue_at if held is not None else None
        reason = (
            f"Workload {name} was evicted but still holds quota for {gpus} GPU(s): Evicted is True while "
            "QuotaReserved or Admitted stays True (kubernetes-sigs/kueue#14811)"
        )
    else:
        requeue_at = None
        reason = f"Workload {name} holds quota for {gpus} GPU(s) while no pod of the attempt runs"
    if not idle:
        reason = f"{reason}; over after {(at - episode.since).total_seconds():g} s"
    record = IdleQuota(
        key=ident.key,
        cluster=ident.cluster,
        namespace=ident.namespace,
        identity=ident.identity,
        tracked=_tracked(state, ident),
        workload=PodRef(name=workload.name, uid=workload.uid) if workload is not None else None,
        queue=quota.queue or None,
        gpus=gpus,
        idle=idle,
        why=episode.why,  # type: ignore[arg-type]
        since=episode.since,
        at=at,
        idle_seconds=(at - episode.since).total_seconds(),
        reason=reason,
        rules_version=rules.version,
        requeue_at=requeue_at,
    )
    return Emit(IDLE_QUOTA, ident.key, record)
