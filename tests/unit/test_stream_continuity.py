"""The offset-continuity check of the Faust driver (app/stream/continuity.py), on the
offsets an agent sees; the crash tests on a real broker are in tests/integration."""

from __future__ import annotations

from typing import NamedTuple

import pytest

# --- the safety net under the delivery guarantee: an agent never skips an offset --------------


class _FakeConsumerThread:
    """Faust's consumer thread: the aiokafka consumer lives there, and calls run on it."""

    def __init__(self, consumer: "_FakeConsumer") -> None:
        self.consumer = consumer

    def _ensure_consumer(self):
        return self

    def seek(self, tp, offset):  # aiokafka's: moves the fetch position only
        self.consumer.seeks.append(offset)

    async def call_thread(self, fun, *args):
        self.consumer.on_call_thread()
        return fun(*args)


class _FakeConsumer:
    def __init__(self, earliest: int) -> None:
        self.earliest = earliest
        self.seeks: list[int] = []
        self._gap: dict = {}
        self._read_offset: dict = {}
        self._thread = _FakeConsumerThread(self)
        self.on_call_thread = lambda: None
        self.positions: dict = {}  # tp -> the next offset the consumer fetches

    async def earliest_offsets(self, tp):
        return {tp: self.earliest}

    def assignment(self):
        return set(self.positions)

    async def position(self, tp):
        return self.positions[tp]


class _FakeApp:
    def __init__(self, earliest: int = 0) -> None:
        self.consumer_generation_id = 1
        self.consumer = _FakeConsumer(earliest)


class _FakeCommitted:
    def __init__(self, offset: int | None) -> None:
        self.offset = offset

    async def get(self, tp):
        return self.offset


class _TP(NamedTuple):  # Faust's TP
    topic: str
    partition: int


TP_ = _TP("t.k8s.pods", 2)


def _run(continuity, offsets: list[int]) -> list[int]:
    """The offsets the agent folds."""
    import asyncio

    async def run() -> list[int]:
        return [offset for offset in offsets if await continuity.check(TP_, offset)]

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("committed", "earliest", "offsets", "folded", "seeks"),
    [
        (None, 0, [0, 1, 2, 3], [0, 1, 2, 3], []),
        (None, 0, [0, 1, 5, 6, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6], [2]),  # 2..4 came only after the rewind
        (None, 0, [3, 4, 0, 1], [0, 1], [0]),  # nothing committed: from the beginning
        (7, 0, [7, 8, 6, 7, 8, 9], [7, 8, 6, 7, 8, 9], []),  # a seek back redelivers: allowed
        (7, 0, [9, 7], [7], [7]),
        (3, 10, [10, 11], [10, 11], []),  # retention deleted 3..9 while nobody read them
    ],
)
def test_r7_3_an_agent_never_skips_an_offset_it_fetches_the_partition_again(committed, earliest, offsets, folded, seeks) -> None:
    from app.stream.continuity import Continuity

    app = _FakeApp(earliest)
    continuity = Continuity(app, "pods_stage", _FakeCommitted(committed))
    assert _run(continuity, offsets) == folded
    assert app.consumer.seeks == seeks


def test_r7_3_a_hole_that_keeps_coming_back_stops_the_worker() -> None:
    from app.stream.continuity import MAX_REWINDS, Continuity, DroppedRecords

    continuity = Continuity(_FakeApp(), "pods_stage", _FakeCommitted(None))
    # Each rewind to 0 brings 3, 4, … again: 0..2 are dropped every time.
    with pytest.raises(DroppedRecords, match=r"offsets 0..2 never reached pods_stage"):
        _run(continuity, [3, 4] * (MAX_REWINDS + 1))


def test_r7_3_a_rebalance_starts_the_offset_check_over() -> None:
    import asyncio

    from app.stream.continuity import Continuity

    app = _FakeApp()
    continuity = Continuity(app, "pod_stage", _FakeCommitted(None))

    async def run() -> None:
        assert await continuity.check(TP_, 0)
        app.consumer_generation_id = 2  # the partition went elsewhere and came back
        continuity.committed = _FakeCommitted(40)
        assert await continuity.check(TP_, 40)

    asyncio.run(run())


def test_r7_3_a_rewind_whose_records_never_come_is_made_again_then_stops_the_worker(monkeypatch) -> None:
    """A rewind that is lost (its records never come, whatever the cause) must not leave
    the partition skipped for ever: after the patience it is made again, and counts."""
    import asyncio

    from app.stream import continuity as module
    from app.stream.continuity import MAX_REWINDS, REWIND_PATIENCE_SECONDS, Continuity, DroppedRecords

    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    app = _FakeApp()
    continuity = Continuity(app, "pods_stage", _FakeCommitted(5))

    async def run() -> None:
        assert not await continuity.check(TP_, 9)  # 5..8 missing: rewind to 5
        assert not await continuity.check(TP_, 10)  # fetched before it: skipped
        await continuity.when_idle({"t.k8s.pods"})
        assert app.consumer.seeks == [5]  # not overdue yet
        now[0] += REWIND_PATIENCE_SECONDS + 1
        assert not await continuity.check(TP_, 11)  # still not 5: overdue, asked again
        assert app.consumer.seeks == [5, 5]
        for _ in range(MAX_REWINDS - 2):
            now[0] += REWIND_PATIENCE_SECONDS + 1
            await continuity.when_idle({"t.k8s.pods"})  # idle: no record comes at all
        assert app.consumer.seeks == [5] * MAX_REWINDS
        now[0] += REWIND_PATIENCE_SECONDS + 1
        with pytest.raises(DroppedRecords, match=r"offsets 5\.\.\d+ never reached pods_stage"):
            await continuity.when_idle({"t.k8s.pods"})

    asyncio.run(run())


