"""The offset-continuity check of the Faust driver (app/stream/continuity.py), on the
offsets an agent sees; the crash tests on a real broker are in tests/integration."""

from __future__ import annotations

import pytest

# --- the safety net under the delivery guarantee: an agent never skips an offset --------------


class _FakeConsumer:
    def __init__(self, earliest: int) -> None:
        self.earliest = earliest
        self.seeks: list[int] = []
        self._gap: dict = {}
        self._read_offset: dict = {}  # as Faust's: a seek sets it

    async def earliest_offsets(self, tp):
        return {tp: self.earliest}

    async def seek(self, tp, offset):
        self.seeks.append(offset)
        self._read_offset[tp] = offset


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


def _run(continuity, offsets: list[int]) -> list[int]:
    """The offsets the agent folds."""
    import asyncio

    async def run() -> list[int]:
        return [offset for offset in offsets if await continuity.check(_message(offset))]

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
        assert await continuity.check(_message(0))
        app.consumer_generation_id = 2  # the partition went elsewhere and came back
        continuity.committed = _FakeCommitted(40)
        assert await continuity.check(_message(40))

    asyncio.run(run())
