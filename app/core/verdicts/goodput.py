"""Where an attempt's GPU-seconds went (SPEC R17.2, R17.4): the arithmetic over its pods'
running time, its Kueue Workloads' quota and its failures' GPU-seconds. Pure functions of
the objects' own times (R12.7); no clock.

- **Running**: a GPU pod runs from its first container start (as `gpu_seconds` reads it,
  `gpu_time.started_at_of`) until it stopped: its containers' latest finish once every
  one of them terminated (or the pod ended), else its deletion; a pod still running when
  its attempt failed, until the failure.
- **Reserved**: a Workload's GPUs over its holds (`QuotaFacts`, R17.1).
- **Lost**: the failures' GPU-seconds (their verdicts', every generation's); **useful** =
  running - lost; **idle** = reserved - running; neither below 0.
- **Waits**: from an eviction to the readmission.

The fleet's hours (`hourly`) count each second in the UTC hour it fell in, once it has
passed by the objects' own times: a pod's run once it ended, a hold once released, a
wait once readmitted; the verdict's figures (`attempt_figures`) count up to the failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from functools import lru_cache

import msgspec

from app.core.verdicts.gpu_time import GpuSpan
from app.core.verdicts.relevance import latest_finish
from app.model.facts import PodFacts, QuotaFacts, QuotaHold
from app.model.records import ErrorKind, GoodputFigures

_SECOND = timedelta(seconds=1)


class Run(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A GPU pod's run: its GPUs, from its start until it stopped (None: it runs still)."""

    gpus: int
    start: datetime
    end: datetime | None


