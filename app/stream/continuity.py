"""The offset-continuity check: a safety net under the delivery guarantee.

Faust (0.15) can drop records it had already fetched and rely on a seek back to the
committed offset to deliver them again (`faust_fixes` closes the case seen here). A stage
that folded a later record first would record its position, and the dropped one,
redelivered after a restart, would be skipped as already applied. So every agent checks
that it sees each offset of each input partition in order: a hole is fetched again
(`faust_fixes.rewind`), an idle agent looks for one at a partition's end, and a hole that
keeps coming back stops the worker, whose restart re-reads from the committed offset.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition
from mode import Service

from app.kafka import clients
from app.settings import Settings
from app.stream.faust_fixes import rewind

log = logging.getLogger("faultline.stream")


class DroppedRecords(RuntimeError):
    """Faust kept skipping records of a partition; the worker stops, a restart re-reads them."""


# Rewinds of one partition in a row that found the hole again before the worker gives up
# and stops (the restart re-reads from the committed offset).
MAX_REWINDS = 3
# A rewind takes effect within a fetch or two; one that has not after this many seconds
# is taken as lost (its records never came) and made again.
REWIND_PATIENCE_SECONDS = 20.0
IDLE_CHECK_SECONDS = REWIND_PATIENCE_SECONDS / 4  # how often an idle agent checks (`when_idle`)
LAG_CHECKS = 4  # idle checks in a row that find the committed offset behind before it is said
STOPPED_FLOW_SECONDS = 60.0  # a rebalance (and its table recovery) longer than this is said


class CommittedOffsets(Service):
    """The consumer group's committed offsets, read from Kafka (Faust's own view of them
    is filled in only after its start-up seek, which agents may already be past)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self._consumer: AIOKafkaConsumer | None = None
        self._starting = asyncio.Lock()

    async def on_stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    async def get(self, tp: Any) -> int | None:
        async with self._starting:  # several agents ask at once at start-up
            if self._consumer is None:
                consumer = clients.aio_consumer(self.settings, group_id=self.settings.app_id, enable_auto_commit=False)
                await consumer.start()
                self._consumer = consumer
        return await self._consumer.committed(TopicPartition(tp.topic, tp.partition))


