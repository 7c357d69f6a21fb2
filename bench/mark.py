"""Time to mark (SPEC R18): from a critical fault Event reaching the broker to the condition
faultline.io/GPUFault on its pod, through `faultline worker` and `faultline mark` on a real
broker and a real API server, against a bare read and patch of a pod's status on the same
API server measured in the same run.

    python -m bench.mark [--rates 100,2000] [--seconds S] [--smoke]

- The API server (ops/kube/local_apiserver.py: $KUBEBUILDER_ASSETS or the cache) gets the
  mark's ServiceAccount, Role and admission policy (ops/k8s/mark, bound: every patch is
  admitted through it, as in a cluster), and, before each run, as many running GPU pods
  (bound to a node, status written as a kubelet would) as that run will fault.
- At each of `--rates` (a fresh worker and a fresh mark each, on a broker of its own unless
  $FAULTLINE_KAFKA_BOOTSTRAP names one), once one fault has been marked end to end, source
  records are produced at R records/s for S seconds, in batches every 10 ms (as
  bench.pipeline offers them; the background is bench.tracegen's trace): one in 20 is a
  critical Xid Event on one of the pods (their pod records were published before the clock
  started). The latency is from Kafka acknowledging that Event to a watch on the pods
  seeing the condition; it is split at the fault record the worker wrote (its Kafka
  timestamp): the worker's part and the mark's (its fetch, read and patch).
- The baseline: a GET and a PATCH of a pod's status, one after the other, as the mark
  makes them (the admin's credentials; the admission policy bound), on fresh pods.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import yaml
from aiokafka import AIOKafkaProducer
from kafka import KafkaConsumer

from app.core.actions.marking import GPU_FAULT_CONDITION
from app.kafka.topics import create_topics
from app.model.records import FAULTS
from app.settings import load
from bench.broker import kafka
from bench.pipeline import PARTITIONS, TICK_SECONDS, _pct, _rates, _send_batched, cpu_seconds, start_worker, stop_worker
from bench.tracegen import generate
from ops.kube.local_apiserver import LocalApiServer

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "bench"
NODE = "gpu-1"
NS = "bench-mark"
FAULT_EVERY = 20  # by default one record in 20 is a critical Xid on a pod of its own (--fault-every)
MARK_SA = ("faultline", "faultline-mark")


def now_text(at: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if at is None else at, timezone.utc).isoformat().replace("+00:00", "Z")


# --- the API server -------------------------------------------------------------------------


def prepare(kube: LocalApiServer) -> None:
    """The namespace of the pods, and ops/k8s/mark (its policy bound)."""
    for doc in ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "faultline"}}, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}):
        kube.call("POST", "/api/v1/namespaces", doc, expect=(201, 409))
    kube.call("POST", f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": "default"}}, expect=(201, 409))
    folder = ROOT / "ops" / "k8s" / "mark"
    for name in ("rbac.yaml", "admission-policy.yaml"):
        for doc in yaml.safe_load_all((folder / name).read_text()):
            kind, meta = doc["kind"], doc["metadata"]
            plural = {"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
                      "ValidatingAdmissionPolicy": "validatingadmissionpolicies", "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[kind]  # fmt: skip
            group = doc["apiVersion"]
            base = f"/api/{group}" if "/" not in group else f"/apis/{group}"
            path = f"{base}/namespaces/{meta['namespace']}/{plural}" if meta.get("namespace") else f"{base}/{plural}"
            kube.call("POST", path, doc, expect=(201, 409))


def running_pods(kube: LocalApiServer, prefix: str, n: int) -> list[dict[str, Any]]:
    """`n` bare GPU pods bound to NODE and Running, as served."""

    def one(i: int) -> dict[str, Any]:
        name = f"{prefix}-{i:05d}"
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
                "spec": {"nodeName": NODE, "restartPolicy": "Never",
                         "containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip
        kube.call("POST", f"/api/v1/namespaces/{NS}/pods", body)
        started = now_text()
        status = {"phase": "Running", "startTime": started, "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": started}],
                  "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "image": "trainer:1", "imageID": "sha256:0",
                                         "state": {"running": {"startedAt": started}}}]}  # fmt: skip
        return kube.call("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": status}, content_type="application/merge-patch+json")

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(n)))


def baseline(kube: LocalApiServer, n: int) -> list[float]:
    """Seconds of a GET and a conditional PATCH of a pod's status, one after the other."""
    pods = running_pods(kube, f"base{uuid.uuid4().hex[:4]}", n)
    spent = []
    for pod in pods:
        name = pod["metadata"]["name"]
        start = time.perf_counter()
        served = kube.call("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
        body = {"metadata": {"resourceVersion": served["metadata"]["resourceVersion"]},
                "status": {"conditions": [{"type": "example.com/Baseline", "status": "True", "reason": "Baseline", "lastTransitionTime": now_text()}]}}  # fmt: skip
        kube.call("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", body, content_type="application/strategic-merge-patch+json")
        spent.append(time.perf_counter() - start)
    return spent


class PodWatch:
    """A watch on the namespace's pods (admin): when each pod was first seen with the mark."""

    def __init__(self, kube: LocalApiServer, resource_version: str) -> None:
        self.marked_at: dict[str, float] = {}
        self._stop = False
        context = kube.ssl_context((kube.certs / "admin.crt", kube.certs / "admin.key"))
        port = int(kube.url.rsplit(":", 1)[1])
        self._conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=600)
        self._conn.request("GET", f"/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion={resource_version}&timeoutSeconds=600")
        self._response = self._conn.getresponse()
        self._thread = threading.Thread(target=self._read, daemon=True, name="pod-watch")
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self._response:
                if self._stop:
                    return
                event = orjson.loads(line)
                pod = event.get("object") or {}
                if any(c.get("type") == GPU_FAULT_CONDITION for c in (pod.get("status") or {}).get("conditions") or []):
                    self.marked_at.setdefault(pod["metadata"]["uid"], time.time())
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            return  # closed (`close` shuts the socket under the reader)

    def close(self) -> None:
        self._stop = True
        try:
            self._conn.sock.shutdown(2)  # type: ignore[union-attr]
        except OSError:
            pass
        self._conn.close()


