"""The worker's fetch loop hands a record to its streams in place when nothing can make
the hand-over wait, and Faust's way (a task a rebalance can cut short) otherwise
(app/stream/faust_fixes.py, fix 9)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.settings import Settings

faust = pytest.importorskip("faust")

from faust.types import TP  # noqa: E402

from app.stream.app import build_app  # noqa: E402
from app.stream.faust_fixes import _delivers_at_once  # noqa: E402

PODS_0 = TP("u.k8s.pods", 0)


def _worker(tmp_path: Path):
    app, _, _ = build_app(Settings(topic_prefix="u.", partitions=2, store="memory", web_port=0, data_dir=str(tmp_path)))
    app.flow_control.resume()  # as once the worker has its partitions
    return app, app.consumer


def _queue(full: bool) -> SimpleNamespace:
    return SimpleNamespace(queue=SimpleNamespace(full=lambda: full))


def test_a_record_is_delivered_in_place_only_when_nothing_can_make_it_wait(tmp_path: Path) -> None:
    app, consumer = _worker(tmp_path)
    message = SimpleNamespace(tp=PODS_0)
    app.topics._tp_index[PODS_0] = [_queue(full=False)]
    assert _delivers_at_once(consumer, message)

    app.topics._tp_index[PODS_0] = [_queue(full=False), _queue(full=True)]  # one stream is behind
    assert not _delivers_at_once(consumer, message)
    app.topics._tp_index[PODS_0] = [_queue(full=False)]

    app.flow_control.suspend()  # a rebalance
    assert not _delivers_at_once(consumer, message)
    app.flow_control.resume()

    consumer.suspend_flow.set()
    assert not _delivers_at_once(consumer, message)
    consumer.suspend_flow.clear()
    assert _delivers_at_once(consumer, message)


def test_the_fetch_loop_awaits_a_delivery_in_place_unless_a_rebalance_may_cut_it_short(tmp_path: Path) -> None:
    app, consumer = _worker(tmp_path)
    app.topics._tp_index[PODS_0] = [_queue(full=False)]
    message = SimpleNamespace(tp=PODS_0)

    async def deliveries() -> list[bool]:
        ran_in: list[bool] = []

        async def on_message(message: object) -> None:  # named as the conductor's handler
            ran_in.append(asyncio.current_task() is caller)

        caller = asyncio.current_task()
        await consumer.wait_first(on_message(message), consumer.suspend_flow.wait())
        consumer.suspend_flow.set()  # rebalancing: Faust's way, in a task of its own
        await consumer.wait_first(on_message(message), asyncio.sleep(5))
        return ran_in

    assert app.loop.run_until_complete(deliveries()) == [True, False]  # the loop Faust's events belong to


def test_after_a_rewind_records_fetched_before_it_do_not_move_the_read_offset(tmp_path: Path) -> None:
    """Fix 6: Faust's fetch loop drops a record below the partition's read offset as read.
    Records fetched before a rewind, handed over after it, must not move that offset past
    the records asked for again; the gaps they opened close when the first of those comes."""
    from app.stream.faust_fixes import HeldReadOffsets

    _, consumer = _worker(tmp_path)
    offsets = consumer._read_offset
    assert isinstance(offsets, HeldReadOffsets)
    offsets[PODS_0] = 3_900  # read that far before the rewind
    offsets.hold(PODS_0, 1_794)  # the rewind, before its seek
    assert offsets[PODS_0] == 1_794
    consumer._gap[PODS_0] = [(1_795, 3_901)]  # a record fetched before the seek jumped ahead
    offsets[PODS_0] = 3_901
    assert offsets[PODS_0] == 1_794  # so 1,794 and on are not dropped as read
    offsets[PODS_0] = 1_794  # the first record asked for again
    offsets[PODS_0] = 1_795
    assert offsets[PODS_0] == 1_795 and PODS_0 not in consumer._gap

    offsets.hold(PODS_0, 10)
    offsets.pop(PODS_0)  # revoked: no hold survives into the next assignment
    offsets[PODS_0] = 500
    assert offsets[PODS_0] == 500

    offsets.hold(PODS_0, 20)
    offsets.update({PODS_0: 400})  # Faust's seek to the committed offsets after a rebalance
    offsets[PODS_0] = 401
    assert offsets[PODS_0] == 401
