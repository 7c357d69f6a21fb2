"""The fleet at scale (issue 17): many failed attempts within the fleet history, on many
nodes, and no table value or output record above 64 KB; with --kafka, the fleet page of
each of two workers in one group shows the same totals as `faultline fleet`.

    python -m bench.fleet_scale [--attempts N] [--nodes M] [--kafka] [--smoke]

- The trace: `bench.tracegen.failed_fleet` (failed attempts, most after a GPU fault, on
  M nodes of 8 GPUs, 20 namespaces, 8 Kueue queues, over 40 h).
- Embedded: `faultline fleet TRACE` (timed, its totals line kept; and over bench.core's
  quiet trace of as many records, its baseline: the failure-heavy rate against it), and the same replay
  in this process measuring every state a stage stores, encoded as a worker's table
  entry (`app.stream.codecs`), and every output record value as a worker writes it.
- --kafka: the trace published to a real broker ($FAULTLINE_KAFKA_BOOTSTRAP, else a
  local one), two `faultline worker`s in one group; once the group has processed every
  record, each worker's `/fleet/api/fleet` rendered as `faultline fleet` renders its
  totals line must equal the command's; the largest record of every topic of the run
  (changelogs included) is read back from the broker.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec
import orjson

from app.cli.fleet import replay_counted
from app.cli.render import fleet_lines
from app.core.fleet.summary import FleetSummary
from app.core.fleet.view import LiveFleet
from app.core.base.rules import DEFAULT_RULES, Rules
from app.core.engine.topology import Stage
from app.embedded.pipeline import Pipeline
from app.replay.trace import read_lines
from app.core.engine.runner import Out, Write, encoded
from app.stream.codecs import COMPRESS_OVER, Entry, Position, Sent, encode
from bench.tracegen import failed_fleet, generate

LIMIT = 64 * 1024  # no table value and no record above this (issue 17)
ROOT = Path(__file__).resolve().parents[1]


class Largest(msgspec.Struct):
    """The largest value seen per name (a topic or a stage), and the key that had it."""

    bytes: dict[str, int] = {}
    keys: dict[str, str] = {}

    def see(self, name: str, key: str, size: int) -> None:
        if size > self.bytes.get(name, -1):
            self.bytes[name], self.keys[name] = size, key

    def top(self) -> int:
        return max(self.bytes.values(), default=0)

    def lines(self, what: str) -> list[str]:
        return [f"max_{what}_bytes[{name}]: {size} ({self.keys[name]})" for name, size in sorted(self.bytes.items())]


class MeasuredPipeline(Pipeline):
    """The embedded pipeline, noting the size of every state it stores as a worker's
    table stores it: an `Entry` (the state, its table partition, the position of the
    last record folded per input topic-partition, and its outbox: the records the fold
    caused) in the table codec."""

    def __init__(self, rules: Rules = DEFAULT_RULES, partitions: int = 4) -> None:
        super().__init__(rules)
        self.partitions = partitions
        self.states_largest = Largest()

    def _store(self, stage: Stage, write: Write, caused: list[Out]) -> None:
        super()._store(stage, write, caused)
        # One position per topic-partition that can feed a key: a stage's inputs, each
        # read from one partition by key (a progress record from each of them).
        positions = {f"{topic}:{p}": Position(10**12, 999) for topic in stage.topics for p in range(self.partitions)}
        cause = "t" * 200 + ":9999:999999999999"  # a long topic name, the largest partition and offset
        outbox = [Sent(f"{'t' * 200}.{out.emit.topic}", out.emit.key, msgspec.Raw(encoded(out)), None, cause, cause) for out in caused]
        entry = encode(Entry(self.partitions - 1, positions, write.state, outbox))
        size = len(entry) if len(entry) <= COMPRESS_OVER else len(zlib.compress(entry, 1))  # as the table writes it
        self.states_largest.see(stage.name, write.key, size)


class Embedded(msgspec.Struct):
    states: Largest
    records: Largest
    summary: FleetSummary
    records_in: int


def measure_embedded(trace: Path, rules: Rules = DEFAULT_RULES) -> Embedded:
    """`faultline fleet`'s replay (app/cli/fleet.py) in this process, measuring every
    stored state and every output record value."""
    pipeline = MeasuredPipeline(rules)
    live = LiveFleet(rules.fleet)
    records = Largest()
    for emit in replay_counted(read_lines(trace), pipeline, live):
        live.observe(emit)
        records.see(emit.topic, emit.key, len(encode(emit.value)))
    return Embedded(pipeline.states_largest, records, live.summary(), pipeline.counts["records"])


def write_trace(path: Path, attempts: int, nodes: int, *, seed: int = 1, **kw: Any) -> Path:
    """The scale trace as a trace file (`{"topic", "key", "value"}` lines)."""
    with path.open("wb") as out:
        for topic, key, value in failed_fleet(attempts, nodes, seed=seed, **kw):
            out.write(b'{"topic":%s,"key":%s,"value":%s}\n' % (orjson.dumps(topic), orjson.dumps(key), value))
    return path


def write_quiet_trace(path: Path, records: int) -> Path:
    """bench.core's trace (~3 % of attempts fail) of `records` records, as a trace file."""
    with path.open("wb") as out:
        for topic, key, value in generate(records):
            out.write(b'{"topic":%s,"key":%s,"value":%s}\n' % (orjson.dumps(topic), orjson.dumps(key), value))
    return path