class HourFigures(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One attempt's figures in one UTC hour (GPU-seconds; waits in seconds)."""

    hour: datetime
    reserved: int = 0
    running: int = 0
    useful: int = 0
    lost_user: int = 0
    lost_system: int = 0
    idle: int = 0
    wait_seconds: int = 0
    waits: int = 0


def run_end(pod: PodFacts) -> datetime | None:
    """When a pod stopped running, by its own times: its containers' latest finish once all
    of them terminated or the pod ended (else, as a failure's GPU-seconds read it (R5.1),
    its deletionTimestamp, the API server's: a pod force-deleted off an unreachable node
    never says its containers stopped; else when a record first showed it failed); else,
    deleted, its deletionTimestamp; None while it runs, or when no time of its own says
    (its attempt's failure then ends it)."""
    containers = pod.containers
    if containers:
        for c in containers:  # a loop, not all(): it runs for every pod record that may end a run
            if not c.terminated:
                break
        else:
            return latest_finish(pod)  # R5.1's reading of a finish, in one place
    phase = pod.phase
    if phase == "Succeeded" or phase == "Failed":
        return latest_finish(pod) or pod.deletion_timestamp or pod.failed_observed_at
    if pod.deleted:
        return pod.deletion_timestamp
    return None


def runs_of(pods: Iterable[PodFacts], failed: dict[str, datetime] | None = None) -> list[Run]:
    """The runs of the GPU pods that started (a pod whose start no record showed has none:
    its GPU time is unknown, R17.2 counts only what is known). `failed`: by pod uid, until
    when a failure counted a pod's GPU-seconds (its anchor, R5.1): a pod whose own records
    never said when it stopped ran that long at least."""
    out = []
    for pod in pods:
        start = pod.started_at
        if pod.gpus <= 0 or start is None:
            continue
        end = run_end(pod)
        if end is None and failed:
            end = failed.get(pod.uid)
        out.append(Run(pod.gpus, start, end if end is None or end >= start else start))
    return out


def failed_until(spans: Iterable[GpuSpan]) -> dict[str, datetime]:
    """By pod uid, the latest end of its spans in failures' GPU-seconds."""
    out: dict[str, datetime] = {}
    for span in spans:
        known = out.get(span.pod)
        if known is None or span.end > known:
            out[span.pod] = span.end
    return out


def seconds(start: datetime, end: datetime) -> int:
    return (end - start) // _SECOND if end > start else 0


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US, _HOUR_US = 1_000_000, 3_600_000_000


def _micros(at: datetime) -> int:
    """Microseconds since the Unix epoch, exactly (a float timestamp is not, at this size)."""
    since = at - _EPOCH
    return (since.days * 86_400 + since.seconds) * _US + since.microseconds


def _spread(hours: dict[int, list[int]], start: datetime, end: datetime, weight: int, field: int, kept: int) -> None:
    """Add `weight` × the whole seconds of [start, end) to `hours` (hour start in µs ->
    figures) by UTC hour: each hour's are those up to its end less those before it, counted
    from `start`, so they add up to `seconds(start, end)`. Integers: it runs for every run.

    Only the last `kept` hours of a span can be kept (`hourly` keeps the latest `kept` hours
    of the attempt, and a span longer than that fills every hour before its end): its start
    moves forward by whole seconds to `kept` + 2 hours before its end, which leaves every
    later hour as it was. A start a tenant forged centuries back costs no more (R11.5)."""
    a, b = _micros(start), _micros(end)
    if b <= a:
        return
    limit = b - (kept + 2) * _HOUR_US
    if a < limit:
        a += (limit - a) // _US * _US
    hour = a - a % _HOUR_US
    done = 0
    while hour < b:
        upto = (min(b, hour + _HOUR_US) - a) // _US
        if upto > done:
            row = hours.get(hour)
            if row is None:
                row = hours[hour] = [0, 0, 0, 0, 0]
            row[field] += weight * (upto - done)
        done = upto
        hour += _HOUR_US


def _capped(start: datetime, end: datetime | None, until: datetime) -> int:
    return seconds(start, until if end is None else min(end, until))


def attempt_figures(runs: list[Run], quota: QuotaFacts | None, lost: int, failed_at: datetime) -> GoodputFigures:
    """R17.2, R17.4 on a terminal verdict: the attempt's figures up to its failure (what
    still ran or was held then counts until it)."""
    running = sum(r.gpus * _capped(r.start, r.end, failed_at) for r in runs)
    reserved = wait = 0
    if quota is not None:
        for workload in quota.workloads:
            reserved += workload.gpus * sum(_capped(h.start, h.end, failed_at) for h in workload.holds)
            wait += sum(_capped(w.start, w.end, failed_at) for w in workload.waits)
    return GoodputFigures(reserved, running, max(running - lost, 0), lost, max(reserved - running, 0), wait)


def hourly(
    runs: list[Run], quota: QuotaFacts | None, losses: Iterable[tuple[ErrorKind, tuple[GpuSpan, ...]]], ended: datetime | None, kept: int
) -> tuple[HourFigures, ...]:
    """R17.4: the attempt's figures by UTC hour, counting what has passed: each run that
    ended (`ended`: the attempt failed then, so what still ran stopped counting), each hold
    released, each wait ended in a readmission; the failures' GPU-seconds (`losses`: each
    failure's kind and its pods' spans) in the hours their pods ran. The latest `kept`
    hours of it: the fleet keeps no older hour (R11.5, `history_hours`)."""
    hours: dict[int, list[int]] = {}  # hour start (µs) -> reserved, running, lost user, lost system, wait seconds
    for run in runs:
        end = run.end if run.end is not None else ended
        if end is not None:
            _spread(hours, run.start, end, run.gpus, 1, kept)
    waits_ended: dict[int, int] = {}
    if quota is not None:
        for workload in quota.workloads:
            if workload.gpus:
                for hold in workload.holds:
                    if hold.end is not None:
                        _spread(hours, hold.start, hold.end, workload.gpus, 0, kept)
            for wait in workload.waits:
                if wait.end is not None:
                    _spread(hours, wait.start, wait.end, 1, 4, kept)
                    at = _micros(wait.end)
                    hour = at - at % _HOUR_US
                    waits_ended[hour] = waits_ended.get(hour, 0) + 1
                    hours.setdefault(hour, [0, 0, 0, 0, 0])
    for kind, spans in losses:
        field = 3 if kind == "SYSTEM" else 2
        for span in spans:
            _spread(hours, span.start, span.end, span.gpus, field, kept)
    out = []
    latest = max(hours, default=0)
    for hour in sorted(hours):
        if hour <= latest - kept * _HOUR_US:
            continue
        reserved, running, lost_user, lost_system, wait_seconds = hours[hour]
        useful = max(running - lost_user - lost_system, 0)
        out.append(HourFigures(_hour_at(hour), reserved, running, useful, lost_user, lost_system, max(reserved - running, 0), wait_seconds, waits_ended.get(hour, 0)))
    return tuple(out)


@lru_cache(maxsize=1024)  # the same few hours, for every attempt
def _hour_at(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


# --- idle quota (R17.3) --------------------------------------------------------------------


class Episode(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A stretch of quota held with nothing of the attempt running (`why`
    `no-running-pod`), or held by a Workload Kueue evicted (`evicted-but-held`): from
    `since` until `end` (None: not over). `due`: when it counts as idle quota (since +
    max_idle_quota; for an evicted hold not before Kueue's requeueAt either)."""

    since: datetime
    end: datetime | None
    due: datetime
    why: str
    workload: int  # its index in the QuotaFacts' workloads


def _gaps(hold: QuotaHold, runs: list[Run]) -> list[tuple[datetime, datetime | None]]:
    """The stretches of `hold` during which no run was going on."""
    at: datetime = hold.start
    gaps: list[tuple[datetime, datetime | None]] = []
    for run in sorted(runs, key=lambda r: r.start):
        if hold.end is not None and run.start >= hold.end:
            break
        if run.end is not None and run.end <= at:
            continue
        if run.start > at:
            gaps.append((at, run.start))
        if run.end is None:
            return gaps  # running on: nothing idle after it
        at = max(at, run.end)
    if hold.end is None or at < hold.end:
        gaps.append((at, hold.end))
    return gaps


def episodes(quota: QuotaFacts | None, runs: list[Run], limit: timedelta) -> list[Episode]:
    """R17.3: every stretch of idle quota long enough to report, or still going on (which
    may yet be), in time order."""
    if quota is None:
        return []
    found = []
    for index, workload in enumerate(quota.workloads):
        if workload.gpus <= 0:
            continue
        for hold in workload.holds:
            for start, end in _gaps(hold, runs):
                if end is None or end - start >= limit:
                    found.append(Episode(start, end, start + limit, "no-running-pod", index))
        for held in workload.evicted:
            due = held.start + limit
            if held.requeue_at is not None and held.requeue_at > due:
                due = held.requeue_at
            if held.end is None or held.end >= due:
                found.append(Episode(held.start, held.end, due, "evicted-but-held", index))
    return sorted(found, key=lambda e: (e.since, e.why))
