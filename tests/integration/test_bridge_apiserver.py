"""The watch commands on a real API server and a real broker: a story re-enacted as API
calls while `faultline record`, `faultline run` and `faultline bridge` all watch; each
path then classifies as the story's own records do. And the bridge's progress records:
on every partition, never for what Kafka did not acknowledge."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.model.records import CLASSIFIED_FAILURES, GANG_TRANSITIONS
from app.settings import Settings
from app.kafka.topics import create_topics
from tests.bridge.helpers import story_operations, wait_for
from tests.bridge.realkube import (
    ROOT,
    SHORT_SKEW_SECONDS,
    LiveKueue,
    StoryPlayer,
    faultline_env,
    interrupt,
    namespace,
    seconds_after_start,
    short_skew_rules,
    wrong_ca_kubeconfig,
)
from tests.unit import builders, stories
from tests.unit.scenario import final_verdicts

pytestmark = pytest.mark.apiserver

CLUSTER = "real-a"
PARTITIONS = 3


def faultline(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=faultline_env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def stop(proc: subprocess.Popen[bytes], log: Path) -> str:
    interrupt(proc)
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{text[-3000:]}"
    assert "Traceback" not in text, text[-3000:]
    return text


def story() -> list[dict[str, Any]]:
    """Attempts whose objects carry times around now, as a live cluster's would."""
    builders.reset_ids()
    t0 = datetime.now(timezone.utc) - timedelta(minutes=2)
    return [*stories.pod_task_nvlink(t0=t0), *stories.mpijob_row_remap(t0=t0), *stories.rayjob_user_fault(t0=t0)]


def summary(verdicts: dict[str, Any]) -> dict[str, tuple]:
    """Per attempt (run/action/attempt: the cluster and namespace differ), the verdict."""
    out = {}
    for key, v in verdicts.items():
        get = v.get if isinstance(v, dict) else lambda f, v=v: getattr(v, f)
        fault, pod = get("gpu_fault"), get("faulted_pod")
        fault_code = (fault.get("code") if isinstance(fault, dict) else fault.code) if fault else None
        pod_name = (pod.get("name") if isinstance(pod, dict) else pod.name) if pod else None
        out[key.split("/", 2)[2]] = (get("code"), get("kind"), fault_code, pod_name)
    return out


def latest_verdicts(lines: list[bytes]) -> dict[str, dict[str, Any]]:
    latest = {}
    for line in lines:
        out = orjson.loads(line)
        if out["topic"] == CLASSIFIED_FAILURES:
            latest[out["key"]] = out["value"]
    return latest


def changes_in(trace: Path) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in trace.read_bytes().splitlines()] if trace.exists() else []
    return [line for line in lines if line["value"]["type"] != "BOOKMARK"]


def progress_topics(trace: Path) -> set[str]:
    lines = [orjson.loads(line) for line in trace.read_bytes().splitlines()] if trace.exists() else []
    return {line["topic"] for line in lines if line["value"]["type"] == "BOOKMARK"}


