"""Fleet health without a broker: `faultline fleet TRACE` (terminal tables) and
`faultline serve --trace TRACE` (the web page, JSON views and /metrics).

Both replay a trace through the embedded Pipeline, whose fleet stage derives fleet health
(app/core/fleet_fold.py) exactly as a worker's does over Kafka, and read the derived
records into the fleet view (app/core/fleet_summary.py) as a worker's web surface does.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO

import msgspec

from app.cli.offline import add_rules_option, finish_run, report_dead_letter, require_trace, rules_from_args
from app.core.emit import Emit
from app.core.fleet_evidence import AttemptEvidence, evidence_of
from app.core.fleet_summary import FleetSummary, SourceRow
from app.core.rules import FleetSettings, Rules
from app.model.fleet_records import DERIVED_TOPICS
from app.model.records import DEAD_LETTER
from app.replay.pipeline import Pipeline
from app.replay.trace import encode_output, read_lines, replay
from app.settings import parse_duration
from app.core.fleet_view import LiveFleet, Watermark



def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("fleet", help="print the fleet health of a trace: top nodes and GPUs, quarantine candidates, failures")
    p.add_argument("trace", type=Path, help="trace file (JSON Lines of source records)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per table (default 10)")
    p.add_argument("--out", type=Path, default=None, help="also write the derived records (JSON Lines, as `replay`; '-' for stdout)")
    _fleet_options(p)
    p.set_defaults(run=run_fleet)

    p = commands.add_parser("serve", help="replay a trace and serve its fleet-health page, JSON views and /metrics")
    p.add_argument("--trace", type=Path, required=True, help="trace file (JSON Lines of source records)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument("--pace", type=float, default=0.0, metavar="S", help="feed one source record every S seconds instead of all at once (watch the page update)")
    _fleet_options(p)
    p.set_defaults(run=run_serve)


def _fleet_options(parser: argparse.ArgumentParser) -> None:
    add_rules_option(parser)
    group = parser.add_argument_group("fleet settings")
    group.add_argument("--quarantine-threshold", type=int, default=None, metavar="N", help="critical faults that make a node or GPU a quarantine candidate (default 3)")
    group.add_argument("--quarantine-window", default=None, metavar="DURATION", help="sliding window of that count, e.g. 24h, 90m, 3600 (default 24h)")
    group.add_argument("--history-hours", type=int, default=None, metavar="H", help="hours of buckets kept (default 48)")


def fleet_settings(args: argparse.Namespace) -> FleetSettings:
    given: dict[str, object] = {}
    try:
        if args.quarantine_threshold is not None:
            given["threshold"] = args.quarantine_threshold
        if args.quarantine_window is not None:
            given["window_seconds"] = parse_duration(args.quarantine_window)
        if args.history_hours is not None:
            given["history_hours"] = args.history_hours
        return msgspec.convert(given, FleetSettings)
    except (ValueError, msgspec.ValidationError) as exc:
        raise SystemExit(f"faultline: invalid fleet settings: {exc}") from None


def replay_counted(lines: Iterable[tuple[int, bytes]], pipeline: Pipeline, live: LiveFleet, *, finish: bool = True) -> Iterator[Emit]:
    """`replay`, counting input records per topic for /metrics."""
    return replay(lines, pipeline, seen=live.count_input, finish=finish)


def pipeline_evidence(pipeline: Pipeline, attempt_key: str) -> AttemptEvidence | None:
    """An attempt's evidence, while the embedded runner keeps its state."""
    return evidence_of(pipeline.states["attempts"].get(attempt_key), pipeline.rules.version)


def fleet_rules(args: argparse.Namespace) -> Rules:
    """The rule set, with the fleet settings of the command line."""
    return msgspec.structs.replace(rules_from_args(args), fleet=fleet_settings(args))


# --- terminal tables ------------------------------------------------------------------------------


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC") if at is not None else "-"


def _window(seconds: int) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(header: tuple[str, ...], rows: Iterable[tuple[object, ...]]) -> list[str]:
    """Left-aligned columns; numbers right-aligned."""
    cells = [tuple(str(c) for c in header), *(tuple("-" if c is None or c == "" else str(c) for c in row) for row in rows)]
    numeric = [all(row[i].isdigit() or row[i] == "-" for row in cells[1:]) for i in range(len(header))]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [
        "  ".join(cell.rjust(w) if num and n else cell.ljust(w) for n, (cell, w, num) in enumerate(zip(row, widths, numeric))).rstrip()
        for row in cells
    ]


