"""The bridge's cost with a cluster-sized batch Job population (issue 24 item 4).

A real API server (ops/kube/local_apiserver.py) holding `--jobs` CronJob-style Jobs without
GPUs (each owned by one of `--cronjobs` CronJobs, as a CronJob's controller makes them),
and `faultline record` watching every kind:

1. the initial list: the Jobs listed and written to the trace (records/s, CPU);
2. live: every Job completes (its status written through /status as the Job controller
   does, by 4 writers at once) while the bridge watches (records/s, CPU per record);
3. the bridge's RSS after each phase (it keeps every published object, compressed, to
   name deletions after a relist).

Baseline in the same run: the same pages listed and decoded by a bare client (the
`kubernetes` client with orjson, no envelope, no sink), so the list's ratio is the
bridge's own overhead. The API server, etcd, the writers and the bridge share the
machine's cores: the figures are for this machine, compare ratios.

    python -m bench.bridge_jobs --jobs 5000
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from ops.kube import local_apiserver

ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = 10
TICKS = os.sysconf("SC_CLK_TCK")


def job(name: str, cronjob: str, cronjob_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"app": cronjob},
                     "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp": "2026-09-15T10:00:00Z"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": cronjob, "uid": cronjob_uid,
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"backoffLimit": 6, "template": {"metadata": {"labels": {"app": cronjob}}, "spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": "report", "image": "registry.example/reports:1.4",
                            "args": ["--since", "24h", "--out", "s3://reports/daily"],
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}}]}}},
    }


COMPLETE = {
    "startTime": "2026-09-15T10:00:01Z", "completionTime": "2026-09-15T10:02:11Z", "succeeded": 1, "active": 0, "ready": 0,
    "terminating": 0, "uncountedTerminatedPods": {},
    "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods",
         "lastProbeTime": "2026-09-15T10:02:11Z", "lastTransitionTime": "2026-09-15T10:02:11Z"},
        {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods",
         "lastProbeTime": "2026-09-15T10:02:11Z", "lastTransitionTime": "2026-09-15T10:02:11Z"},
    ],
}


def populate(kube: Any, jobs: int, cronjobs: int) -> list[tuple[str, str]]:
    """(namespace, name) of each Job created."""
    namespaces = [f"reports-{i}" for i in range(NAMESPACES)]
    for ns in namespaces:
        kube.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    owners = [(f"report-{i}", str(uuid.uuid4())) for i in range(cronjobs)]
    todo = [(namespaces[i % NAMESPACES], f"{owners[i % cronjobs][0]}-{29301140 + i}", owners[i % cronjobs]) for i in range(jobs)]

    def create(part: list[tuple[str, str, tuple[str, str]]]) -> None:
        for ns, name, (cron, cron_uid) in part:
            kube.call("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job(name, cron, cron_uid))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, [todo[i::4] for i in range(4)]))
    return [(ns, name) for ns, name, _ in todo]


def complete_all(kube: Any, made: list[tuple[str, str]]) -> None:
    def complete(part: list[tuple[str, str]]) -> None:
        for ns, name in part:
            path = f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status"
            kube.call("PATCH", path, orjson.dumps({"status": COMPLETE}), content_type="application/merge-patch+json")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(complete, [made[i::4] for i in range(4)]))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def changes_in(trace: Path) -> int:
    try:
        data = trace.read_bytes()
    except FileNotFoundError:
        return 0
    return sum(1 for line in data.split(b"\n")[:-1] if b'"type":"BOOKMARK"' not in line)


def wait_until(predicate: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.02)
    return time.monotonic()


def bare_list(kubeconfig: Path, page_size: int) -> tuple[int, float, float]:
    """(items, seconds, CPU seconds of this thread) for one paginated list of every Job,
    decoded with orjson: the baseline."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration, persist_config=False)
    api = client.ApiClient(configuration)
    custom = client.CustomObjectsApi(api)
    started, cpu = time.monotonic(), time.thread_time()
    items, cont = 0, None
    while True:
        kwargs = {"limit": page_size, "_preload_content": False}
        if cont:
            kwargs["_continue"] = cont
        body = orjson.loads(custom.list_cluster_custom_object("batch", "v1", "jobs", **kwargs).data)
        items += len(body["items"])
        cont = body["metadata"].get("continue")
        if not cont:
            break
    elapsed, cpu = time.monotonic() - started, time.thread_time() - cpu
    api.close()
    return items, elapsed, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--cronjobs", type=int, default=100)
    parser.add_argument("--page-size", type=int, default=500)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="faultline-jobs-") as tmp, local_apiserver.LocalApiServer(Path(tmp) / "kube") as kube:
        started = time.monotonic()
        made = populate(kube, args.jobs, args.cronjobs)
        print(f"{len(made)} Jobs of {args.cronjobs} CronJobs in {NAMESPACES} namespaces created in {time.monotonic() - started:.1f}s")
        items, bare_s, bare_cpu = bare_list(kube.kubeconfig, args.page_size)
        print(f"baseline, a bare client's paginated list: {items} Jobs in {bare_s:.2f}s ({items / bare_s:,.0f}/s), CPU {bare_cpu:.2f}s")

        trace, log = Path(tmp) / "trace.jsonl", Path(tmp) / "record.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app", "record", "--kubeconfig", str(kube.kubeconfig), "--cluster", "bench", "--out", str(trace),
                 "--page-size", str(args.page_size)],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        try:
            wait_until(lambda: b"watching " in log.read_bytes(), 120, "the recorder to start")
            cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
            t1 = wait_until(lambda: changes_in(trace) >= args.jobs, 300, "the initial list")
            cpu1 = cpu_seconds(proc.pid)
            list_s, list_cpu = t1 - t0, cpu1 - cpu0
            rss_listed = rss_mib(proc.pid)
            wait_until(lambda: b"every watch has listed and is live" in log.read_bytes(), 60, "every watch live")
            print(f"bridge, initial list: {args.jobs} Jobs in {list_s:.2f}s ({args.jobs / list_s:,.0f} records/s), "
                  f"CPU {list_cpu:.2f}s ({list_cpu / args.jobs * 1e6:.0f} us/record; {list_cpu / max(bare_cpu, 1e-9):.1f}x the bare list's), "
                  f"RSS {rss_listed:.0f} MiB")

            cpu2, t2 = cpu_seconds(proc.pid), time.monotonic()
            complete_all(kube, made)
            t3 = time.monotonic()
            t4 = wait_until(lambda: changes_in(trace) >= 2 * args.jobs, 300, "every completion")
            cpu3 = cpu_seconds(proc.pid)
            live_s, live_cpu = t4 - t2, cpu3 - cpu2
            print(f"bridge, live: {args.jobs} Job completions written in {t3 - t2:.1f}s by 4 writers, all recorded {t4 - t3:.2f}s after the last "
                  f"write ({args.jobs / live_s:,.0f} records/s, bound by the writers); bridge CPU {live_cpu:.2f}s "
                  f"({live_cpu / args.jobs * 1e6:.0f} us/record, {live_cpu / live_s * 100:.0f}% of a core), RSS {rss_mib(proc.pid):.0f} MiB")
            size = trace.stat().st_size
            print(f"trace: {changes_in(trace)} changes, {size / 1e6:.1f} MB ({size / changes_in(trace):,.0f} B per line)")
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.returncode != 0:
            print(log.read_text()[-3000:])
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
