"""Record times the rules can use (SPEC R11.3 out-of-range times, R11.4 clock faults).

Both are judged on a source record before it is folded or moves stream time, by every
driver (the runner).

- Out of range: the rules add to and take from a record's time (windows, retention,
  skews); a time closer than that to the calendar's ends (0001-01-01, 9999-12-31) would
  overflow. Such a record is dead-lettered, progress (BOOKMARK) included.
  The times inside an object that the rules compute with or publish (a container's
  finishedAt, a deletionTimestamp, a failed condition's lastTransitionTime, a fault's
  first and last seen) are held to the same range by the folds that read them
  (`require_in_range`): their record is refused.
- Clock fault: a change observed more than `max_clock_skew` after its topic's watermark
  at the stage. It is counted and folded, but moves no stream time: a bridge's clock
  running ahead and a watch that was down look the same here (a stopped watch's progress
  stops too, R12.2, so its backlog arrives far ahead of the last progress), and a restart
  must lose nothing (R12.7), so only stream time is protected (the watermark, once
  progress has come, is stream time anyway). The check needs the watermark of the
  record's own topic and cluster: before it exists there is nothing to measure against.
  Progress records are never clock faults: progress is how stream time legitimately
  jumps after a quiet gap.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from app.core.base.rules import Rules
from app.model.decode import BadRecord

CLOCK_FAULT = "clock fault"  # how every clock fault's reason starts (drivers count them)


def out_of_range(at: datetime, rules: Rules) -> str | None:
    """R11.3: why `at` (a record's observed_at) is too close to the calendar's ends for
    the rules' arithmetic, or None."""
    first, last = rules.usable_times
    if first <= at <= last:
        return None
    return f"observed_at {at.isoformat()} is out of range: the rules need {rules.time_margin} either side of a record time"


def require_in_range(times: Iterable[tuple[str, datetime | None]], rules: Rules) -> None:
    """R11.3: raise BadRecord naming the first of these object times (what, time) too
    close to the calendar's ends to compute with; a fold calls it before it keeps them."""
    for what, at in times:
        if at is not None and out_of_range(at, rules) is not None:
            raise BadRecord(f"{what} {at.isoformat()} is out of range: the rules need {rules.time_margin} either side of a time")


def clock_fault(at: datetime, watermark: datetime | None, where: str, rules: Rules) -> str | None:
    """R11.4: why a change observed at `at` is a clock fault given the watermark of its
    topic and cluster (`where`) at the stage, or None."""
    if watermark is None or at - watermark <= rules.max_clock_skew:
        return None
    # Names no watermark: the reason is the same whenever the record is read (a replay
    # merging topics by time reads it later than the worker did).
    return f"{CLOCK_FAULT}: observed_at {at.isoformat()} is more than max_clock_skew ({rules.max_clock_skew_seconds:g} s) ahead of the watermark of {where}"


def after(at: datetime, wait: timedelta) -> datetime | None:
    """`at + wait`, a deadline in stream time; None past the calendar's end (no stream
    time reaches it, so never by time)."""
    try:
        return at + wait
    except OverflowError:
        return None


_HOUR = timedelta(hours=1)  # the fleet's unit of time
_last_hour = (datetime.max.replace(tzinfo=timezone.utc), datetime.min.replace(tzinfo=timezone.utc))  # [start, end): none yet


def hour_of(at: datetime) -> datetime:
    """The start of the UTC hour holding `at`. (Times come in order, mostly in the same
    hour: the last hour found is tried first, two comparisons instead of a new datetime.)"""
    global _last_hour
    start, end = _last_hour
    if start <= at < end:
        return start
    if at.tzinfo is not timezone.utc:  # records' times are decoded in UTC: no conversion
        at = at.astimezone(timezone.utc)
    start = at.replace(minute=0, second=0, microsecond=0)
    _last_hour = (start, start + _HOUR)
    return start


@lru_cache(maxsize=4096)  # the same few hours, in every key of the fleet's states and records
def iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
