"""R12.3 in the Faust worker: a stage's scope of an input partition begins anew with each
ownership of the partition and takes up the progress its table partition was last written
with (app/stream/agents.py `Stages._scope`), read from that table partition's own store.

The stages fold a fetch's records without a Faust event each (faust_fixes patch 13); the
table partition of the record folded last stays current until the next record makes its
own current. A RocksDB table keeps a database per partition and reads the current one:
a new ownership's progress, read while the previous record's partition was current, was
looked up in the wrong database and not found. The scope then had only the progress read
after the rebalance: a source partition that had sent its last progress before it never
showed one again, the watermark was never known, and gangs waiting on it never settled
(tests/integration/test_stream_ownership.py, when a worker stopping during a rebalance
left its partitions to the others only at its session timeout, after the last progress
of the others' partitions was read)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.core.base.progress import NO_PROGRESS
from app.model.decode import encode_internal
from app.model.envelope import JOBS
from app.model.facts import GANG_INPUTS, Progress
from app.settings import Settings

pytest.importorskip("faust")
pytest.importorskip("rocksdict")

from app.core.engine.runner import Progressed  # noqa: E402
from app.core.engine.topology import GANGS_STAGE  # noqa: E402
from app.stream.app import build_app  # noqa: E402
from app.stream.codecs import encode  # noqa: E402
from app.stream.delivery import Batch  # noqa: E402
from app.stream.faust_fixes import as_current_event, partition_event  # noqa: E402

T0 = datetime(2026, 12, 5, tzinfo=timezone.utc)
SOURCES = 2  # k8s.jobs partitions, as the progress forwarded to gang-inputs says


def _progress(source: int, at: datetime) -> Progress:
    return Progress("c1", JOBS, source, SOURCES, at)


def _record(partition: int, offset: int, value: bytes) -> SimpleNamespace:
    """A gang-inputs record as the fetch loop hands it to the stage (aiokafka's)."""
    return SimpleNamespace(topic="u.faultline.gang-inputs", partition=partition, offset=offset, key=b"c1/g", value=value, headers=None)


def _stages(tmp_path: Path):  # type: ignore[no-untyped-def]
    return build_app(Settings(topic_prefix="u.", partitions=2, store="rocksdb", web_port=0, data_dir=str(tmp_path)))


def test_r12_3_a_partition_taken_over_after_another_partitions_record_takes_up_its_saved_progress(tmp_path: Path) -> None:
    app, stages, _ = _stages(tmp_path)
    table = stages.tables["gangs"]
    marks = NO_PROGRESS.observe(_progress(0, T0))
    assert marks is not None
    saved = Progressed(marks, {"c1": T0})
    # As the worker that held table partition 1 last wrote its progress (StateTable.flush).
    with as_current_event(partition_event(1)):
        table.table.data[b"/progress/1"] = encode(saved)

    async def fold() -> None:
        batch = Batch(app, asyncio.Queue(), table, producer=None)
        # The last record folded before the rebalance was one of partition 0 ...
        stages.handle(GANGS_STAGE, table, _record(0, 7, encode_internal(_progress(0, T0))), batch)
        stages.scopes["gangs"].clear()  # ... and this ownership of partition 1 begins now.
        # Source partition 1 shows progress; source partition 0 showed its last before.
        stages.handle(GANGS_STAGE, table, _record(1, 3, encode_internal(_progress(1, T0 + timedelta(minutes=5)))), batch)

    app.loop.run_until_complete(fold())
    scope = stages.scopes["gangs"][1]
    assert scope.marks.latest[f"c1/{JOBS}"] == {0: T0, 1: T0 + timedelta(minutes=5)}  # taken up, then moved on
    assert scope.marks.of("c1", JOBS) == T0  # so the watermark is known: what waits on it settles
