"""Workers killed on a real broker, against the offline replay of the same trace (issue 23).

    python -m bench.kills [--runs 5] [--kills 10] [--attempts 800] [--store rocksdb]
    python -m bench.kills --group [--runs 3] [--down 120] [--attempts 800]

- one worker: a generated trace (every kind of attempt, repeating faults, Kueue gangs,
  workload attempts) is published in chunks while one `faultline worker` runs; it is
  SIGKILLed `--kills` times at random moments and started again each time;
- `--group`: three workers in one group; once they have started, one is SIGKILLed and
  kept down `--down` seconds (its partitions move to the others after the session
  timeout), then started again, while the trace is published in chunks.

Each run then waits until every input record was processed and compares, with the offline
replay (`faultline replay`'s pipeline) of the whole trace: the latest verdict, fault, gang
transition, stuck readmission and derived record per key (a verdict's `revision` aside: it
counts emissions), each gang's whole chain of transitions (and whether the streamed one
chains), the readmissions, and the dead letters. Prints one line per run and
the totals; every count should be 0. Not a benchmark of speed: a harness of exactness,
kept here with the other measurements that need a broker and minutes.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))  # the streaming stack the broker tests use

from conftest import Outputs, StreamStack  # noqa: E402
from test_stream_fleet import _order_free  # noqa: E402  (derived records compared as the broker test does)
from trace_gen import generate, write_trace  # noqa: E402

from app.core.engine.topology import OUTPUT_TOPICS  # noqa: E402
from app.model.fleet_records import DERIVED_TOPICS  # noqa: E402
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, GANG_TRANSITIONS  # noqa: E402
from app.embedded.pipeline import Pipeline  # noqa: E402
from app.replay.trace import read_lines, replay  # noqa: E402
from app.stream.codecs import encode  # noqa: E402
from bench.broker import kafka  # noqa: E402


def _latest(records: Iterable[tuple[str, str, bytes]]) -> dict[tuple[str, str], Any]:
    """The latest value per (topic, key), revision aside; dead letters apart."""
    out: dict[tuple[str, str], Any] = {}
    for topic, key, value in records:
        if topic == DEAD_LETTER:
            continue
        decoded = orjson.loads(value)
        if isinstance(decoded, dict):
            decoded.pop("revision", None)
        out[(topic, key)] = decoded
    return out


def _readmissions(records: Iterable[tuple[str, str, bytes]]) -> set[bytes]:
    return {value for topic, _, value in records if topic == GANG_TRANSITIONS and b'"from":"WaitingForReadmission","to":"Running"' in value}


def _offline(trace: Path) -> list[tuple[str, str, bytes]]:
    return [(e.topic, e.key, encode(e.value)) for e in replay(read_lines(trace), Pipeline())]


def _streamed(stack: StreamStack) -> list[tuple[str, str, bytes]]:
    return [(topic, r.key.decode(), r.value) for topic in OUTPUT_TOPICS for r in stack.read(topic)]


def compare(expected: list[tuple[str, str, bytes]], got: list[tuple[str, str, bytes]], stack: StreamStack) -> dict[str, int]:
    """What differs, by what people read: verdicts, faults, gangs, readmissions, derived."""
    want, have = _latest(expected), _latest(got)
    differ: dict[str, int] = {"verdicts": 0, "faults": 0, "gangs": 0, "stuck": 0, "derived": 0}
    derived = set(DERIVED_TOPICS)
    for key in (want.keys() | have.keys()) - {k for k in want.keys() | have.keys() if k[0] in derived}:
        if want.get(key) == have.get(key):
            continue
        topic = key[0]
        what = {CLASSIFIED_FAILURES: "verdicts", GANG_TRANSITIONS: "gangs"}.get(topic)
        what = what or ("faults" if topic.endswith(".faults") else "stuck")
        differ[what] += 1
        _show(key, want.get(key), have.get(key))
    # Derived records as the broker's fleet test compares them: the latest per key, counts
    # back at zero aside, a quarantine record by what it decides.
    want_derived = _order_free({k: v for k, v in want.items() if k[0] in derived})
    have_derived = _order_free({k: v for k, v in have.items() if k[0] in derived})
    differ["derived"] = 0
    for k in want_derived.keys() | have_derived.keys():
        if want_derived.get(k) != have_derived.get(k):
            differ["derived"] += 1
            _show(k, want_derived.get(k), have_derived.get(k))
    differ["readmissions"] = len(_readmissions(expected) ^ _readmissions(got))
    # Each gang's whole chain of transitions, not just its last: a chain with a hole can
    # end on the right state (a lost Pending -> Running before a right Running -> Failed).
    want_chains, have_chains = Outputs._transitions(expected), Outputs._transitions(got)
    differ["chains"] = 0
    for key in want_chains.keys() | have_chains.keys():
        if want_chains.get(key) != have_chains.get(key):
            differ["chains"] += 1
            _show((GANG_TRANSITIONS, key), [orjson.loads(v) for v in want_chains.get(key, [])], [orjson.loads(v) for v in have_chains.get(key, [])])
    differ["broken_chains"] = len(Outputs._broken_chains(got))
    letters = Outputs._letters([v for t, _, v in expected if t == DEAD_LETTER])
    streamed = Outputs._letters([v for t, _, v in got if t == DEAD_LETTER], stack.prefix)
    differ["dead_letters"] = len(set(letters) ^ set(streamed))
    return differ


def _show(key: Any, offline: Any, streamed: Any) -> None:
    """What differs for one key, field by field (stderr), so a run that differs says where."""
    if isinstance(offline, dict) and isinstance(streamed, dict):
        fields = {f: (offline.get(f), streamed.get(f)) for f in offline.keys() | streamed.keys() if offline.get(f) != streamed.get(f)}
        print(f"  differs {key}: (offline, streamed) {fields}", file=sys.stderr)
    else:
        print(f"  differs {key}: offline {offline!r:.300} streamed {streamed!r:.300}", file=sys.stderr)


def _chunks(records: list[dict], parts: int) -> list[list[dict]]:
    size = max(1, len(records) // parts)
    return [records[i : i + size] for i in range(0, len(records), size)]


def _setup(bootstrap: str, tmp: Path, attempts: int, seed: int) -> tuple[list[dict], list[tuple[str, str, bytes]], StreamStack]:
    """The trace's records, what the offline replay writes of them, and a stack of topics of its own."""
    records = generate(attempts=attempts, seed=seed)
    expected = _offline(write_trace(tmp / "all.jsonl", records))
    stack = StreamStack(bootstrap, f"k{uuid.uuid4().hex[:8]}.", tmp)
    stack.create_topics()
    return records, expected, stack