class Continuity:
    """Each agent must see every offset of each input partition in order.

    Faust (0.15) can drop records it had already fetched and rely on a seek back to the
    committed offset to deliver them again (see `faust_fixes`, which closes the case seen
    here). Processing a later record first would record its position, and the dropped
    one, redelivered later, would be skipped as already applied. So a hole makes the agent
    skip what is past it and fetch the partition again from the first missing offset
    (`faust_fixes.rewind`; an idle agent also looks, `when_idle`); should the hole come
    back `MAX_REWINDS` times in a row, it stops the worker (the agents run under
    `CrashingSupervisor`), whose restart re-reads from the last committed offset, never
    past an unprocessed record.
    """

    def __init__(self, app: faust.App, agent: str, committed: CommittedOffsets) -> None:
        self.app, self.agent, self.committed = app, agent, committed
        self.next: dict[Any, int] = {}
        self.rewinding: dict[Any, int] = {}  # partition -> the offset a rewind waits for
        self.rewound_at: dict[Any, float] = {}  # partition -> monotonic time of that rewind
        self.skipped: dict[Any, int] = {}  # partition -> the last offset skipped while rewinding
        self.rewinds: dict[Any, int] = {}  # partition -> rewinds in a row
        self.fetched_past: dict[Any, int] = {}  # partition -> the offset the last idle check found fetched past
        # partition -> ((committed, seen up to), idle checks in a row that found it so)
        self.commit_lag: dict[Any, tuple[tuple[int, int], int]] = {}
        self.generation: int | None = None
        self.stopped_since: float | None = None  # monotonic time an idle check first found the flow stopped
        self.said_stopped = False

    def follows(self, tp: Any, offset: int) -> bool:
        """True when `offset` is the next offset of `tp` this agent expects and no rewind
        waits (noted: fold it); else `check` says. The common case, without an await."""
        if self.next.get(tp) != offset or tp in self.rewinding or self.app.consumer_generation_id != self.generation:
            return False
        self.next[tp] = offset + 1
        if self.rewinds:
            self.rewinds.pop(tp, None)
        return True

    async def check(self, tp: Any, offset: int) -> bool:
        """True: fold it. False: skip it — past a hole, it comes again after the rewind."""
        self._start_over_after_a_rebalance()
        waiting = self.rewinding.get(tp)
        if waiting is not None:
            last = self.skipped.get(tp)
            if offset > waiting and (last is None or offset > last):
                self.skipped[tp] = offset
                if self._overdue(tp):  # the records asked for never came: ask again
                    await self._rewind(tp, waiting, offset, "were asked for again but never came")
                return False  # fetched before the rewind took effect
            del self.rewinding[tp]  # the rewind took effect: from `waiting`, or past it again
            self.skipped.pop(tp, None)
        expected = await self._expected(tp)
        if offset > expected:
            await self._rewind(tp, expected, offset, "were dropped before processing (a Faust fetch race)")
            return False
        self.rewinds.pop(tp, None)
        self.next[tp] = max(expected, offset + 1)
        return True

    async def when_idle(self, topics: set[str], acked: bool = False) -> None:
        """Checks that need no later record (called while the agent waits for one):

        - a rewind whose records have not come for `REWIND_PATIENCE_SECONDS` is made again;
        - a hole at a partition's end: the consumer has fetched past the next offset this
          agent expects and nothing of that partition came, at two checks in a row. Faust
          drops fetched records around a rebalance and relies on its seek back to the
          committed offset; should that not take, no later record comes to show the hole
          (a source topic at its end). The likely cause of a CI stall where a partition
          stayed uncommitted with no hole logged; the check fired in a loaded test run;
        - a committed offset behind acknowledged records for a while is logged (a diagnosis)."""
        flow = getattr(self.app, "flow_control", None)
        if flow is not None and not flow.is_active():  # a rebalance under way
            now = time.monotonic()
            if self.stopped_since is None:
                self.stopped_since = now
            elif now - self.stopped_since >= STOPPED_FLOW_SECONDS and not self.said_stopped:
                self.said_stopped = True  # a diagnosis: nothing is folded while it lasts
                log.warning("%s: the consumer's flow has been stopped for %d s (a rebalance or a table recovery that has not ended): nothing is folded meanwhile",
                            self.agent, int(now - self.stopped_since))  # fmt: skip
            return
        self.stopped_since, self.said_stopped = None, False
        self._start_over_after_a_rebalance()
        for tp, waiting in list(self.rewinding.items()):
            if self._overdue(tp):
                await self._rewind(tp, waiting, self.skipped.get(tp, waiting), "were asked for again but never came")
        for tp in sorted(self.app.consumer.assignment()):
            if tp.topic not in topics or tp in self.rewinding:
                continue
            expected = await self._expected(tp)
            position = await self._position(tp)
            if position is None or position <= expected:
                self.fetched_past.pop(tp, None)
                if acked:
                    await self._note_commit_lag(tp, expected)
                continue
            if self.fetched_past.get(tp) == expected:  # nothing of it came since the last check
                self.fetched_past.pop(tp, None)
                await self._rewind(tp, expected, position, "were fetched but never reached the agent")
            else:
                self.fetched_past[tp] = expected

    def _start_over_after_a_rebalance(self) -> None:
        if self.app.consumer_generation_id != self.generation:
            self.generation = self.app.consumer_generation_id
            self.next, self.rewinding, self.skipped, self.rewinds = {}, {}, {}, {}
            self.rewound_at, self.fetched_past, self.commit_lag = {}, {}, {}

    async def _note_commit_lag(self, tp: Any, expected: int) -> None:
        """Say so when every record of `tp` this agent saw is acknowledged but the group's
        committed offset stays behind them at `LAG_CHECKS` idle checks in a row (Faust
        commits every few seconds, only a gap-free run of acknowledged offsets). A
        diagnosis: a record acknowledged nowhere holds every commit of its partition."""
        committed = await self.committed.get(tp)
        if committed is None or committed >= expected:
            self.commit_lag.pop(tp, None)
            return
        lag = (committed, expected)
        seen, checks = self.commit_lag.get(tp, (lag, 0))
        checks = checks + 1 if seen == lag else 1
        self.commit_lag[tp] = (lag, checks)
        if checks == LAG_CHECKS:
            log.warning(
                "%s: records %s[%d] up to %d are acknowledged but the group's committed offset has stayed at %d for %d s",
                self.agent, tp.topic, tp.partition, expected - 1, committed, int(IDLE_CHECK_SECONDS * (LAG_CHECKS - 1)),
            )

    async def _expected(self, tp: Any) -> int:
        expected = self.next.get(tp)
        if expected is None:  # nothing of this partition since (re)assignment
            committed = await self.committed.get(tp)
            earliest = (await self.app.consumer.earliest_offsets(tp)).get(tp) or 0
            # Records the broker deleted (retention) while nothing read them are no hole.
            expected = earliest if committed is None else max(committed, earliest)
        return expected

    async def _position(self, tp: Any) -> int | None:
        """The next offset the consumer will fetch of `tp` (None: not known now)."""
        try:
            return await asyncio.wait_for(self.app.consumer.position(tp), timeout=5)
        except Exception:  # revoked meanwhile, or no position yet: the next check asks again
            return None

    def _overdue(self, tp: Any) -> bool:
        return time.monotonic() - self.rewound_at.get(tp, time.monotonic()) > REWIND_PATIENCE_SECONDS

    async def _rewind(self, tp: Any, expected: int, seen: int, why: str) -> None:
        """Fetch `tp` again from `expected`; `seen`: the offset that showed the hole. Raises
        `DroppedRecords` once that was tried `MAX_REWINDS` times in a row."""
        rewinds = self.rewinds.get(tp, 0) + 1
        if rewinds > MAX_REWINDS:
            log.error(
                "%s: records %s[%d] from %d %s, after %d rewinds; "
                "stopping so that a restart re-reads them from the committed offset",
                self.agent, tp.topic, tp.partition, expected, why, MAX_REWINDS,
            )
            raise DroppedRecords(f"{tp.topic}[{tp.partition}]: offsets {expected}..{seen - 1} never reached {self.agent}")
        log.warning(
            "%s: records %s[%d] %d..%d %s; fetching them again", self.agent, tp.topic, tp.partition, expected, seen - 1, why
        )
        self.rewinds[tp] = rewinds
        self.rewinding[tp] = expected
        self.rewound_at[tp] = time.monotonic()
        self.skipped.pop(tp, None)
        self.next[tp] = expected
        await rewind(self.app, tp, expected)
