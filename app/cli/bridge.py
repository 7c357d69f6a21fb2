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
from typing import IO, TYPE_CHECKING, Any

from app import settings as settings_mod
from app.bridge import settings as bridge_settings_mod
from app.bridge.errors import BridgeError
from app.bridge.positions import MemoryPositions
from app.bridge.settings import BridgeSettings
from app.cli.common import KAFKA as KAFKA_CONNECTION
from app.cli.common import fail as _fail
from app.cli.common import add_rules_option, need, rules_from_args
from app.cli.live_output import LivePrinter
from app.cli.settings_flags import settings_flags
from app.settings import SettingsError

if TYPE_CHECKING:
    from app.core.base.rules import Rules
    from app.run.run_state import RunState

KAFKA = [*KAFKA_CONNECTION, "replication", "log_level"]
LOGGING = ["log_level"]
WATCH = [info.name for info in bridge_settings_mod.describe()]
# Settings of the bridge's own publishing loop: `record` keeps no positions, and neither
# it nor `run` runs a liveness probe, so they do not offer them.
WATCH_RECORD = [name for name in WATCH if name not in ("checkpoint_interval", "heartbeat_file")]
WATCH_RUN = [name for name in WATCH if name != "heartbeat_file"]

log = logging.getLogger("faultline.bridge")


def _stop_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=None, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    parser.add_argument("--max-records", type=int, default=None, metavar="N", help="stop after N source records")


def register(commands: argparse._SubParsersAction) -> None:
    watch = settings_flags(bridge_settings_mod.describe(), WATCH, "watch settings")
    watch_record = settings_flags(bridge_settings_mod.describe(), WATCH_RECORD, "watch settings")
    watch_run = settings_flags(bridge_settings_mod.describe(), WATCH_RUN, "watch settings")
    kafka = settings_flags(settings_mod.describe(), KAFKA, "Kafka settings")
    logging_only = settings_flags(settings_mod.describe(), LOGGING, "logging")

    p = commands.add_parser(
        "bridge",
        parents=[watch, kafka],
        help="watch a cluster and publish every change to Kafka; resumes where it stopped (SIGTERM/Ctrl-C to stop)",
    )
    p.set_defaults(run=run_bridge, kafka_names=KAFKA, watch_names=WATCH)

    p = commands.add_parser(
        "record", parents=[watch_record, logging_only], help="watch a cluster and write every change to a trace file (JSON Lines)"
    )
    p.add_argument("--out", type=Path, required=True, help="trace file to write ('-' for stdout)")
    _stop_flags(p)
    p.set_defaults(run=run_record, kafka_names=LOGGING, watch_names=WATCH_RECORD)

    p = commands.add_parser(
        "run",
        parents=[watch_run, logging_only],
        help="watch a cluster and classify in this process (no broker): print verdicts and gang transitions as they come; "
        "resumes where it stopped (its event log and positions are in --state)",
    )
    p.add_argument(
        "--state",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder of the run's event log, watch positions and lock, one per cluster (default: "
        "$XDG_DATA_HOME/faultline/run/CLUSTER, else ~/.local/share/faultline/run/CLUSTER); `rm -r DIR` starts from scratch",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="also write every output record to this file (JSON Lines, as `replay`); written afresh at each start: the "
        "outputs of the whole event log, then the live ones",
    )
    _stop_flags(p)
    add_rules_option(p)  # `run` applies the rules in this process: it reads a rule file as every command does
    _mark_flags(p)
    p.set_defaults(run=run_live, kafka_names=LOGGING, watch_names=WATCH_RUN)


def _mark_flags(parser: argparse.ArgumentParser) -> None:
    """`run --mark` (SPEC R18): the mark's settings that concern no broker."""
    from app.cli.settings_flags import add_settings_flags
    from app.mark import settings as mark_settings_mod

    group = parser.add_argument_group("marking (flag > environment variable > default; docs/mark.md)")
    group.add_argument(
        "--mark",
        action="store_true",
        help="also add the pod condition faultline.io/GPUFault to each running pod a trusted critical GPU fault names, as "
        "`faultline mark` does (the kubeconfig's user needs `get` on pods and `patch` on pods/status)",
    )
    add_settings_flags(group, mark_settings_mod.describe(), mark_settings_mod.EMBEDDED)


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


