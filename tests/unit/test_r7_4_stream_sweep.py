"""R7.4 in the Faust worker (issue 34): the expiry sweep judges a stage between two of its
fetches, with its batch written first, so no state it judges is held to be written: what
has expired is dropped at once and neither waits on progress nor expires any more, as
the embedded driver drops it. (Until issue 37 an expired state held in the batch was left
for the next sweep and taken out of the waiting index meanwhile; folded again before that
sweep, it was folded from a state the embedded driver no longer had.)

The sweep on a real broker: tests/integration/test_stream_expiry.py."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings

pytest.importorskip("faust")

from app.core.engine.runner import KeyTimes, Scope  # noqa: E402
from app.stream.app import build_app  # noqa: E402
from app.stream.delivery import Batch  # noqa: E402

T0 = datetime(2026, 12, 5, tzinfo=timezone.utc)


def test_r7_4_a_state_held_in_the_batch_is_written_then_dropped_by_the_same_sweep(tmp_path: Path) -> None:
    app, stages, _ = build_app(Settings(topic_prefix="u.", partitions=2, store="memory", web_port=0, data_dir=str(tmp_path)))
    table = stages.tables["gangs"]
    key = "c1/gang-a"
    steps: list[tuple[str, Any]] = []

    async def flush(batch: Batch) -> None:  # as Delivery.flush: the held states written, the batch emptied
        steps.append(("flush", sorted(table.pending)))
        table.pending.clear()
        batch.count = 0

    def delete(expired: list[tuple[bytes, int]]) -> int:
        steps.append(("delete", (list(expired), sorted(table.pending))))
        return len(expired)

    async def sweep() -> Scope:
        batch = Batch(app, asyncio.Queue(), table, producer=None)
        stages.delivery.batches["gangs_stage"] = batch
        stages.delivery.flush = flush  # type: ignore[method-assign]
        table.delete = delete  # type: ignore[method-assign]
        scope = stages._scopes("gangs")[0] = Scope(whole=False)
        scope.latest["c1"] = T0 + timedelta(days=2)  # stream time past the state's expiry
        scope.expiring, scope.waiting = KeyTimes(), KeyTimes()
        scope.expiring.set(key, T0)
        scope.waiting.set(key, T0 + timedelta(days=3))  # it also waits on progress
        table.pending[key.encode()] = (object(), b"{}")  # folded in the batch being made
        batch.count = 1
        await stages.sweep()
        return scope

    scope = app.loop.run_until_complete(sweep())
    assert steps == [("flush", [key.encode()]), ("delete", ([(key.encode(), 0)], []))]  # written, then dropped, in one sweep
    assert key not in scope.expiring and key not in scope.waiting  # neither expires nor waits any more
