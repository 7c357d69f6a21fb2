"""The cost of `faultline run`'s event log (app/run/event_log.py) and of its fsync policy.

    python -m bench.run_log [--records N] [--dir DIR] [--smoke]

Appends the same generated records (bench/tracegen.py: ~3 KB pods, events, jobs) to an
event log under each policy and to a plain buffered file (what `faultline record` does:
the baseline), in the same run, on the file system of `--dir` (default: a temporary
folder in the current one; a tmpfs would make fsync free):

- `checkpoint`: the policy `run` uses. Every record is handed to the OS (as when each
  caused an output: the worst case) and the log is fsynced once per checkpoint interval
  (1 s of wall clock), before the positions are saved.
- `no-fsync`: handed to the OS per record, never fsynced (survives a kill -9, not a
  power loss).
- `every-record`: fsynced after each record (survives a power loss with nothing to
  replay; what the checkpoint policy avoids).

Each policy's rate is printed with its ratio to `no-fsync`. Then what a restart costs:
the log replayed through the pipeline (as `run` does on start), against the pipeline fed
the same records from memory.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import orjson

from app.bridge.sinks import trace_line
from app.run.event_log import EventLog
from app.embedded.pipeline import Pipeline
from app.replay.trace import feed_line
from bench.tracegen import generate

CHECKPOINT = 1.0
PLACEHOLDER = b'"resource-version"'


def stamped(records: list[tuple[str, str, bytes]]) -> list[tuple[str, str, bytes]]:
    """The records with a placeholder where each change gets its resourceVersion."""
    out = []
    for topic, key, value in records:
        envelope = orjson.loads(value)
        if envelope["type"] != "BOOKMARK":
            envelope["object"]["metadata"]["resourceVersion"] = PLACEHOLDER.decode().strip('"')
        out.append((topic, key, orjson.dumps(envelope)))
    return out


def plain(folder: Path, records: list[tuple[str, str, bytes]]) -> float:
    start = time.perf_counter()
    with (folder / "trace.jsonl").open("wb") as out:
        for topic, key, value in records:
            out.write(trace_line(topic, key, value))
    return len(records) / (time.perf_counter() - start)


def logged(folder: Path, records: list[tuple[str, str, bytes]], policy: str, seconds: float) -> float:
    """Records/s appended under `policy`, over at most `seconds` (the records again and
    again, with fresh resourceVersions, so none is a duplicate)."""
    log = EventLog(folder, timedelta(hours=6))
    list(log.lines())
    start = time.perf_counter()
    next_sync = start + CHECKPOINT
    done = 0
    while True:
        for topic, key, value in records:
            done += 1  # a new revision, as etcd stamps each change
            assert log.append(topic, key, value.replace(PLACEHOLDER, b'"%d"' % done))
            if policy == "every-record":
                log.sync()
                continue
            log.flush()
            if policy == "checkpoint" and time.perf_counter() >= next_sync:
                log.sync()
                next_sync = time.perf_counter() + CHECKPOINT
        if time.perf_counter() - start >= seconds:
            break
    log.close()
    return done / (time.perf_counter() - start)


def replayed(folder: Path, records: list[tuple[str, str, bytes]]) -> tuple[float, float]:
    """(records/s replaying a log of `records` into a pipeline, records/s feeding them
    from memory)."""
    log = EventLog(folder, timedelta(hours=6))
    list(log.lines())
    for done, (topic, key, value) in enumerate(records, start=1):
        log.append(topic, key, value.replace(PLACEHOLDER, b'"%d"' % done))
    log.close()
    start = time.perf_counter()
    pipeline = Pipeline()
    count = 0
    for index, line in EventLog(folder, timedelta(hours=6)).lines():
        feed_line(pipeline, index, line)
        count += 1
    replay_rate = count / (time.perf_counter() - start)
    pipeline = Pipeline()
    start = time.perf_counter()
    for done, (topic, key, value) in enumerate(records, start=1):
        pipeline.feed(topic, key, value.replace(PLACEHOLDER, b'"%d"' % done))
    return replay_rate, len(records) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each policy appends")
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where to write (its file system is measured)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script still runs")
    args = parser.parse_args()
    count = 2_000 if args.smoke else args.records
    seconds = 0.2 if args.smoke else args.seconds
    records = list(generate(count))
    size = sum(len(v) for _, _, v in records) / len(records)
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="faultline-bench-log-", dir=args.dir) as tmp:
        rates["plain"] = plain(Path(tmp), records)
        for policy in ("no-fsync", "checkpoint", "every-record"):
            folder = Path(tmp) / policy
            rates[policy] = logged(folder, stamped(records), policy, seconds / 4 if policy == "every-record" else seconds)
            shutil.rmtree(folder)
        replay_rate, fold_rate = replayed(Path(tmp) / "replay", stamped(records))
    print(f"records: {count}")
    print(f"record_bytes: {size:.0f}")
    for name, rate in rates.items():
        print(f"{name}_records_per_s: {rate:.0f}")
    for name in ("checkpoint", "every-record"):
        print(f"ratio_{name.replace('-', '_')}_to_no_fsync: {rates[name] / rates['no-fsync']:.2f}")
    print(f"replay_records_per_s: {replay_rate:.0f}")
    print(f"fold_records_per_s: {fold_rate:.0f}")
    print(f"ratio_replay_to_fold: {replay_rate / fold_rate:.2f}")
    print(
        f"summary: event log {rates['checkpoint']:.0f} rec/s with an fsync per checkpoint = {rates['checkpoint'] / rates['no-fsync']:.2f}x "
        f"without fsync ({rates['no-fsync']:.0f}/s; a plain trace file {rates['plain']:.0f}/s); an fsync per record: {rates['every-record']:.0f}/s; "
        f"replayed on start at {replay_rate:.0f} rec/s = {replay_rate / fold_rate:.2f}x the pipeline fed from memory"
    )


if __name__ == "__main__":
    main()
