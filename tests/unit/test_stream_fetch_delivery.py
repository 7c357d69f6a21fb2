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
