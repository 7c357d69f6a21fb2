"""`faultline goodput TRACE`: where a trace's GPU-hours went (SPEC R17) — per cluster, on
its own stream time, by namespace and queue and by hour; each failed attempt's figures up
to its failure; every stretch of idle quota. The trace runs through the embedded Pipeline
with its fleet stage, as `faultline fleet` runs it."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli import render
from app.cli.common import add_fleet_options, finish_run, report_dead_letter, require_trace
from app.cli.fleet import fleet_rules, replay_counted
from app.core.fleet.view import LiveFleet
from app.embedded.pipeline import Pipeline
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, IDLE_QUOTA, ClassifiedFailure, IdleQuota
from app.replay.trace import read_lines


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "goodput",
        help="print where a trace's GPU-hours went: reserved, running, useful, lost, idle; idle quota",
        description="Where the GPU-hours went (SPEC R17): reserved by Kueue, running, useful, lost to failures, idle; "
        "per cluster by namespace and queue and by hour, each failed attempt's figures, and every stretch of idle quota.",
    )
    p.add_argument("trace", type=Path, help="trace file (JSON Lines of source records)")
    add_fleet_options(p)
    p.set_defaults(run=run_goodput)


def run_goodput(args: argparse.Namespace) -> int:
    require_trace(args.trace)
    pipeline = Pipeline(fleet_rules(args))
    live = LiveFleet(pipeline.rules.fleet)
    verdicts: dict[str, ClassifiedFailure] = {}
    idle: list[IdleQuota] = []
    for emit in replay_counted(read_lines(args.trace), pipeline, live):
        live.observe(emit)
        if emit.topic == CLASSIFIED_FAILURES:
            verdicts[emit.key] = emit.value  # a later revision supersedes (R7.2)
        elif emit.topic == IDLE_QUOTA:
            idle.append(emit.value)
        elif emit.topic == DEAD_LETTER:
            report_dead_letter(emit)
    summary = live.summary()
    lines = render.goodput_lines(summary.goodput)
    lines += ["", "BY HOUR", *render.goodput_hour_lines(summary.goodput)]
    lines += ["", "FAILED ATTEMPTS (each up to its failure)", *render.attempt_goodput_lines(list(verdicts.values()))]
    lines += ["", f"IDLE QUOTA (held past max_idle_quota, {pipeline.rules.max_idle_quota_seconds / 60:g}m, with nothing running; or evicted and still held)"]
    lines += render.idle_quota_lines(idle)
    print("\n".join(lines))
    return finish_run(pipeline.counts)