# --- the records ----------------------------------------------------------------------------------


def pod_record(pod: dict[str, Any]) -> tuple[str, bytes, bytes]:
    value = orjson.dumps({"type": "MODIFIED", "observed_at": now_text(), "cluster": CLUSTER, "object": pod})
    return "k8s.pods", pod["metadata"]["uid"].encode(), value


def fault_event(pod: dict[str, Any]) -> tuple[str, bytes, bytes]:
    """A critical Xid Event on `pod`, reported from its node (SPEC R2), as the bridge writes it."""
    meta, at = pod["metadata"], now_text()
    uid, name = meta["uid"], meta["name"]
    event = {"apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "GPUXidError",
             "metadata": {"name": f"{name}.xid", "namespace": NS, "uid": f"ev-{uid}", "creationTimestamp": at},
             "involvedObject": {"kind": "Pod", "namespace": NS, "name": name, "uid": uid},
             "message": f"[gpu-health] [CRITICAL] Xid 79 on GPU 0. xid=79 severity=critical gpu_index=0 node={NODE}",
             "firstTimestamp": at, "lastTimestamp": at, "count": 1, "reportingInstance": NODE,
             "source": {"component": "gpu-health-agent", "host": NODE}}  # fmt: skip
    return "k8s.events", uid.encode(), orjson.dumps({"type": "ADDED", "observed_at": at, "cluster": CLUSTER, "object": event})