def totals_line(summary: FleetSummary) -> str:
    """The totals as `faultline fleet` prints them (its second line)."""
    return fleet_lines(summary)[1]


def fleet_command(trace: Path, *flags: str) -> tuple[str, float]:
    """`faultline fleet TRACE`: its totals line, and the CPU seconds it took (user and
    system: on a shared machine, the time it waited for a core is not its cost)."""
    started = _children_cpu()
    result = subprocess.run([sys.executable, "-m", "app", "fleet", str(trace), *flags], cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"faultline fleet exited {result.returncode}: {result.stderr[-2000:]}")
    return result.stdout.splitlines()[1], _children_cpu() - started


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # of the children waited for
    return usage.ru_utime + usage.ru_stime


def page_totals(port: int) -> str:
    """A worker's `/fleet/api/fleet`, its totals rendered as `faultline fleet` does; '' while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/fleet/api/fleet", timeout=10) as response:
            return totals_line(msgspec.json.decode(response.read(), type=FleetSummary))
    except OSError:
        return ""


def wait_for_totals(ports: Iterable[int], want: str, timeout: float, alive: Callable[[], None] = lambda: None) -> dict[int, str]:
    """Each port's totals line once every one shows `want` (polled), else the last seen."""
    deadline = time.monotonic() + timeout
    seen: dict[int, str] = {}
    while True:
        alive()
        seen = {port: page_totals(port) for port in ports}
        if all(line == want for line in seen.values()) or time.monotonic() > deadline:
            return seen
        time.sleep(0.5)