def test_r7_3_records_handed_over_while_a_rewind_seeks_do_not_move_the_read_offset(tmp_path) -> None:
    """The read offset is held at the rewind's offset before the seek is sent to the
    consumer's thread: records fetched earlier and handed over meanwhile cannot move it, so
    the records asked for again are not dropped as read."""
    import asyncio

    pytest.importorskip("faust")
    from app.stream.faust_fixes import HeldReadOffsets, rewind

    app = _FakeApp()
    consumer = app.consumer
    consumer._read_offset = HeldReadOffsets(consumer)
    tp = TP_
    consumer._read_offset[tp] = 3_900  # read that far before the rewind
    consumer.on_call_thread = lambda: consumer._read_offset.__setitem__(tp, 3_901)  # handed over meanwhile
    asyncio.run(rewind(app, tp, 1_794))
    assert consumer.seeks == [1_794] and consumer._read_offset[tp] == 1_794
    consumer._read_offset[tp] = 1_794  # the first record asked for again comes
    consumer._read_offset[tp] = 1_795
    assert consumer._read_offset[tp] == 1_795


def test_r7_3_a_hole_at_a_partitions_end_is_found_without_a_later_record() -> None:
    """Records fetched and dropped before the agent saw them, at the end of a partition:
    no later record shows the hole. The idle check finds the consumer past the offset the
    agent expects, twice in a row, and fetches the partition again from it."""
    import asyncio

    from app.stream.continuity import Continuity

    app = _FakeApp()
    tp = TP_
    continuity = Continuity(app, "pods_stage", _FakeCommitted(143))

    async def run() -> None:
        assert await continuity.check(TP_, 143)
        app.consumer.positions[tp] = 144
        await continuity.when_idle({tp.topic})
        await continuity.when_idle({tp.topic})
        assert app.consumer.seeks == []  # fetched as far as seen: no hole
        app.consumer.positions[tp] = 342  # 144..341 fetched, never handed over
        await continuity.when_idle({"t.k8s.events"})
        await continuity.when_idle({tp.topic})
        assert app.consumer.seeks == []  # once may be records on their way
        assert await continuity.check(TP_, 144)  # one came: start the count again
        await continuity.when_idle({tp.topic})
        assert app.consumer.seeks == []
        await continuity.when_idle({tp.topic})
        assert app.consumer.seeks == [145]
        assert await continuity.check(TP_, 145)  # the rewind took effect

    asyncio.run(run())


def test_r7_3_a_partition_nothing_was_read_of_since_assignment_is_checked_from_its_committed_offset() -> None:
    import asyncio

    from app.stream.continuity import Continuity

    app = _FakeApp()
    tp = TP_
    continuity = Continuity(app, "jobs_stage", _FakeCommitted(143))
    asyncio.run(continuity.check(TP_, 143))  # then a rebalance: no record of tp came after it
    app.consumer_generation_id = 2
    app.consumer.positions[tp] = 342

    async def run() -> None:
        await continuity.when_idle({tp.topic})
        await continuity.when_idle({tp.topic})
        assert app.consumer.seeks == [143]  # from the committed offset, not from 144 (the last generation's)

    asyncio.run(run())


def test_r7_3_a_committed_offset_that_stays_behind_acknowledged_records_is_said_once(caplog) -> None:
    import asyncio
    import logging

    from app.stream.continuity import LAG_CHECKS, Continuity

    app = _FakeApp()
    tp = TP_
    continuity = Continuity(app, "pods_stage", _FakeCommitted(140))
    app.consumer.positions[tp] = 143

    async def run() -> None:
        for offset in (140, 141, 142):
            assert await continuity.check(TP_, offset)
        for _ in range(LAG_CHECKS + 3):
            await continuity.when_idle({tp.topic}, acked=False)  # a batch unwritten: no commit yet
        for _ in range(LAG_CHECKS + 3):
            await continuity.when_idle({tp.topic}, acked=True)

    with caplog.at_level(logging.WARNING, logger="faultline.stream"):
        asyncio.run(run())
    said = [r.getMessage() for r in caplog.records if "committed offset" in r.getMessage()]
    assert said == [f"pods_stage: records {tp.topic}[2] up to 142 are acknowledged but the group's committed offset has stayed at 140 for 15 s"]
    assert app.consumer.seeks == []  # a diagnosis: nothing is fetched again
