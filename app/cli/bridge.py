"""Commands that watch a live cluster: bridge (→ Kafka), record (→ a trace file),
run (→ the rules, in this process).

All three run the same bridge (app/bridge/bridge.py); only the sink differs. Every
setting is a flag generated from its declaration (app/bridge/settings.py for the watch,
app/settings.py for Kafka and logging): flag > FAULTLINE_* environment > default.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from app import settings as settings_mod
from app.bridge import settings as bridge_settings_mod
from app.bridge.errors import BridgeError
from app.bridge.settings import BridgeSettings
from app.cli import render
from app.cli.common import KAFKA as KAFKA_CONNECTION
from app.cli.common import fail as _fail
from app.cli.common import need
from app.cli.settings_flags import settings_flags
from app.settings import SettingsError

KAFKA = [*KAFKA_CONNECTION, "replication", "log_level"]
LOGGING = ["log_level"]
WATCH = [info.name for info in bridge_settings_mod.describe()]
# Settings of the bridge's own publishing loop: `record` and `run` keep no positions and
# run no liveness probe, so they do not offer them.
WATCH_LOCAL = [name for name in WATCH if name not in ("checkpoint_interval", "heartbeat_file")]

log = logging.getLogger("faultline.bridge")


def _stop_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=None, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    parser.add_argument("--max-records", type=int, default=None, metavar="N", help="stop after N source records")


def register(commands: argparse._SubParsersAction) -> None:
    watch = settings_flags(bridge_settings_mod.describe(), WATCH, "watch settings")
    watch_local = settings_flags(bridge_settings_mod.describe(), WATCH_LOCAL, "watch settings")
    kafka = settings_flags(settings_mod.describe(), KAFKA, "Kafka settings")
    logging_only = settings_flags(settings_mod.describe(), LOGGING, "logging")

    p = commands.add_parser(
        "bridge",
        parents=[watch, kafka],
        help="watch a cluster and publish every change to Kafka; resumes where it stopped (SIGTERM/Ctrl-C to stop)",
    )
    p.set_defaults(run=run_bridge, kafka_names=KAFKA, watch_names=WATCH)

    p = commands.add_parser(
        "record", parents=[watch_local, logging_only], help="watch a cluster and write every change to a trace file (JSON Lines)"
    )
    p.add_argument("--out", type=Path, required=True, help="trace file to write ('-' for stdout)")
    _stop_flags(p)
    p.set_defaults(run=run_record, kafka_names=LOGGING, watch_names=WATCH_LOCAL)

    p = commands.add_parser(
        "run",
        parents=[watch_local, logging_only],
        help="watch a cluster and classify in this process (no broker): print verdicts and gang transitions as they come",
    )
    p.add_argument("--out", type=Path, default=None, help="also write every output record to this file (JSON Lines, as `replay`)")
    _stop_flags(p)
    p.set_defaults(run=run_live, kafka_names=LOGGING, watch_names=WATCH_LOCAL)


def _load(args: argparse.Namespace) -> tuple[settings_mod.Settings, BridgeSettings]:
    kafka = settings_mod.load({name: getattr(args, name) for name in args.kafka_names})
    watch = bridge_settings_mod.load({name: getattr(args, name) for name in args.watch_names})
    return kafka, watch


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kafka").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.ERROR)


def _on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGINT/SIGTERM ask for a clean stop; a second one interrupts at once."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log.info("stopping (signal %s): publishing what was received, then saving the positions", signal.Signals(signum).name)
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def _watch(sink: Any, watch: BridgeSettings, duration: float | None = None, max_records: int | None = None) -> int:
    """Run the bridge into `sink` until a signal, `duration` or `max_records`."""
    from app.bridge.bridge import Bridge
    from app.bridge.client import KubeApi, api_client

    streams = max(1, len(watch.namespace_list())) * 8
    try:
        api = KubeApi(api_client(watch.kubeconfig, watch.context, connections=streams + 4))
    except BridgeError as exc:
        return _fail(str(exc))
    stop = threading.Event()
    restore = _on_signals(stop)
    started = time.monotonic()
    try:
        stats = Bridge(api, sink, watch).run(stop, duration=duration, max_records=max_records)
    except BridgeError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    finally:
        restore()
        api.close()
    elapsed = time.monotonic() - started
    topics = ", ".join(f"{topic} {n}" for topic, n in sorted(stats.by_topic.items())) or "none"
    log.info("%d records in %.1fs (%s); %d gap(s), %d progress record(s)", stats.records, elapsed, topics, stats.gaps, stats.progress)
    return 0


def run_bridge(args: argparse.Namespace) -> int:
    need("bridge", "bridge", "kubernetes", "kafka")
    try:
        kafka, watch = _load(args)
    except SettingsError as exc:
        return _fail(str(exc), 2)
    _setup_logging(kafka.log_level)
    from app.bridge.kafka_sink import KafkaSink, ensure_topics  # needs kafka-python: only here

    try:
        ensure_topics(kafka)
        sink = KafkaSink(kafka)
    except BridgeError as exc:
        return _fail(str(exc))
    try:
        return _watch(sink, watch)
    finally:
        sink.close()


def _open_out(path: Path) -> tuple[IO[bytes], bool]:
    if str(path) == "-":
        return sys.stdout.buffer, False
    return path.open("wb"), True


def run_record(args: argparse.Namespace) -> int:
    need("record", "bridge", "kubernetes")
    try:
        kafka, watch = _load(args)
    except SettingsError as exc:
        return _fail(str(exc), 2)
    _setup_logging(kafka.log_level)
    from app.bridge.sinks import TraceSink

    try:
        out, owned = _open_out(args.out)
    except OSError as exc:
        return _fail(f"cannot write the trace file {args.out}: {exc}")
    sink = TraceSink(out)
    try:
        code = _watch(sink, watch, args.duration, args.max_records)
    finally:
        sink.close()
        if owned:
            out.close()
    if code == 0:
        print(f"recorded {sink.written} records to {args.out} (and {sink.progress} progress records)", file=sys.stderr)
    return code


class LivePrinter:
    """Prints each verdict and gang transition as it comes, in the columns of `classify`
    (render.py); writes every output record to `out` when given (the `replay` format)."""

    def __init__(self, stdout: IO[str], out: IO[bytes] | None) -> None:
        from app.replay.trace import encode_output

        self._stdout, self._out, self._encode = stdout, out, encode_output
        self._verdicts = render.Columns(render.VERDICT_HEADER, render.VERDICT_MINIMUM)
        self._transitions = render.Columns(render.TRANSITION_HEADER, render.TRANSITION_MINIMUM)
        self.verdicts = 0
        self.transitions = 0

    def __call__(self, emit: Any) -> None:
        from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, GANG_TRANSITIONS

        if self._out is not None:
            self._out.write(self._encode(emit) + b"\n")
            self._out.flush()  # a reader may follow the file while the run goes on
        if emit.topic == CLASSIFIED_FAILURES:
            head = [self._verdicts.head()] if not self.verdicts else []
            self.verdicts += 1
            self._print(head + render.verdict_lines(emit.value, self._verdicts))
        elif emit.topic == GANG_TRANSITIONS:
            head = ["GANG TRANSITIONS", self._transitions.head()] if not self.transitions else []
            self.transitions += 1
            self._print(head + [render.transition_line(emit.value, self._transitions)])
        elif emit.topic == DEAD_LETTER:
            print(f"faultline: a record could not be read and was skipped ({emit.value.reason})", file=sys.stderr)

    def _print(self, lines: list[str]) -> None:
        self._stdout.write("\n".join(lines) + "\n")
        self._stdout.flush()


def run_live(args: argparse.Namespace) -> int:
    need("run", "bridge", "kubernetes")
    try:
        kafka, watch = _load(args)
    except SettingsError as exc:
        return _fail(str(exc), 2)
    _setup_logging(kafka.log_level)
    from app.cli.pipeline_sink import PipelineSink
    from app.replay.pipeline import Pipeline

    out = None
    if args.out is not None:
        try:
            out = args.out.open("wb")
        except OSError as exc:
            return _fail(f"cannot write the output file {args.out}: {exc}")
    printer = LivePrinter(sys.stdout, out)
    try:
        code = _watch(PipelineSink(Pipeline(), printer), watch, args.duration, args.max_records)
    finally:
        if out is not None:
            out.close()
    if code == 0:
        print(f"{printer.verdicts} verdict(s), {printer.transitions} gang transition(s)", file=sys.stderr)
    return code
