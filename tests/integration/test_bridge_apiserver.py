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

from app.model.records import CLASSIFIED_FAILURES
from app.settings import Settings
from app.kafka.topics import create_topics
from tests.bridge.helpers import wait_for
from tests.bridge.realkube import ROOT, StoryPlayer, faultline_env, interrupt, namespace, seconds_after_start, wrong_ca_kubeconfig
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