def test_a_story_replayed_on_the_api_server_classifies_alike_through_record_run_and_bridge(apiserver, kafka_bootstrap, topic_prefix, tmp_path):
    records = story()
    expected = summary(final_verdicts(records))
    ns = namespace(apiserver, "story")
    settings = Settings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, partitions=PARTITIONS)
    create_topics(settings)
    watch = ["--kubeconfig", str(apiserver.kubeconfig), "--cluster", CLUSTER, "--namespaces", ns, "--progress-interval", "0.2"]
    trace, outputs = tmp_path / "trace.jsonl", tmp_path / "outputs.jsonl"
    logs = {name: tmp_path / f"{name}.log" for name in ("record", "run", "bridge")}
    procs = {
        "record": faultline("record", *watch, "--out", str(trace), log=logs["record"]),
        "run": faultline("run", *watch, "--state", str(tmp_path / "run-state"), "--out", str(outputs), log=logs["run"]),
        "bridge": faultline("bridge", *watch, "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix, log=logs["bridge"]),
    }
    try:
        # Each command says once when every watch has listed and is live.
        wait_for(lambda: all("every watch has listed and is live" in log.read_text() for log in logs.values()), timeout=90, what="every watch live")
        wait_for(lambda: progress_topics(trace) == {"k8s.pods", "k8s.events", "k8s.jobs", "k8s.workloads"}, what="progress in the trace")
        changes = StoryPlayer(apiserver, ns).play(records)
        wait_for(lambda: len(changes_in(trace)) == changes, timeout=60, what=f"{changes} changes in the trace")
        wait_for(lambda: summary(latest_verdicts(outputs.read_bytes().splitlines() if outputs.exists() else [])) == expected,
                 timeout=60, what="run's verdicts")
        bridged = tmp_path / "bridged.jsonl"

        def bridged_all() -> bool:
            replay = subprocess.run(
                [sys.executable, "-m", "app", "replay", "--from-kafka", "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix, "--out", str(bridged)],
                cwd=ROOT, env=faultline_env(), capture_output=True, timeout=120,
            )
            return replay.returncode == 0 and summary(latest_verdicts(bridged.read_bytes().splitlines())) == expected

        wait_for(bridged_all, timeout=120, what="the bridged source topics to classify like the story")
    finally:
        texts = {name: stop(proc, logs[name]) for name, proc in procs.items()}
    recorded = subprocess.run([sys.executable, "-m", "app", "replay", "--trace", str(trace), "--out", str(tmp_path / "replayed.jsonl")],
                              cwd=ROOT, env=faultline_env(), capture_output=True, timeout=120)
    assert summary(latest_verdicts((tmp_path / "replayed.jsonl").read_bytes().splitlines())) == expected, recorded.stderr.decode()
    assert len(expected) == 3
    assert f"recorded {changes} records" in texts["record"]
    # Each changed object once per change, in the order the server made them.
    rvs: dict[str, list[int]] = {}
    for line in changes_in(trace):
        meta = line["value"]["object"]["metadata"]
        rvs.setdefault(meta["uid"], []).append(int(meta["resourceVersion"]))
    assert all(v == sorted(set(v)) for v in rvs.values())


def test_the_bridge_command_fails_within_5s_on_a_wrong_ca(apiserver, kafka_bootstrap, topic_prefix, tmp_path):
    create_topics(Settings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, partitions=PARTITIONS))
    kubeconfig = wrong_ca_kubeconfig(apiserver, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "app", "bridge", "--kubeconfig", str(kubeconfig), "--cluster", CLUSTER, "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix],
        cwd=ROOT, env=faultline_env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    ended = time.time()
    assert result.returncode == 1, result.stderr
    assert seconds_after_start(result, ended) < 5  # from the start of the watch (see tests/bridge/realkube.py)
    assert "presented a certificate that the kubeconfig does not trust" in result.stderr and "Traceback" not in result.stderr


# --- R12.7: the bridge restarted during preemptions, through the broker and a worker ---------------

GANG_FIELDS = ("from", "to", "code", "retry", "waited_seconds", "reconstructed")  # what no arrival order may change (R12.7)


def gang_path(values: list[dict[str, Any]]) -> dict[str, list[tuple]]:
    """Per key, each gang transition as R12.7 holds it fixed (the cause's reason with it),
    an at-least-once repeat taken out."""
    out: dict[str, list[tuple]] = {}
    for v in values:
        step = (*(v[f] for f in GANG_FIELDS), (v["cause"] or {}).get("reason"))
        steps = out.setdefault(v["key"], [])
        if not steps or steps[-1] != step:
            steps.append(step)
    return out


def run_transitions(out: Path) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()] if out.exists() else []
    return [line["value"] for line in lines if line["topic"] == GANG_TRANSITIONS]


def test_r12_7_the_bridge_restarted_during_preemptions_a_worker_gives_the_uninterrupted_runs_transitions(apiserver, stream_stack, tmp_path):
    """Issue 34: `faultline bridge` SIGTERMed while two gangs are being preempted and
    started again once both run again; a worker (`faultline worker`) reads what it
    published through the broker. One gang, a JobSet under an orchestrator's labels with
    resume after preemption on (R9), is stopped just before Kueue evicts its Workload;
    the other, a bare JobSet (R15), in the middle: its Workload's eviction published, its
    suspension not. The restarted bridge publishes each kind's backlog in one burst. The
    worker's transitions equal those of a `faultline run` that watched all along: the
    preemption, the readmission with Kueue's wait, the completion."""
    from tests.unit.gang_builders import GangWorld

    spaces = {"before": namespace(apiserver, "across"), "middle": namespace(apiserver, "middle")}
    watch = ["--kubeconfig", str(apiserver.kubeconfig), "--cluster", CLUSTER, "--namespaces", ",".join(spaces.values()), "--progress-interval", "0.2"]
    bridge_args = ["bridge", *watch, "--bootstrap", stream_stack.bootstrap, "--topic-prefix", stream_stack.prefix]
    outputs = tmp_path / "run.jsonl"
    logs = {name: tmp_path / f"{name}.log" for name in ("run", "bridge-1", "bridge-2")}
    procs = {"run": faultline("run", *watch, "--state", str(tmp_path / "run-state"), "--out", str(outputs), log=logs["run"]),
             "bridge-1": faultline(*bridge_args, log=logs["bridge-1"])}  # fmt: skip
    stream_stack.start_worker()
    texts: dict[str, str] = {}
    try:
        wait_for(lambda: all("every watch has listed and is live" in logs[n].read_text() for n in procs), timeout=90, what="every watch live")
        gangs = {"before": LiveKueue(apiserver, spaces["before"], GangWorld(policy="true")),
                 "middle": LiveKueue(apiserver, spaces["middle"], GangWorld(labels={}))}  # fmt: skip
        for live in gangs.values():
            live.start()

        def worker_shows(to: str, count: int = 2) -> bool:
            return sum(1 for r in stream_stack.read(GANG_TRANSITIONS) if orjson.loads(r.value)["to"] == to) >= count

        wait_for(lambda: worker_shows("Running"), timeout=120, what="the worker: both gangs running")
        LiveKueue.sleep(1)
        middle = gangs["middle"].preempt("InCohortReclamation")

        def evicted_published() -> bool:
            values = [orjson.loads(r.value) for r in stream_stack.read("k8s.workloads")]
            return any(c["type"] == "Evicted" and c["status"] == "True" for v in values if v["type"] != "BOOKMARK"
                       for c in v["object"].get("status", {}).get("conditions", []))  # fmt: skip

        wait_for(evicted_published, timeout=30, what="the middle gang's eviction published")
        texts["bridge-1"] = stop(procs.pop("bridge-1"), logs["bridge-1"])
        middle.suspend().jobs_stopped().release_quota()
        gangs["before"].preempt("InCohortReclamation").suspend().jobs_stopped().release_quota()
        LiveKueue.sleep(2)
        for live in gangs.values():
            live.readmit().unsuspend().workers_ready().pods_ready()
        wait_for(lambda: sum(1 for t in run_transitions(outputs) if t["from"] == "WaitingForReadmission") == 2, timeout=60, what="run: both readmitted")
        procs["bridge-2"] = faultline(*bridge_args, log=logs["bridge-2"])
        wait_for(lambda: "every watch has listed and is live" in logs["bridge-2"].read_text(), timeout=90, what="bridge-2 live")
        for live in gangs.values():
            live.complete().finish()
        wait_for(lambda: sum(1 for t in run_transitions(outputs) if t["to"] == "Completed") == 2, timeout=60, what="run: both completed")
        wait_for(lambda: worker_shows("Completed"), timeout=120, what="the worker: both completed")
    finally:
        texts |= {name: stop(proc, logs[name]) for name, proc in procs.items()}
    streamed = gang_path([orjson.loads(r.value) for r in stream_stack.read(GANG_TRANSITIONS)])
    watched = gang_path(run_transitions(outputs))
    assert streamed == watched
    assert len(watched) == 2
    for name, live in gangs.items():
        (key,) = [k for k in watched if f"/{spaces[name]}/" in k]
        steps = watched[key]
        assert [s[:2] for s in steps] == [("Pending", "Running"), ("Running", "WaitingForReadmission"), ("WaitingForReadmission", "Running"), ("Running", "Completed")], (name, steps)
        assert steps[1][-1] == "Preempted" and not any(s[5] for s in steps)
        assert steps[2][4] == live.kueues_wait() >= 2, (name, steps)
    letters = stream_stack.read("faultline.dead-letter")
    assert letters == [], [orjson.loads(r.value)["reason"] for r in letters]


# --- R11.4: an outage longer than max_clock_skew ----------------------------------------------

def test_r11_4_the_bridge_down_longer_than_max_clock_skew_a_running_worker_folds_what_changed_meanwhile(apiserver, stream_stack, tmp_path):
    """Issue 34: a pod task with an Xid 74 on its GPU runs; `faultline bridge` publishes it
    and a worker folds it, both the worker and a `run` watching all along with
    `max_clock_skew` 5 s (a rule file). The bridge is stopped, the pod fails 8 s later, the
    bridge is started again: its resumed watch publishes the failure stamped with the new
    time, while the worker's watermark is the bridge's last progress before the stop. The
    worker must classify the failure as the run does: the records are clock faults,
    counted and folded (R11.4, amended)."""
    rules = short_skew_rules(tmp_path)
    ns = namespace(apiserver, "bridge-skew")
    watch = ["--kubeconfig", str(apiserver.kubeconfig), "--cluster", CLUSTER, "--namespaces", ns, "--progress-interval", "0.2"]
    bridge_args = ["bridge", *watch, "--bootstrap", stream_stack.bootstrap, "--topic-prefix", stream_stack.prefix]
    outputs = tmp_path / "run.jsonl"
    logs = {name: tmp_path / f"{name}.log" for name in ("run", "bridge-1", "bridge-2")}
    procs = {"run": faultline("run", *watch, "--rules", str(rules), "--state", str(tmp_path / "run-state"), "--out", str(outputs), log=logs["run"]),
             "bridge-1": faultline(*bridge_args, log=logs["bridge-1"])}  # fmt: skip
    stream_stack.start_worker(extra=("--rules", str(rules)))
    texts: dict[str, str] = {}
    try:
        wait_for(lambda: all("every watch has listed and is live" in logs[n].read_text() for n in procs), timeout=90, what="every watch live")
        builders.reset_ids()
        ops = story_operations(stories.pod_task_nvlink(t0=datetime.now(timezone.utc)))
        events = max(i for i, o in enumerate(ops) if o.plural == "events") + 1
        player = StoryPlayer(apiserver, ns)
        player.play_operations(ops[:events])
        wait_for(lambda: len(stream_stack.read("faultline.faults")) > 0, timeout=120, what="the worker: the Xid 74 fault")
        time.sleep(1)  # the worker reads progress past it
        texts["bridge-1"] = stop(procs.pop("bridge-1"), logs["bridge-1"])
        time.sleep(SHORT_SKEW_SECONDS + 3)
        player.play_operations(ops[events:])
        wait_for(lambda: latest_verdicts(outputs.read_bytes().splitlines() if outputs.exists() else []), timeout=60, what="run's verdict")
        procs["bridge-2"] = faultline(*bridge_args, log=logs["bridge-2"])
        wait_for(lambda: "every watch has listed and is live" in logs["bridge-2"].read_text(), timeout=90, what="bridge-2 live")

        def verdict_or_letter() -> bool:
            return bool(stream_stack.read(CLASSIFIED_FAILURES) or stream_stack.read("faultline.dead-letter"))

        wait_for(verdict_or_letter, timeout=60, what="the worker: a verdict or a dead letter")
        time.sleep(2)  # the rest of the failure's records
    finally:
        texts |= {name: stop(proc, logs[name]) for name, proc in procs.items()}
    letters = [orjson.loads(r.value)["reason"] for r in stream_stack.read("faultline.dead-letter")]
    assert letters == [], letters
    streamed = {r.key.decode(): orjson.loads(r.value) for r in stream_stack.read(CLASSIFIED_FAILURES)}
    watched = latest_verdicts(outputs.read_bytes().splitlines())
    assert summary(streamed) == summary(watched) and summary(watched)
