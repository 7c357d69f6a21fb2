"""The same routes on a Faust worker's web server (faust.App.web is aiohttp).

Faust's own pages own `/` (and `/router`, `/table`, …), so the page and its JSON views are
mounted under a prefix (default `/fleet/`; the page's URLs are relative) and `/metrics`
at the root, where Prometheus looks. Call `mount` while building the app, before the
worker starts (aiohttp freezes its routes at startup).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from app.web.metrics import CONTENT_TYPE, render_metrics
from app.web.server import make_web_app
from app.core.fleet.view import FleetView


def mount(faust_app: Any, view: FleetView, prefix: str = "/fleet") -> web.Application:
    """Serve the fleet page and views under `prefix` and /metrics at the root of
    `faust_app.web.web_app`; returns the mounted sub-app."""
    root: web.Application = faust_app.web.web_app
    fleet = make_web_app(view)

    async def to_page(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(prefix + "/")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=render_metrics(view, fleet=view.reports_fleet()).encode(), headers={"Content-Type": CONTENT_TYPE})

    root.router.add_get(prefix, to_page)  # before the sub-app, which would answer 404 for it
    root.add_subapp(prefix, fleet)
    root.router.add_get("/metrics", metrics)
    return fleet