def _source_rows(rows: list[SourceRow], gpu: bool) -> list[tuple[object, ...]]:
    return [
        (r.node + (" *" if r.candidate else ""), *((r.gpu,) if gpu else ()), r.faults, r.critical, r.user, r.warn, r.occurrences, r.top,
         *(() if gpu else (r.gpus,)), _when(r.last_fault_at))
        for r in rows
    ]


def fleet_lines(summary: FleetSummary) -> list[str]:
    """The fleet-health summary as terminal tables."""
    t = summary.totals
    lines = [
        f"FLEET HEALTH  stream time {_when(summary.stream_time)}  (history {summary.history_hours}h; "
        f"quarantine: >= {summary.threshold} critical faults in {_window(summary.window_seconds)})",
        f"faults {t.faults} (critical {t.severity.critical}, user {t.severity.user}, warn {t.severity.warn}; {t.occurrences} occurrences) "
        f"on {t.nodes} node(s), {t.gpus} GPU(s); failures {t.failures} (system {t.system_failures}, user {t.user_failures}; "
        f"{t.gpu_failures} with a GPU fault); dead letters {t.dead_letters}",
    ]
    lines += ["", "QUARANTINE CANDIDATES"]
    if summary.quarantine:
        lines += table(
            ("SCOPE", "NODE", "GPU", "FAULTS", "SINCE", "CODES"),
            ((c.scope, c.node, c.gpu, c.faults, _when(c.since), ", ".join(c.codes)) for c in summary.quarantine),
        )
    else:
        lines.append("none")
    lines += ["", "TOP NODES (* quarantine candidate)"]
    lines += table(("NODE", "FAULTS", "CRITICAL", "USER", "WARN", "OCCURRENCES", "TOP", "GPUS", "LAST FAULT"), _source_rows(summary.nodes, False)) if summary.nodes else ["none"]
    lines += ["", "TOP GPUS"]
    lines += table(("NODE", "GPU", "FAULTS", "CRITICAL", "USER", "WARN", "OCCURRENCES", "TOP", "LAST FAULT"), _source_rows(summary.gpus, True)) if summary.gpus else ["none"]
    lines += ["", "FAILURES BY CODE AND KIND"]
    lines += table(
        ("CLUSTER", "NAMESPACE", "CODE", "KIND", "FAILURES", "WITH GPU FAULT"),
        ((r.cluster, r.namespace, r.code, r.kind, r.failures, r.gpu_faults) for r in summary.failures),
    ) if summary.failures else ["none"]
    if summary.queues:
        lines += ["", "GANG PREEMPTIONS (queue = namespace until transitions carry the queue name)"]
        lines += table(
            ("CLUSTER", "QUEUE", "PREEMPTIONS", "EVICTIONS", "READMITTED", "WAITING", "AVG WAIT", "MAX WAIT"),
            (
                (q.cluster, q.queue, q.preemptions, q.evictions, q.readmissions, q.waiting,
                 f"{q.wait_seconds_avg:.0f}s" if q.wait_seconds_avg is not None else "-",
                 f"{q.wait_seconds_max:.0f}s" if q.wait_seconds_max is not None else "-")
                for q in summary.queues
            ),
        )
    return lines


# --- the commands ------------------------------------------------------------------------------------


def run_fleet(args: argparse.Namespace) -> int:
    require_trace(args.trace)
    pipeline = Pipeline(fleet_rules(args))
    live = LiveFleet(fleet_settings(args))
    out: IO[bytes] | None = None
    if args.out is not None:
        out = sys.stdout.buffer if str(args.out) == "-" else args.out.open("wb")
    try:
        for emit in replay_counted(read_lines(args.trace), pipeline, live):
            if emit.topic == DEAD_LETTER:
                report_dead_letter(emit)
            live.observe(emit)
            if out is not None and emit.topic in DERIVED_TOPICS:
                out.write(encode_output(emit) + b"\n")
    finally:
        if out is not None and out is not sys.stdout.buffer:
            out.close()
    if out is not sys.stdout.buffer:
        print("\n".join(fleet_lines(live.summary(args.top))))
    return finish_run(pipeline)


def run_serve(args: argparse.Namespace) -> int:
    try:
        from aiohttp import web  # noqa: F401 - comes with the stream extra (faust-streaming)
    except ImportError:
        raise SystemExit("faultline: `serve` needs aiohttp: pip install 'faultline[stream]'") from None
    require_trace(args.trace)
    pipeline = Pipeline(fleet_rules(args))
    live = LiveFleet(
        fleet_settings(args),
        evidence=lambda key: pipeline_evidence(pipeline, key),
        watermarks=lambda: [Watermark(cluster, topic, at) for cluster, topic, at in pipeline.watermarks()],
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