def one_worker(bootstrap: str, tmp: Path, *, attempts: int, kills: int, store: str, seed: int) -> tuple[dict[str, int], int]:
    rng = random.Random(seed)
    records, expected, stack = _setup(bootstrap, tmp, attempts, seed)
    try:
        worker = stack.start_worker("w1", store=store)
        chunks = _chunks(records, kills + 1)
        for i, chunk in enumerate(chunks):
            stack.publish(write_trace(tmp / f"chunk-{i}.jsonl", chunk))
            if i < kills:
                time.sleep(rng.uniform(0.5, 6.0))  # a random moment of its work
                stack.kill(worker)
                worker = stack.start_worker("w1", store=store)
        stack.wait_settled(timeout=900)
        return compare(expected, _streamed(stack), stack), kills
    finally:
        stack.stop_all()


def group(bootstrap: str, tmp: Path, *, attempts: int, down: float, seed: int) -> tuple[dict[str, int], int]:
    records, expected, stack = _setup(bootstrap, tmp, attempts, seed)
    try:
        workers = [stack.start_worker(f"w{n}") for n in (1, 2, 3)]
        chunks = _chunks(records, 4)
        stack.publish(write_trace(tmp / "chunk-0.jsonl", chunks[0]))
        time.sleep(5)
        victim = workers[1]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=30)
        started = time.monotonic()
        for i, chunk in enumerate(chunks[1:], 1):
            stack.publish(write_trace(tmp / f"chunk-{i}.jsonl", chunk))
            time.sleep(down / len(chunks))
        time.sleep(max(0.0, down - (time.monotonic() - started)))
        stack.start_worker("w2")
        stack.wait_settled(timeout=900)
        return compare(expected, _streamed(stack), stack), 1
    finally:
        stack.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", action="store_true", help="three workers, one killed and kept down")
    parser.add_argument("--runs", type=int, default=None, help="runs (default 5, or 3 with --group)")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs per run of one worker")
    parser.add_argument("--down", type=float, default=120.0, help="seconds the killed worker of the group stays down")
    parser.add_argument("--attempts", type=int, default=800, help="attempts in the generated trace")
    parser.add_argument("--store", choices=("rocksdb", "memory"), default="rocksdb")
    parser.add_argument("--keep", metavar="DIR", help="keep each run's folder (worker logs, traces) under DIR")
    parser.add_argument("--seed", type=int, default=100, help="the first run's seed (run n: seed + n)")
    args = parser.parse_args()
    runs = args.runs if args.runs is not None else (3 if args.group else 5)
    totals: dict[str, int] = {}
    with kafka() as bootstrap:
        for run in range(runs):
            with tempfile.TemporaryDirectory(dir=args.keep) as tmp:
                if args.keep:
                    tmp = tempfile.mkdtemp(dir=args.keep, prefix=f"run{run + 1}-")
                started = time.monotonic()
                if args.group:
                    differ, killed = group(bootstrap, Path(tmp), attempts=args.attempts, down=args.down, seed=args.seed + run)
                else:
                    differ, killed = one_worker(bootstrap, Path(tmp), attempts=args.attempts, kills=args.kills, store=args.store, seed=args.seed + run)
                for k, v in differ.items():
                    totals[k] = totals.get(k, 0) + v
                shown = " ".join(f"{k}={v}" for k, v in differ.items())
                print(f"run {run + 1}: {killed} kill(s), {time.monotonic() - started:.0f} s, differing: {shown}", flush=True)
    print("total differing: " + " ".join(f"{k}={v}" for k, v in totals.items()))
    sys.exit(1 if any(totals.values()) else 0)


if __name__ == "__main__":
    main()
