"""A quiet cluster, watched for a while: how often the bridge relists and writes gap markers.

A real API server (ops/kube/local_apiserver.py) with etcd compacted every `--compaction`
(upstream: 5m), a few objects of every kind that then never change, and `faultline record`
watching it for `--minutes`. Events get no BOOKMARKs from a real server, so a quiet Event
watch resumes from an old resourceVersion; once etcd compacted it, the re-watch is 410 and
the bridge relists. It must find nothing changed and publish nothing: no record, no gap.

    python -m bench.quiet_cluster --minutes 15 --compaction 1m
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from ops.kube import local_apiserver

ROOT = Path(__file__).resolve().parents[1]


def populate(kube, ns: str) -> int:
    kube.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "default"}})
    made = 0
    for i in range(5):
        kube.call("POST", f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": f"p{i}"}, "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "x"}]}})
        kube.call("POST", f"/api/v1/namespaces/{ns}/events", {
            "metadata": {"name": f"e{i}"}, "involvedObject": {"kind": "Pod", "name": f"p{i}", "namespace": ns},
            "reason": "Started", "message": "m", "type": "Normal", "source": {"component": "kubelet", "host": "node-a"},
        })
        made += 2
    for group, version, plural, kind in (("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"), ("kueue.x-k8s.io", "v1beta2", "workloads", "Workload"),
                                         ("ray.io", "v1", "rayjobs", "RayJob"), ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")):
        kube.call("POST", f"/apis/{group}/{version}/namespaces/{ns}/{plural}", {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": "x"}, "spec": {}})
        made += 1
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--compaction", default="1m", help="kube-apiserver --etcd-compaction-interval")
    parser.add_argument("--watch-timeout", type=int, default=300, help="the bridge's --watch-timeout (default: its own default)")
    args = parser.parse_args(argv)
    module = local_apiserver
    with tempfile.TemporaryDirectory(prefix="faultline-quiet-") as tmp, module.LocalApiServer(Path(tmp) / "kube", compaction_interval=args.compaction) as kube:
        objects = populate(kube, "quiet")
        trace, log = Path(tmp) / "trace.jsonl", Path(tmp) / "record.log"
        started = time.monotonic()
        with log.open("wb") as out:
            result = subprocess.run(
                [sys.executable, "-m", "app", "record", "--kubeconfig", str(kube.kubeconfig), "--cluster", "quiet", "--out", str(trace),
                 "--duration", str(args.minutes * 60), "--watch-timeout", str(args.watch_timeout)],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False,
            )
        elapsed = time.monotonic() - started
        text = log.read_text()
        lines = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
        changes = [line for line in lines if line["value"]["type"] != "BOOKMARK"]
        relists = re.findall(r"^.* INFO faultline.bridge: (\w+) \(.*\): watch position .* expired \(410 Gone\); relisted at .*$", text, re.M)
        gaps = len(re.findall(r"with a gap marker", text))
        print(f"quiet cluster: {args.minutes:g} min watched (elapsed {elapsed / 60:.1f} min), etcd compacted every {args.compaction}, "
              f"watch timeout {args.watch_timeout}s, exit {result.returncode}")
        print(f"  objects: {objects}; records: {len(changes)} (the initial list), {len(changes) - objects} after it")
        print(f"  relists after 410: {len(relists)} ({', '.join(sorted(set(relists))) or 'none'}); gap markers: {gaps}")
        print(f"  progress records: {len(lines) - len(changes)}; tracebacks in the log: {text.count('Traceback')}")
        return 0 if gaps == 0 and len(changes) == objects else 1


if __name__ == "__main__":
    sys.exit(main())
