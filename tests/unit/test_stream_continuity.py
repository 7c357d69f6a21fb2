"""The offset-continuity check of the Faust driver (app/stream/continuity.py), on the
offsets an agent sees; the crash tests on a real broker are in tests/integration."""

from __future__ import annotations

import pytest

# --- the safety net under the delivery guarantee: an agent never skips an offset --------------


class _FakeConsumer:
    def __init__(self, earliest: int) -> None:
        self.earliest = earliest

    async def earliest_offsets(self, tp):
        return {tp: self.earliest}


class _FakeApp:
    def __init__(self, earliest: int = 0) -> None:
        self.consumer_generation_id = 1
        self.consumer = _FakeConsumer(earliest)


class _FakeCommitted:
    def __init__(self, offset: int | None) -> None:
        self.offset = offset

    async def get(self, tp):
        return self.offset


def _message(offset: int):
    from faust.types import TP

    class Message:  # the fields Continuity reads
        pass

    m = Message()
    m.tp, m.offset = TP("t.k8s.pods", 2), offset
    return m


@pytest.mark.parametrize(
    ("committed", "earliest", "offsets", "hole"),
    [
        (None, 0, [0, 1, 2, 3], False),
        (None, 0, [0, 1, 5], True),  # 2..4 never came
        (None, 0, [3], True),  # nothing committed: must start at the beginning
        (7, 0, [7, 8, 6, 7, 8, 9], False),  # a seek back redelivers: allowed
        (7, 0, [9], True),
        (3, 10, [10, 11], False),  # retention deleted 3..9 while nobody read them
    ],
)
def test_r7_3_an_agent_stops_the_worker_rather_than_skip_an_offset(committed, earliest, offsets, hole) -> None:
    import asyncio

    from app.stream.continuity import Continuity, DroppedRecords

    continuity = Continuity(_FakeApp(earliest), "pod_stage", _FakeCommitted(committed))

    async def run() -> None:
        for offset in offsets:
            await continuity.check(_message(offset))

    if hole:
        with pytest.raises(DroppedRecords):
            asyncio.run(run())
    else:
        asyncio.run(run())


def test_r7_3_a_rebalance_starts_the_offset_check_over() -> None:
    import asyncio

    from app.stream.continuity import Continuity

    app = _FakeApp()
    continuity = Continuity(app, "pod_stage", _FakeCommitted(None))

    async def run() -> None:
        await continuity.check(_message(0))
        app.consumer_generation_id = 2  # the partition went elsewhere and came back
        continuity.committed = _FakeCommitted(40)
        await continuity.check(_message(40))

    asyncio.run(run())
