"""A story recorded by the bridge across an API server outage (issue 29), for the tests to
assert on and to reuse.

`record_through_outage` plays the first part of a story on the real API server while the
bridge records it into a trace file, stops the API server for a while (the bridge's
retry delay grows meanwhile), starts it again, plays the second part at once (as
controllers reconnecting do, while the bridge is still coming back), waits until every
watch is live again, plays the rest, and returns an `OutageRecording`: the trace exactly
as `faultline record` writes it (source changes and progress records, in the order the
sink got them), the gap markers, each write with its resourceVersion and bridge-clock
time, and the outage's timings. Tests read it, replay the trace through the rules
(`recording.lines()`, `faultline classify recording.trace`), or add their own checks.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import orjson

from app.bridge.bridge import Bridge
from app.bridge.records import BridgeGap, now_us, rfc3339_us
from app.bridge.settings import BridgeSettings
from app.bridge.sinks import TraceSink
from tests.bridge.helpers import Operation, Running, wait_for
from tests.bridge.realkube import StoryPlayer, namespace

log = logging.getLogger("tests.outage")

PHASES = ("before", "at_comeback", "after")


class GapKeepingSink(TraceSink):
    """`faultline record`'s trace sink, keeping the gap markers the trace leaves out."""

    def __init__(self, out: IO[bytes]) -> None:
        super().__init__(out)
        self.gaps: list[BridgeGap] = []

    def publish_gap(self, gap: BridgeGap) -> None:
        self.gaps.append(gap)


@dataclass
class Write:
    """One API call of the story that changed an object (one watch event)."""

    phase: str
    op: str  # create | update | delete
    kind: str
    name: str
    resource_version: str  # as served after the write ("" for a delete)
    at: str  # bridge clock, RFC 3339 with microseconds, right after the server answered


@dataclass
class OutageRecording:
    trace: Path  # JSON Lines {"topic","key","value"}: what the bridge published, progress records included
    namespace: str
    gaps: list[dict[str, Any]]  # the gap markers (faultline.BridgeGap/v1), in order
    writes: list[Write]
    stopped_at: str  # the API server was told to stop (bridge clock)
    ready_at: str  # its /readyz answered 200 again
    live_at: str  # every watch of the bridge was live again
    live_after: float  # seconds from ready_at to live_at
    down_seconds: float  # from stopped_at to ready_at
    comebacks: dict[str, int] = field(default_factory=dict)  # per watch: retries cut short by the probe
    log_lines: list[str] = field(default_factory=list)  # the bridge's log during the whole recording

    def lines(self) -> list[dict[str, Any]]:
        """The trace's lines, decoded (`tests.unit.scenario.run` takes them)."""
        return [orjson.loads(line) for line in self.trace.read_bytes().splitlines()]

    def changes(self) -> list[dict[str, Any]]:
        """The source records (no progress records)."""
        return [line for line in self.lines() if line["value"]["type"] != "BOOKMARK"]

    def seen(self) -> set[tuple[str, str]]:
        """(name, resourceVersion) of every change the trace holds."""
        return {(c["value"]["object"]["metadata"]["name"], c["value"]["object"]["metadata"]["resourceVersion"]) for c in self.changes()}

    def unseen(self, phase: str) -> list[Write]:
        """The writes of `phase` whose state is not in the trace as a record of its own:
        intermediate states a relist folded into its net result."""
        seen = self.seen()
        return [w for w in self.writes if w.phase == phase and w.op != "delete" and (w.name, w.resource_version) not in seen]

    def save(self, path: Path) -> Path:
        """Everything but the trace as JSON, beside it (the trace path is in it)."""
        data = asdict(self)
        data["trace"] = str(self.trace)
        path.write_text(json.dumps(data, indent=1) + "\n")
        return path


