"""A workaround for a faust-streaming 0.15 / aiokafka 0.14 record loss, applied once per
process by `build_app`.

Faust can throw away records it has already fetched (around its start-up and rebalance
handling: stale-generation records are skipped, agent buffers are cleared) and relies on
seeking every partition back to its committed offset afterwards. aiokafka's
`seek_to_committed` seeks only partitions whose committed offset is > 0, so a partition
with nothing committed yet keeps its advanced fetch position and the discarded records
are never delivered (seen here: a worker restarted less than a commit interval after
its previous run lost records 1..30 of a partition). The patch seeks such partitions
back to their beginning too. Records delivered twice are recognised by the stages
(their positions), and `agents.Continuity` stops the worker should a hole remain.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

_PATCHED = "_faultline_seeks_uncommitted"


def seek_uncommitted_partitions_to_beginning() -> None:
    thread_class = faust_aiokafka.AIOKafkaConsumerThread
    if getattr(thread_class, _PATCHED, False):
        return
    original = thread_class.seek_to_committed

    async def seek_to_committed(self: Any) -> Mapping[Any, int]:
        committed = await original(self)
        uncommitted = [tp for tp, offset in committed.items() if not offset and not self.consumer._is_changelog_tp(tp)]
        if uncommitted:
            await self.call_thread(self._ensure_consumer().seek_to_beginning, *uncommitted)
        return committed

    thread_class.seek_to_committed = seek_to_committed
    setattr(thread_class, _PATCHED, True)
