"""The same routes on a Faust worker's web server (faust.App.web is aiohttp).

Faust's own pages own `/` (and `/router`, `/table`, …), so the page and its JSON views are
mounted under a prefix (default `/fleet/`; the page's URLs are relative) and `/metrics`
at the root, where Prometheus looks. Call `mount` while building the app, before the
worker starts (aiohttp freezes its routes at startup).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from aiohttp import web

from app.web.metrics import CONTENT_TYPE, render_metrics
from app.web.server import make_web_app
from app.web.view import FleetView, Lag


def mount(faust_app: Any, view: FleetView, prefix: str = "/fleet") -> web.Application:
    """Serve the fleet page and views under `prefix` and /metrics at the root of
    `faust_app.web.web_app`; returns the mounted sub-app."""
    root: web.Application = faust_app.web.web_app
    fleet = make_web_app(view)

    async def to_page(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(prefix + "/")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=render_metrics(view).encode(), headers={"Content-Type": CONTENT_TYPE})

    root.router.add_get(prefix, to_page)  # before the sub-app, which would answer 404 for it
    root.add_subapp(prefix, fleet)
    root.router.add_get("/metrics", metrics)
    return fleet


class _TP(Protocol):
    topic: str
    partition: int


class _Consumer(Protocol):
    def assignment(self) -> Iterable[Any]: ...

    def highwater(self, tp: Any) -> int: ...


def consumer_lag(consumer: _Consumer, read_offsets: dict[Any, int | None], logical: dict[str, str] | None = None) -> list[Lag]:
    """Lag per assigned partition: records between the last one read and the end.

    With Faust: `consumer_lag(app.consumer, app.consumer._read_offset, stages.logical)`.
    Faust keeps its read positions in `_read_offset` and has no public accessor; a
    partition nothing was read from yet is left out (its lag is not known).
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
