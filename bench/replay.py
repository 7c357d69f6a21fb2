"""`faultline replay` end to end over a big trace file, against the core fold rate.

    python -m bench.replay [--records N] [--smoke]

The replay runs as a user runs it (a subprocess reading and writing files); the fold
rate is measured in the same run over the same records held in memory.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from app.embedded.pipeline import Pipeline
from bench.tracegen import generate


def write_trace(path: Path, records: int) -> int:
    count = 0
    with path.open("wb") as out:
        for topic, key, value in generate(records):
            out.write(b'{"topic":' + orjson.dumps(topic) + b',"key":' + orjson.dumps(key) + b',"value":' + value + b"}\n")
            count += 1
    return count


def fold_rate(path: Path, limit: int) -> float:
    trace = []
    with path.open("rb") as handle:
        for _, line in zip(range(limit), handle):
            record = orjson.loads(line)
            trace.append((record["topic"], record["key"], orjson.dumps(record["value"])))
    pipeline = Pipeline()
    start = time.perf_counter()
    for topic, key, value in trace:
        pipeline.feed(topic, key, value)
    return len(trace) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--fold-sample", type=int, default=200_000, help="records held in memory for the fold rate")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script still runs")
    args = parser.parse_args()
    records = 3_000 if args.smoke else args.records
    sample = min(records, 1_000 if args.smoke else args.fold_sample)

    with tempfile.TemporaryDirectory() as tmp:
        trace, out = Path(tmp) / "trace.jsonl", Path(tmp) / "out.jsonl"
        n = write_trace(trace, records)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "app", "replay", "--trace", str(trace), "--out", str(out)], check=True)
        replay_s = time.perf_counter() - start
        folded = fold_rate(trace, sample)
        outputs = sum(1 for _ in out.open("rb"))
        size_mb = trace.stat().st_size / 1e6

    replay_rate = n / replay_s
    print(f"records: {n}")
    print(f"trace_mb: {size_mb:.0f}")
    print(f"output_records: {outputs}")
    print(f"replay_records_per_s: {replay_rate:.0f}")
    print(f"fold_records_per_s: {folded:.0f}")
    print(f"ratio_replay_to_fold: {replay_rate / folded:.2f}")
    print(f"summary: replay {replay_rate:.0f} rec/s over {n} records = {replay_rate / folded:.2f}x the core fold rate (target >= 0.8)")


if __name__ == "__main__":
    main()