def _on_signals(stop: threading.Event, saves_positions: bool, doing: str = "", logger: logging.Logger = log) -> Callable[[], None]:
    """SIGINT/SIGTERM ask for a clean stop (what it does then: `doing`); a second one
    interrupts at once."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    doing = doing or "publishing what was received" + (", then saving the positions" if saves_positions else "")

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        logger.info("stopping (signal %s): %s", signal.Signals(signum).name, doing)
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def _connect(watch: BridgeSettings) -> Any:
    """The API client from the kubeconfig (no request yet); BridgeError names what is wrong."""
    from app.bridge.client import KubeApi, api_client

    streams = max(1, len(watch.namespace_list())) * 8
    return KubeApi(api_client(watch.kubeconfig, watch.context, connections=streams + 4))


def _watch(sink: Any, watch: BridgeSettings, duration: float | None = None, max_records: int | None = None, api: Any = None) -> int:
    """Run the bridge into `sink` until a signal, `duration` or `max_records` (on `api`,
    else one from the kubeconfig, closed at the end)."""
    from app.bridge.bridge import Bridge

    owned = api is None
    if owned:
        try:
            api = _connect(watch)
        except BridgeError as exc:
            return _fail(str(exc))
    stop = threading.Event()
    restore = _on_signals(stop, not isinstance(sink.positions, MemoryPositions))
    started = time.monotonic()
    bridge = Bridge(api, sink, watch)
    try:
        stats = bridge.run(stop, duration=duration, max_records=max_records)
    except BridgeError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    finally:
        restore()
        if owned:
            api.close()
    elapsed = time.monotonic() - started
    if not any(_reached(w) for w in bridge.watches):
        why = "stopped by a signal" if stop.is_set() else f"--duration {duration:g}s ran out" if duration is not None else "stopped"
        return _fail(
            f"no watch ever reached the API server ({why} after {elapsed:.0f}s; the warnings above say why each request "
            "failed): nothing was read. Check that the API server is up and reachable from here (the server address and "
            "credentials in the kubeconfig, --context), then run again"
        )
    topics = ", ".join(f"{topic} {n}" for topic, n in sorted(stats.by_topic.items())) or "none"
    log.info("%d records in %.1fs (%s); %d gap(s), %d progress record(s)", stats.records, elapsed, topics, stats.gaps, stats.progress)
    return 0


def _reached(watch: Any) -> bool:
    """Did the API server ever answer this watch (a list, a watch, or that its kind is
    not served)? A stop before any did means nothing was read, not "0 records"."""
    return any(watch.counts[what] for what in ("listed", "watches", "absent_checks", "published"))


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


def run_live(args: argparse.Namespace) -> int:
    need("run", "bridge", "kubernetes")
    try:
        kafka, watch = _load(args)
    except SettingsError as exc:
        return _fail(str(exc), 2)
    rules = rules_from_args(args)  # a bad rule file: exit 2 naming it, before anything starts
    mark = None
    if args.mark:
        from app.mark import settings as mark_settings_mod

        try:
            mark = mark_settings_mod.load({name: getattr(args, name) for name in mark_settings_mod.EMBEDDED})
        except SettingsError as exc:
            return _fail(str(exc), 2)
    _setup_logging(kafka.log_level)
    from app.run.event_log import LogError
    from app.run.run_state import RunState, StateError, default_state_dir
    from app.replay.trace import encode_output

    try:
        api = _connect(watch)  # a kubeconfig problem is said before the log is replayed
    except BridgeError as exc:
        return _fail(str(exc))
    try:
        state = RunState(args.state or default_state_dir(watch.cluster), watch.cluster)
    except StateError as exc:
        api.close()
        return _fail(str(exc))
    out = marking = None
    try:
        if args.out is not None:
            try:
                out = args.out.open("wb")
            except OSError as exc:
                return _fail(f"cannot write the output file {args.out}: {exc.strerror or exc}; give --out a file you may write")
        printer = LivePrinter(sys.stdout, out, encode_output)
        show = printer.show
        if mark is not None:  # SPEC R18: the faults it emits, marked in this process
            try:
                show = marking = _marking(show, rules, watch, mark)
            except BridgeError as exc:
                return _fail(str(exc))
        try:
            code = _run_on(api, state, printer, show, rules, watch, args)
        except LogError as exc:
            return _fail(str(exc))
        except KeyboardInterrupt:  # Ctrl-C while the log is replayed (the watch handles its own)
            return _fail("interrupted", 130)
    finally:
        api.close()
        state.close()
        if out is not None:
            out.close()
        if marking is not None:
            marking.close()
    if code == 0:
        print(f"{printer.verdicts} verdict(s), {printer.transitions} gang transition(s); state in {state.folder}", file=sys.stderr)
        if marking is not None:
            code = _marking_summary(marking)
    return code


def _marking(show: Callable[[Any], None], rules: Rules, watch: BridgeSettings, mark: Any) -> Any:
    """`run --mark`: the printer's `show`, then each fault marked or skipped (app/run/marking.py)."""
    from app.bridge.client import api_client
    from app.run.marking import MarkingOutput
    from app.mark.kube import PodApi
    from app.mark.marker import Marker
    from app.mark.metrics import MarkMetrics

    api = PodApi(api_client(watch.kubeconfig, watch.context, connections=2))
    marker = Marker(
        api, cluster=watch.cluster, condition_type=mark.mark_condition_type, rules=rules, metrics=MarkMetrics(),
        stop=threading.Event(), concurrency=1, remembered=mark.mark_remembered,
        backoff_initial=watch.backoff_initial, backoff_max=watch.backoff_max, give_up_after=watch.give_up_after,
    )  # fmt: skip
    return MarkingOutput(show, marker)


