"""The aiohttp app: the fleet page, its JSON views and /metrics over a `FleetView`.

Handlers only read the view and encode; every answer is computed by app/core/fleet/summary.py.
They run on the event loop that feeds the view, so they never see a half-folded record.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from app.core.fleet.costs import gpu_cost
from app.core.fleet.goodput_rows import cluster_goodput, idle_rows
from app.core.fleet.summary import candidate_rows, failure_rows, fleet_summary, gpu_rows, node_rows, queue_rows, recent_verdicts
from app.core.fleet.view import FleetView
from app.web.metrics import CONTENT_TYPE, render_metrics
from app.web.page import PAGE

VIEW: web.AppKey[FleetView] = web.AppKey("fleet_view")
DEFAULT_VERDICTS = 20
MAX_VERDICTS = 1000

_encoder = msgspec.json.Encoder()


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encoder.encode(value), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def _view(request: web.Request) -> FleetView:
    return request.app[VIEW]


async def page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html", headers={"Cache-Control": "no-store"})


async def fleet(request: web.Request) -> web.Response:
    view = _view(request)
    return _json(fleet_summary(view.state, view.settings))


async def nodes(request: web.Request) -> web.Response:
    return _json(node_rows(_view(request).state))


async def gpus(request: web.Request) -> web.Response:
    return _json(gpu_rows(_view(request).state))


async def failures(request: web.Request) -> web.Response:
    return _json(failure_rows(_view(request).state))


async def goodput(request: web.Request) -> web.Response:
    """SPEC R17: per cluster, where the GPU-hours went; the quota idle now."""
    view = _view(request)
    return _json({"clusters": cluster_goodput(view.state, view.settings), "idle": idle_rows(view.state)})


async def cost(request: web.Request) -> web.Response:
    """GPU-seconds failures burned, every row by code, namespace and node (issue 30)."""
    return _json(gpu_cost(_view(request).state))


async def queues(request: web.Request) -> web.Response:
    return _json(queue_rows(_view(request).state))


async def quarantine(request: web.Request) -> web.Response:
    view = _view(request)
    return _json({"candidates": candidate_rows(view.state, view.settings), "events": view.state.quarantine_log})


async def verdicts(request: web.Request) -> web.Response:
    text = request.query.get("limit", str(DEFAULT_VERDICTS))
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_VERDICTS:
        return _error(400, f"limit={text!r} is not valid: give an integer from 1 to {MAX_VERDICTS}")
    return _json(recent_verdicts(_view(request).state, limit))


async def attempt(request: web.Request) -> web.Response:
    key = request.match_info["key"]
    view = _view(request)
    evidence = view.evidence(key)
    owner = view.owner_of(key) if evidence is None else None
    if owner is not None and FORWARDED not in request.headers:
        return await _from_owner(owner, request)
    if evidence is None:
        return _error(
            404,
            f"no attempt {key!r} in the fleet view: give an attempt key <cluster>/<namespace>/<run>/<action>/<attempt> "
            "(or a workload's <cluster>/<namespace>/<Kind>/<name>/<uid>) whose state the attempt stage still keeps "
            "(its retention after the attempt ended)",
        )
    return _json(evidence)


async def progress(request: web.Request) -> web.Response:
    """The driver's watermarks per cluster and source topic (SPEC R12.6)."""
    return _json(_view(request).counters().watermarks)


FORWARDED = "X-Faultline-Forwarded"


async def _from_owner(owner: str, request: web.Request) -> web.Response:
    """Ask the worker that holds the attempt (its partition of the attempt stage)."""
    import aiohttp

    url = owner.rstrip("/") + request.path
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            async with session.get(url, headers={FORWARDED: "1"}) as response:
                return web.Response(body=await response.read(), status=response.status, content_type="application/json")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return _error(502, f"the worker holding this attempt ({owner}) did not answer: {exc}")


async def metrics(request: web.Request) -> web.Response:
    view = _view(request)
    return web.Response(body=render_metrics(view, fleet=view.reports_fleet()).encode(), headers={"Content-Type": CONTENT_TYPE})


def make_web_app(view: FleetView) -> web.Application:
    app = web.Application()
    app[VIEW] = view
    app.router.add_get("/", page)
    app.router.add_get("/api/fleet", fleet)
    app.router.add_get("/api/nodes", nodes)
    app.router.add_get("/api/gpus", gpus)
    app.router.add_get("/api/failures", failures)
    app.router.add_get("/api/cost", cost)
    app.router.add_get("/api/goodput", goodput)
    app.router.add_get("/api/queues", queues)
    app.router.add_get("/api/quarantine", quarantine)
    app.router.add_get("/api/verdicts", verdicts)
    app.router.add_get("/api/progress", progress)
    app.router.add_get("/api/attempts/{key:.*}", attempt)
    app.router.add_get("/metrics", metrics)
    return app
