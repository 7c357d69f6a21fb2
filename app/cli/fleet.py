"""Fleet health without a broker: `faultline fleet TRACE` (terminal tables) and
`faultline serve --trace TRACE` (the web page, JSON views and /metrics).

Both replay a trace through the embedded Pipeline, whose fleet stage derives fleet health
(app/core/fleet/fold.py) exactly as a worker's does over Kafka, and read the derived
records into the fleet view (app/core/fleet/read_model.py, fleet_summary.py) as a worker's web surface does.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

import msgspec

from app.cli import render
from app.cli.common import (
    add_fleet_options,
    close_out,
    finish_run,
    need,
    open_out,
    report_dead_letter,
    require_trace,
    rules_from_args,
)
from app.core.base.emit import Emit
from app.core.fleet.evidence import AttemptEvidence, attempt_state, evidence_of
from app.core.fleet.view import LiveFleet, Waiting, Watermark
from app.core.base.rules import DEFAULT_FLEET, Rules
from app.model.fleet_records import DERIVED_TOPICS
from app.model.records import DEAD_LETTER
from app.embedded.pipeline import Pipeline
from app.replay.trace import encode_output, read_lines, replay


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("fleet", help="print the fleet health of a trace: top nodes and GPUs, quarantine candidates, failures")
    p.add_argument("trace", type=Path, help="trace file (JSON Lines of source records)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per table (default 10)")
    p.add_argument("--out", type=Path, default=None, help="also write the derived records (JSON Lines, as `replay`; '-' for stdout)")
    add_fleet_options(p)
    p.set_defaults(run=run_fleet)

    p = commands.add_parser("serve", help="replay a trace and serve its fleet-health page, JSON views and /metrics")
    p.add_argument("--trace", type=Path, required=True, help="trace file (JSON Lines of source records)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument("--pace", type=float, default=0.0, metavar="S", help="feed one source record every S seconds instead of all at once (watch the page update)")
    add_fleet_options(p)
    p.set_defaults(run=run_serve)


def replay_counted(lines: Iterable[tuple[int, bytes]], pipeline: Pipeline, live: LiveFleet, *, finish: bool = True) -> Iterator[Emit]:
    """`replay`, counting input records per topic for /metrics."""
    return replay(lines, pipeline, seen=live.count_input, finish=finish)


def pipeline_evidence(pipeline: Pipeline, attempt_key: str) -> AttemptEvidence | None:
    """An attempt's evidence, while the embedded runner keeps its state."""
    return evidence_of(attempt_state(pipeline.states["attempts"], attempt_key), pipeline.rules.version)


def fleet_rules(args: argparse.Namespace) -> Rules:
    """The rule set with its fleet settings (the rule file's, those the user set on top),
    as every command that takes a rule file has it (app/cli/common.py `rules_from_args`)."""
    rules = rules_from_args(args)
    return rules if rules.fleet is not None else msgspec.structs.replace(rules, fleet=DEFAULT_FLEET)


# --- the commands ------------------------------------------------------------------------------------


def run_fleet(args: argparse.Namespace) -> int:
    require_trace(args.trace)
    pipeline = Pipeline(fleet_rules(args))
    live = LiveFleet(pipeline.rules.fleet)
    out: IO[bytes] | None = open_out(args.out) if args.out is not None else None
    try:
        for emit in replay_counted(read_lines(args.trace), pipeline, live):
            if emit.topic == DEAD_LETTER:
                report_dead_letter(emit)
            live.observe(emit)
            if out is not None and emit.topic in DERIVED_TOPICS:
                out.write(encode_output(emit) + b"\n")
    finally:
        close_out(out)
    if out is not sys.stdout.buffer:
        print("\n".join(render.fleet_lines(live.summary(args.top))))
    return finish_run(pipeline.counts)


def run_serve(args: argparse.Namespace) -> int:
    need("serve", "stream", "aiohttp")
    require_trace(args.trace)
    pipeline = Pipeline(fleet_rules(args))
    live = LiveFleet(
        pipeline.rules.fleet,
        evidence=lambda key: pipeline_evidence(pipeline, key),
        watermarks=lambda: [Watermark(cluster, topic, at) for cluster, topic, at in pipeline.watermarks()],
        waiting=lambda: [Waiting(cluster, topic) for cluster, topic in pipeline.waiting()],
    )
    try:
        return asyncio.run(_serve(args, pipeline, live))
    except KeyboardInterrupt:
        return 130


async def _feed(lines: Iterable[tuple[int, bytes]], pipeline: Pipeline, live: LiveFleet, pace: float) -> None:
    for line in lines:
        for emit in replay_counted([line], pipeline, live, finish=False):
            if emit.topic == DEAD_LETTER:
                report_dead_letter(emit)
            live.observe(emit)
        if pace:
            await asyncio.sleep(pace)  # the page's handlers run between records
    for emit in pipeline.finish():  # the end of the trace (R12.3)
        live.observe(emit)


async def _serve(args: argparse.Namespace, pipeline: Pipeline, live: LiveFleet) -> int:
    from aiohttp import web

    from app.web.server import make_web_app

    lines = read_lines(args.trace)
    if not args.pace:
        await _feed(lines, pipeline, live, 0)
    runner = web.AppRunner(make_web_app(live), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port)
        try:
            await site.start()
        except OSError as exc:
            print(f"faultline: cannot listen on {args.host}:{args.port} ({exc.strerror}); choose another --port", file=sys.stderr)
            return 1
        port = runner.addresses[0][1]
        print(f"faultline: fleet health of {args.trace} at http://{args.host}:{port}/ (metrics at /metrics; Ctrl-C to stop)", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        feeder = asyncio.create_task(_feed(lines, pipeline, live, args.pace)) if args.pace else None
        await stop.wait()
        if feeder is not None:
            feeder.cancel()
        return 0
    finally:
        await runner.cleanup()