def _marking_summary(marking: Any) -> int:
    s = marking.marker.metrics.snapshot()
    skipped = ", ".join(f"{n} {reason}" for reason, n in s.skips.items() if n) or "none"
    print(f"{s.marks} pod(s) marked; faults skipped: {skipped}; {s.refused} mark(s) refused", file=sys.stderr)
    if marking.failure is not None:
        return _fail(f"marking stopped: {marking.failure}")
    return 0


def _run_on(
    api: Any, state: RunState, printer: LivePrinter, show: Callable[[Any], None], rules: Rules, watch: BridgeSettings, args: argparse.Namespace
) -> int:
    """Replay the event log (into --out; printed only what an earlier run had not printed
    yet, and handed to `show`), then watch from the saved positions."""
    from app.run.pipeline_sink import PipelineSink
    from app.run.resume import resume
    from app.embedded.pipeline import Pipeline

    pipeline = Pipeline(rules)
    resumed = resume(state, pipeline, printer.keep, show)
    if state.fresh:
        log.info("no saved state in %s: listing the cluster from scratch", state.folder)
        state.positions.where = None  # said here: the bridge need not say it again
    else:
        log.info(
            "replayed %d record(s) from the event log in %s%s; resuming the watches from the saved positions",
            resumed.replayed,
            state.folder,
            f" (observed since {resumed.oldest:%Y-%m-%d %H:%M:%S} UTC)" if resumed.oldest else "",
        )
    sink = PipelineSink(pipeline, show, resumed.log, state.positions, state.delivered.mark)
    try:
        code = _watch(sink, watch, args.duration, args.max_records, api)
    finally:
        sink.close()
    if resumed.log.skipped:
        log.info("%d change(s) the watches sent again were in the event log already: not fed twice", resumed.log.skipped)
    return code
