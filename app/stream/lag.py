"""Consumer lag of a Faust worker, for /metrics and the fleet page."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from app.core.fleet.view import Lag


class _TP(Protocol):
    topic: str
    partition: int


class _Consumer(Protocol):
    def assignment(self) -> Iterable[Any]: ...

    def highwater(self, tp: Any) -> int: ...


def consumer_lag(consumer: _Consumer, read_offsets: dict[Any, int | None], logical: dict[str, str] | None = None) -> list[Lag]:
    """Lag per assigned partition: records between the last one read and the end.

    With Faust: `consumer_lag(app.consumer, faust_fixes.read_offsets(app), stages.logical)`
    (Faust's read positions have no public accessor; faust_fixes.py is where they are
    read). A partition nothing was read from yet is left out (its lag is not known).
    `logical` maps Kafka topic names to logical ones (the configured prefix removed).
    """
    lags = []
    for tp in sorted(consumer.assignment(), key=lambda tp: (tp.topic, tp.partition)):
        read = read_offsets.get(tp)
        try:
            end = consumer.highwater(tp)
        except Exception:  # noqa: BLE001 - a partition being revoked has no highwater; skip it
            continue
        if read is None or end is None:
            continue
        topic = (logical or {}).get(tp.topic, tp.topic)
        lags.append(Lag(topic, tp.partition, max(0, end - read - 1)))
    return lags