def start_mark(kube: LocalApiServer, bootstrap: str, prefix: str, tmp: Path) -> subprocess.Popen:
    token = kube.create_token(*MARK_SA)
    kubeconfig = kube.write_kubeconfig(tmp / f"mark-{prefix}kubeconfig", token=token)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
    command = [sys.executable, "-m", "app", "mark", "--kubeconfig", str(kubeconfig), "--cluster", CLUSTER, "--bootstrap", bootstrap,
               "--topic-prefix", prefix, "--mark-metrics-port", "0"]  # fmt: skip
    return subprocess.Popen(command, stdout=(tmp / f"mark-{prefix}log").open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


def fault_written_at(bootstrap: str, prefix: str) -> dict[str, float]:
    """Pod uid -> the Kafka timestamp of the first fault record the worker wrote for it."""
    consumer = KafkaConsumer(prefix + FAULTS, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
    written: dict[str, float] = {}
    for message in consumer:
        value = orjson.loads(message.value)
        written.setdefault(value["fault"]["pod"]["uid"], message.timestamp / 1000)
    consumer.close()
    return written


class Latency(NamedTuple):
    seconds: list[float]  # Event acknowledged -> condition seen, of each fault marked
    faults: int  # faults offered (a fault not marked by the end counts as missing)
    worker: list[float]  # Event acknowledged -> fault record written
    mark: list[float]  # fault record written -> condition seen
    cpu: dict[str, float]  # share of one core while records were offered


async def latency(kube: LocalApiServer, bootstrap: str, background: list, rate: float, seconds: float, tmp: Path, every: int) -> Latency:
    prefix = f"bm{uuid.uuid4().hex[:6]}."
    create_topics(load({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": PARTITIONS}))
    pods = running_pods(kube, prefix.rstrip("."), int(rate * seconds / every) + 2)
    version = kube.call("GET", f"/api/v1/namespaces/{NS}/pods?limit=1")["metadata"]["resourceVersion"]
    watch = PodWatch(kube, version)
    worker = start_worker(bootstrap, prefix, tmp / f"worker-{prefix}", tmp / f"worker-{prefix}log")
    mark = start_mark(kube, bootstrap, prefix, tmp)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    sent_at: dict[str, float] = {}

    def acknowledged(uid: str) -> Any:
        def at(future: asyncio.Future[Any]) -> None:
            if not future.cancelled() and future.exception() is None:
                sent_at[uid] = time.time()  # the clock starts once Kafka holds the Event

        return at

    cpu: dict[str, float] = {}
    try:
        await _send_batched(producer, prefix, [pod_record(p) for p in pods])
        await producer.flush()
        # The clock starts once one fault has gone through every stage (the worker and the
        # mark have joined their groups and hold their partitions).
        warm = pods[0]
        await producer.send_and_wait(prefix + "k8s.events", key=warm["metadata"]["uid"].encode(), value=fault_event(warm)[2])
        deadline = time.monotonic() + 180
        while warm["metadata"]["uid"] not in watch.marked_at:
            if time.monotonic() > deadline or worker.poll() is not None or mark.poll() is not None:
                raise SystemExit(f"the first fault was not marked: see {tmp}")
            await asyncio.sleep(0.1)
        processes = {"worker": worker.pid, "mark": mark.pid, "kube_apiserver": kube.pid("kube-apiserver"), "etcd": kube.pid("etcd"), "load_generator": os.getpid()}
        cpu_at_start = {name: cpu_seconds(pid) if pid else None for name, pid in processes.items()}
        start, i, b, n = time.perf_counter(), 0, 0, 1
        while (elapsed := time.perf_counter() - start) < seconds:
            due: list[tuple[str, bytes, bytes]] = []
            faulted: list[str] = []
            while i < int(elapsed * rate):
                if i % every == 0 and n < len(pods):
                    topic, key, value = fault_event(pods[n])
                    n += 1
                    delivered = await producer.send(prefix + topic, key=key, value=value)
                    delivered.add_done_callback(acknowledged(key.decode()))
                    faulted.append(key.decode())
                else:
                    topic, k, v = background[b % len(background)]
                    b += 1
                    due.append((topic, k.encode(), v))
                i += 1
            await _send_batched(producer, prefix, due)
            await asyncio.sleep(TICK_SECONDS)
        spent = time.perf_counter() - start
        for name, pid in processes.items():
            before, after = cpu_at_start[name], cpu_seconds(pid) if pid else None
            if before is not None and after is not None:
                cpu[name] = (after - before) / spent
        await producer.flush()
        settle = time.monotonic() + 10  # the last marks land
        while time.monotonic() < settle and not all(uid in watch.marked_at for uid in sent_at):
            await asyncio.sleep(0.2)
    finally:
        await producer.stop()
        for proc in (mark, worker):
            stop_worker(proc)
        watch.close()
    written = fault_written_at(bootstrap, prefix)
    marked = {uid: watch.marked_at[uid] - at for uid, at in sent_at.items() if uid in watch.marked_at}
    worker_part = [written[uid] - sent_at[uid] for uid in marked if uid in written]
    mark_part = [watch.marked_at[uid] - written[uid] for uid in marked if uid in written]
    return Latency(list(marked.values()), len(sent_at), worker_part, mark_part, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=_rates, default=[100.0, 2_000.0], help="offered rates, source records/s (default '100,2000')")
    parser.add_argument("--rate", type=_rates, dest="rates", help="the same as --rates (one rate)")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--fault-every", type=int, default=FAULT_EVERY, help=f"one record in N is a critical Xid on a pod of its own (default {FAULT_EVERY}, as bench.pipeline's failures)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    seconds = 3 if args.smoke else args.seconds
    rates = args.rates[-1:] if args.smoke else args.rates
    background = [(t, k, v) for t, k, v in generate(1_000 if args.smoke else 20_000)]
    with tempfile.TemporaryDirectory() as tmp, kafka() as bootstrap, LocalApiServer(Path(tmp) / "kube", install_crds=False) as kube:
        prepare(kube)
        base = baseline(kube, 20 if args.smoke else 200)
        measured = {rate: asyncio.run(latency(kube, bootstrap, background, rate, seconds, Path(tmp), args.fault_every)) for rate in rates}
        sys.stdout.flush()

    print(f"load_average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min, at the end; {os.cpu_count()} cores)")
    print(f"fault_every: {args.fault_every} (one record in {args.fault_every} is a critical Xid on a pod of its own)")
    print(f"baseline_get_patch_ms: p50 {1000 * _pct(base, 0.5):.1f}, p99 {1000 * _pct(base, 0.99):.1f} ({len(base)} pods; the admission policy bound)")
    parts = []
    for rate, m in measured.items():
        at = f"at_{rate:.0f}"
        print(f"mark_{at}_faults: {m.faults} offered, {len(m.seconds)} marked, {m.faults - len(m.seconds)} missing by the end")
        print(f"mark_{at}_p50_ms: {1000 * _pct(m.seconds, 0.5):.0f}")
        print(f"mark_{at}_p99_ms: {1000 * _pct(m.seconds, 0.99):.0f}")
        print(f"mark_{at}_worker_ms: p50 {1000 * _pct(m.worker, 0.5):.0f}, p99 {1000 * _pct(m.worker, 0.99):.0f} (Event acknowledged -> fault record written)")
        print(f"mark_{at}_mark_ms: p50 {1000 * _pct(m.mark, 0.5):.0f}, p99 {1000 * _pct(m.mark, 0.99):.0f} (fault record written -> condition seen)")
        print(f"mark_{at}_mark_to_baseline: {_pct(m.mark, 0.5) / _pct(base, 0.5):.1f}x the bare GET+PATCH at p50")
        for name, share in m.cpu.items():
            print(f"mark_{at}_cpu_{name}: {100 * share:.0f}% of one core while records were offered")
        parts.append(
            f"at {rate:.0f} rec/s ({m.faults} faults) p50 {1000 * _pct(m.seconds, 0.5):.0f} ms, p99 {1000 * _pct(m.seconds, 0.99):.0f} ms, "
            f"{m.faults - len(m.seconds)} missing; the mark's part p50 {1000 * _pct(m.mark, 0.5):.0f} ms = "
            f"{_pct(m.mark, 0.5) / _pct(base, 0.5):.1f}x a bare GET+PATCH"
        )
    print(f"summary: fault Event at the broker -> condition on the pod: {'; '.join(parts)} (target p99 < 1000 ms, none missing)")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