def largest_records(bootstrap: str, prefix: str) -> Largest:
    """The largest record value of every topic whose name starts with `prefix`, read from its beginning to its end now."""
    from kafka import KafkaConsumer, TopicPartition

    largest = Largest()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_partition_fetch_bytes=8 << 20)
    try:
        tps = [TopicPartition(t, p) for t in sorted(consumer.topics()) if t.startswith(prefix) for p in sorted(consumer.partitions_for_topic(t) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 600
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for tp, batch in consumer.poll(timeout_ms=500, max_records=10_000).items():
                for r in batch:
                    largest.see(tp.topic[len(prefix):], (r.key or b"").decode("utf-8", "replace"), len(r.value or b""))
        return largest
    finally:
        consumer.close()


# --- the two workers on a broker ----------------------------------------------------------------


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""


def records_read(port: int) -> int:
    """The records a worker read itself: its /metrics `faultline_records_total`, every
    stage input (re-keyed records, and progress once per partition, included)."""
    return sum(int(n) for n in re.findall(r"^faultline_records_total\{[^}]*\} (\d+)$", _metrics(port), re.MULTILINE))


class WorkersRun(msgspec.Struct):
    pages: dict[int, str]  # web port -> the totals line of its /fleet/api/fleet
    read: dict[int, int]  # web port -> records it read (`records_read`)
    largest: Largest  # the largest record of every topic of the run, changelogs included
    seconds: float  # from publishing to every page showing the totals


def run_workers(bootstrap: str, trace: Path, want: str, tmp: Path, workers: int = 2, timeout: float = 3600) -> WorkersRun:
    """`workers` workers in one group (all in it before anything is published), the
    trace published, processed until the group has committed every stage input, then
    each worker's page totals (awaited until they show `want`, for at most a minute),
    what each read and the largest record of every topic."""
    import uuid

    from bench.pipeline import PARTITIONS, GroupLag, free_port, stage_inputs, start_worker, stop_worker

    prefix = f"fs{uuid.uuid4().hex[:6]}."
    group = f"{prefix}faultline"
    flags = ["--bootstrap", bootstrap, "--topic-prefix", prefix, "--partitions", str(PARTITIONS)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}

    def faultline(*command: str) -> None:
        subprocess.run([sys.executable, "-m", "app", *command, *flags], cwd=ROOT, env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)

    faultline("topics", "create")
    ports = [free_port() for _ in range(workers)]
    logs = [tmp / f"{prefix}w{i}.log" for i in range(workers)]
    procs = [start_worker(bootstrap, prefix, tmp / f"{prefix}w{i}", log, f"w{i}", port, ["--store", "memory"]) for i, (port, log) in enumerate(zip(ports, logs))]
    group_of = GroupLag(bootstrap)
    deadline = time.monotonic() + timeout

    def alive() -> None:
        for proc, log in zip(procs, logs):
            if proc.poll() is not None:
                raise SystemExit(f"a worker exited {proc.returncode}: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the workers did not process the trace in {timeout:.0f} s")

    try:
        while group_of.members(group) < workers:
            alive()
            time.sleep(0.5)
        started = time.perf_counter()
        faultline("publish", str(trace))
        while group_of(group, stage_inputs(prefix)) > 0:
            alive()
            time.sleep(0.5)
        pages = wait_for_totals(ports, want, 60, alive)
        took = time.perf_counter() - started
        return WorkersRun(pages, {port: records_read(port) for port in ports}, largest_records(bootstrap, prefix), took)
    finally:
        group_of.close()
        for proc in procs:
            stop_worker(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=100_000, help="failed attempts (default 100,000)")
    parser.add_argument("--nodes", type=int, default=2_000, help="nodes (default 2,000)")
    parser.add_argument("--kafka", action="store_true", help="also run two workers on a broker and compare their pages")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the test suite runs it)")
    args = parser.parse_args()
    attempts, nodes = (300, 40) if args.smoke else (args.attempts, args.nodes)

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        started = time.perf_counter()
        trace = write_trace(tmp_path / "fleet.jsonl", attempts, nodes)
        made = time.perf_counter() - started
        want, fleet_seconds = fleet_command(trace)
        started = time.perf_counter()
        embedded = measure_embedded(trace)
        measured = time.perf_counter() - started
        same = totals_line(embedded.summary) == want
        quiet = write_quiet_trace(tmp_path / "quiet.jsonl", embedded.records_in)
        _, quiet_seconds = fleet_command(quiet)
        heavy_rate, quiet_rate = embedded.records_in / fleet_seconds, embedded.records_in / quiet_seconds
        print(f"attempts: {attempts}")
        print(f"nodes: {nodes}")
        print(f"trace_records: {embedded.records_in} ({trace.stat().st_size / 1e6:.0f} MB, made in {made:.1f} s)")
        print(f"fleet_command_cpu_seconds: {fleet_seconds:.1f} ({heavy_rate:.0f} records/s of CPU time)")
        print(f"quiet_fleet_command_cpu_seconds: {quiet_seconds:.1f} ({quiet_rate:.0f} records/s of CPU time; bench.core's trace, as many records)")
        print(f"ratio_failure_heavy_to_quiet: {heavy_rate / quiet_rate:.2f} (target >= 0.4 at 100,000 on 2,000 nodes, issue 37)")
        print(f"fleet_totals: {want}")
        print(f"embedded_measured_seconds: {measured:.1f} (the same replay, every state and record encoded)")
        print(f"embedded_totals_equal: {same}")
        for line in embedded.states.lines("state") + embedded.records.lines("record"):
            print(line)
        worst = max(embedded.states.top(), embedded.records.top())
        summary = f"summary: {attempts} failed attempts on {nodes} nodes: {heavy_rate:.0f} records/s = {heavy_rate / quiet_rate:.2f}x the quiet trace's; largest state {embedded.states.top()} B, largest record {embedded.records.top()} B"
        if args.kafka:
            from bench.broker import kafka

            with kafka() as bootstrap:
                run = run_workers(bootstrap, trace, want, tmp_path)
            for port, line in run.pages.items():
                print(f"page_totals[127.0.0.1:{port}]: {line} ({run.read[port]} records read by this worker, stage inputs all)")
            same = same and all(line == want for line in run.pages.values())
            print(f"workers_equal_fleet_command: {same}")
            print(f"workers_seconds: {run.seconds:.1f} (two workers, from publishing to both pages showing the totals)")
            for line in run.largest.lines("broker_record"):
                print(line)
            worst = max(worst, run.largest.top())
            summary += f", largest record on the broker {run.largest.top()} B (changelogs included); two workers' pages {'==' if same else '!='} `faultline fleet`"
        print(f"{summary} (limit {LIMIT} B: {'met' if worst <= LIMIT and same else 'NOT met'})")


if __name__ == "__main__":
    main()
