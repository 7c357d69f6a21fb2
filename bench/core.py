"""Core fold throughput against bare msgspec decoding of the same records.

    python -m bench.core [--records N] [--smoke]

Prints `name: value` lines and one summary line. The baseline (decode) is measured in
the same run, so the ratio means something on a noisy machine: rates are per second of
this process's CPU time, the best of `--runs` rounds that each time every variant in turn. The same number of
records with workload attempts and CPU-only CronJob Jobs (SPEC R13, `generate(...,
workloads=True)`) is folded in the same run too, against the trace without them.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any

import msgspec

from app.model.decode import decode_source
from app.embedded.pipeline import Pipeline
from bench.tracegen import generate


def _best_of_each(runs: int, *fns: Callable[[], None]) -> list[float]:
    """Each function's best CPU time over `runs` rounds, the functions taken in turn in
    every round: a load that comes and goes on a shared machine then weighs on the
    baseline and the fold alike, and CPU time leaves out the time spent waiting for a core."""
    best = [float("inf")] * len(fns)
    for _ in range(runs):
        for i, fn in enumerate(fns):
            gc.collect()
            start = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - start)
    return best


def _no_fold(state: Any, _key: str, _record: Any, _rules: Any, _marks: Any) -> tuple[Any, list[Any]]:
    return state, []


def state_bytes(pipeline: Pipeline) -> int:
    encode = msgspec.msgpack.encode
    return sum(len(encode(s)) for s in pipeline.states["pods"].values()) + sum(len(encode(s)) for s in pipeline.states["attempts"].values())


def _workload_state(pipeline: Pipeline) -> tuple[int, int, int]:
    """(workload attempts kept, their attempt-stage bytes, the pod-stage bytes of their pods)."""
    encode = msgspec.msgpack.encode
    states = [s for s in pipeline.states["attempts"].values() if s.identity is not None and s.identity.kind]
    uids = {uid for s in states for uid in s.pods}
    pods = sum(len(encode(s)) for s in pipeline.states["pods"].values() if s.uid in uids)
    return len(states), sum(len(encode(s)) for s in states), pods


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script still runs")
    args = parser.parse_args()
    records = 2_000 if args.smoke else args.records
    runs = 1 if args.smoke else args.runs

    trace = list(generate(records))
    n = len(trace)

    def decode_all() -> None:  # the typed decode into the slim views the fold reads
        for topic, _, value in trace:
            decode_source(topic, value)

    bare = msgspec.json.decode

    def bare_decode_all() -> None:  # what any consumer pays just to read a record
        for _, _, value in trace:
            bare(value)

    def fold_all() -> None:
        pipeline = Pipeline()
        for topic, key, value in trace:
            pipeline.feed(topic, key, value)

    changes = [r for r in trace if b'"type":"BOOKMARK"' not in r[2][:20]]

    def fold_changes() -> None:  # the same trace without its progress records
        pipeline = Pipeline()
        for topic, key, value in changes:
            pipeline.feed(topic, key, value)

    workload_trace = list(generate(records, workloads=True))

    def fold_workloads() -> None:  # as many records, a quarter of the attempts workloads, a quarter CPU-only Jobs
        pipeline = Pipeline()
        for topic, key, value in workload_trace:
            pipeline.feed(topic, key, value)

    def step_only() -> None:  # the per-record step with folds that do nothing: what the rules leave to the drivers
        pipeline = Pipeline()
        for runner in pipeline._runners.values():  # a bench may reach in: the drivers never swap folds
            runner._inputs = {topic: (key, _no_fold) for topic, (key, _) in runner._inputs.items()}
        for topic, key, value in trace:
            pipeline.feed(topic, key, value)

    bare_s, decode_s, fold_s, changes_s, workloads_s, step_s = _best_of_each(
        runs, bare_decode_all, decode_all, fold_all, fold_changes, fold_workloads, step_only
    )

    # State size: sample while folding once more.
    pipeline = Pipeline()
    peak_per_pod, samples = 0.0, []
    every = max(1, n // 20)
    for i, (topic, key, value) in enumerate(trace, 1):
        pipeline.feed(topic, key, value)
        if i % every == 0:
            pods = sum(1 for s in pipeline.states["pods"].values() if s.pod is not None)
            size = state_bytes(pipeline)
            samples.append((i, pods, len(pipeline.states["attempts"]), size))
            if pods:
                peak_per_pod = max(peak_per_pod, size / pods)
    pipeline = Pipeline()
    peak_per_workload, workloads_seen = 0.0, 0
    for i, (topic, key, value) in enumerate(workload_trace, 1):
        pipeline.feed(topic, key, value)
        if i % every == 0:
            kept, attempt_bytes, pod_bytes = _workload_state(pipeline)
            workloads_seen = max(workloads_seen, kept)
            if kept:
                peak_per_workload = max(peak_per_workload, (attempt_bytes + pod_bytes) / kept)
    jobs = sum(1 for topic, _, value in workload_trace if topic == "k8s.jobs" and b'"kind":"Job"' in value)
    first_half = max(s[3] for s in samples[: len(samples) // 2] or samples)
    second_half = max(s[3] for s in samples[len(samples) // 2 :])

    print(f"records: {n}")
    print(f"bare_decode_records_per_s: {n / bare_s:.0f}")
    print(f"typed_decode_records_per_s: {n / decode_s:.0f}")
    print(f"fold_records_per_s: {n / fold_s:.0f}")
    print(f"ratio_fold_to_bare_decode: {bare_s / fold_s:.2f}")
    print(f"ratio_fold_to_typed_decode: {decode_s / fold_s:.2f}")
    print(
        f"where_the_time_goes: typed decode {decode_s / fold_s:.0%}, the per-record step (no-op folds: decode, time check, "
        f"key, load, policy) {(step_s - decode_s) / fold_s:.0%}, the rules and the stages after the first {(fold_s - step_s) / fold_s:.0%}; "
        f"the step alone is {decode_s / step_s:.2f}x typed decode"
    )
    print(f"progress_records: {n - len(changes)}")
    print(f"progress_cost: {(fold_s - changes_s) / changes_s:+.1%} fold time with the progress records vs without (target <= +5%)")
    print(f"peak_state_bytes_per_tracked_pod: {peak_per_pod:.0f}")
    print(f"live_state_at_samples: {' '.join(f'{i}:{p}pods/{a}attempts/{b // 1024}KiB' for i, p, a, b in samples[:: max(1, len(samples) // 5)])}")
    print(f"state_growth_second_half_vs_first: {second_half / first_half:.2f}")
    print(f"fold_records_per_s_with_workloads: {n / workloads_s:.0f} ({jobs} batch Job records, most of them CPU-only CronJob Jobs)")
    print(f"ratio_fold_with_workloads_to_without: {fold_s / workloads_s:.2f}")
    print(f"peak_state_bytes_per_tracked_workload: {peak_per_workload:.0f} (its attempt state and its pods' states; {workloads_seen} kept at most)")
    print(
        f"summary: fold {n / fold_s:.0f} rec/s = {bare_s / fold_s:.2f}x bare msgspec decode, "
        f"{decode_s / fold_s:.2f}x typed decode (target >= 0.5); "
        f"{peak_per_pod:.0f} B state per tracked pod (target <= 2048); state growth {second_half / first_half:.2f}x; "
        f"with workload attempts and CPU-only Jobs {fold_s / workloads_s:.2f}x the records/s, {peak_per_workload:.0f} B per tracked workload"
    )


if __name__ == "__main__":
    main()