class RecordingPlayer(StoryPlayer):
    """A StoryPlayer that notes each write's resourceVersion and time."""

    def __init__(self, kube: Any, ns: str) -> None:
        super().__init__(kube, ns)
        self.phase = PHASES[0]
        self.writes: list[Write] = []

    def _write(self, method: str, path: str, body: Any, plural: str, name: str) -> dict[str, Any]:
        before = self.changes
        served = super()._write(method, path, body, plural, name)
        if self.changes != before:
            op = "create" if method == "POST" else "update"
            self.writes.append(Write(self.phase, op, served.get("kind", plural), name, served["metadata"]["resourceVersion"], rfc3339_us(now_us())))
        return served

    def _delete(self, plural: str, name: str) -> None:
        super()._delete(plural, name)
        self.writes.append(Write(self.phase, "delete", plural, name, "", rfc3339_us(now_us())))


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def record_through_outage(
    kube: Any,
    api: Any,
    phases: dict[str, list[Operation] | Callable[[], list[Operation]]],
    out: Path,
    settings: BridgeSettings,
    *,
    down_seconds: float = 10.0,
    live_timeout: float = 60.0,
) -> OutageRecording:
    """Play `phases["before"]` while the bridge (`settings`, in a new namespace: give
    none in `settings.namespaces`, it is set here) records into `out`; stop the API server
    for `down_seconds`; start it; play `phases["at_comeback"]` at once; wait for every
    watch to be live; play `phases["after"]`; wait until the trace holds every change;
    stop the bridge. A phase may be a function returning its operations, called when the
    phase is played: a story whose objects carry the times of the clock it is played by."""
    ns = namespace(kube, "outage")
    settings = msgspec.structs.replace(settings, namespaces=ns)
    handler = _Collect()
    bridge_log = logging.getLogger("faultline.bridge")
    bridge_log.addHandler(handler)
    level = bridge_log.level
    bridge_log.setLevel(logging.INFO)
    player = RecordingPlayer(kube, ns)
    with out.open("wb") as stream:
        sink = GapKeepingSink(stream)
        running = Running(Bridge(api, sink, settings))
        try:
            bridge = running.bridge
            wait_for(lambda: bridge.watches and all(w.progress.live for w in bridge.watches), timeout=60, what="every watch live")
            player.play_operations(_operations(phases, "before"))
            expected = player.changes
            wait_for(lambda: sink.written >= expected, timeout=30, what=f"the {expected} changes before the outage")

            stopped = now_us()
            kube.stop_apiserver()
            time.sleep(down_seconds)  # the API server is down: nothing to wait for
            kube.start_apiserver()  # returns once /readyz answers 200
            ready = now_us()
            player.phase = "at_comeback"
            player.play_operations(_operations(phases, "at_comeback"))
            wait_for(lambda: all(w.progress.live for w in bridge.watches), timeout=live_timeout, what="every watch live again")
            live = now_us()
            player.phase = "after"
            player.play_operations(_operations(phases, "after"))
            last = {w.name: w.resource_version for w in player.writes if w.op != "delete"}
            wait_for(lambda: all((name, rv) in _seen_names(out) for name, rv in last.items()), timeout=30, what="every object's last state")
            running.stop()
        finally:
            bridge_log.removeHandler(handler)
            bridge_log.setLevel(level)
    return OutageRecording(
        trace=out,
        namespace=ns,
        gaps=[msgspec.to_builtins(g) for g in sink.gaps],
        writes=player.writes,
        stopped_at=rfc3339_us(stopped),
        ready_at=rfc3339_us(ready),
        live_at=rfc3339_us(live),
        live_after=(live - ready) / 1e6,
        down_seconds=(ready - stopped) / 1e6,
        comebacks={w.name: w.counts["comebacks"] for w in running.bridge.watches},
        log_lines=handler.lines,
    )


def _operations(phases: dict[str, list[Operation] | Callable[[], list[Operation]]], phase: str) -> list[Operation]:
    ops = phases.get(phase, [])
    return ops() if callable(ops) else ops


def _seen_names(trace: Path) -> set[tuple[str, str]]:
    seen = set()
    for line in trace.read_bytes().split(b"\n")[:-1]:  # complete lines only: the sink may be writing
        value = orjson.loads(line)["value"]
        if value["type"] != "BOOKMARK":
            meta = value["object"]["metadata"]
            seen.add((meta["name"], meta["resourceVersion"]))
    return seen
