"""Who the bridge is on a real API server (tests/conftest.py `apiserver`): the ops/k8s
manifests applied with strict validation, the bridge as its ServiceAccount, a missing
RBAC rule, a 403 while a restarted server syncs RBAC, and credentials or a server that
waiting cannot fix."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from app.bridge.bridge import Bridge
from app.bridge.client import KubeApi, api_client
from tests.bridge import manifests
from tests.bridge.helpers import MemorySink, Running, settings, wait_for
from tests.bridge.realkube import faultline, seconds_after_start, wrong_ca_kubeconfig

pytestmark = pytest.mark.apiserver

TOPICS = {"k8s.pods", "k8s.events", "k8s.jobs", "k8s.workloads"}


def token_kubeconfig(kube: Any, path: Path, namespace: str, service_account: str) -> Path:
    return kube.write_kubeconfig(path, token=kube.create_token(namespace, service_account))


def test_the_manifests_apply_strictly_and_the_bridge_watches_everything_as_its_service_account(ops_applied, tmp_path):
    kubeconfig = token_kubeconfig(ops_applied, tmp_path / "kubeconfig", "faultline", "faultline-bridge")
    api = KubeApi(api_client(kubeconfig=str(kubeconfig)))
    sink = MemorySink()
    try:
        running = Running(Bridge(api, sink, settings(progress_interval=0.1)))
        # Progress on every topic: each kind was listed and is watched at the cluster scope.
        wait_for(lambda: {t for t, _, _ in sink.progress} == TOPICS, timeout=60, what="every kind listed and watched")
        assert {t for t, _, _ in sink.progress} == TOPICS and running.error is None
        # A change made after the lists reaches the sink through the service account's watch.
        event = {"apiVersion": "v1", "kind": "Event", "type": "Normal", "reason": "Probe", "message": "watched as the bridge",
                 "metadata": {"name": "watched-as-the-bridge", "namespace": "faultline"},
                 "involvedObject": {"kind": "Pod", "name": "p", "namespace": "faultline", "uid": "uid-watched-as-the-bridge"}}  # fmt: skip
        manifests.apply(ops_applied, event)
        seen = wait_for(lambda: [r for r in sink.records if r.topic == "k8s.events" and b"watched as the bridge" in r.value],
                        timeout=30, what="the new event published")  # fmt: skip
        assert seen[0].key == "uid-watched-as-the-bridge"  # keyed by the object it is about (DESIGN, source records)
        running.stop()  # raises what stopped the bridge, if anything did
    finally:
        api.close()


def test_a_missing_rbac_rule_stops_the_bridge_with_the_rule_to_add(ops_applied, tmp_path):
    role = manifests.by_kind("ClusterRole", "faultline-bridge")
    partial = {**role, "metadata": {"name": "faultline-bridge-partial"}, "rules": [r for r in role["rules"] if "kueue.x-k8s.io" not in r["apiGroups"]]}
    for doc in (
        partial,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bridge-partial", "namespace": "faultline"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "bridge-partial"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "faultline-bridge-partial"},
         "subjects": [{"kind": "ServiceAccount", "name": "bridge-partial", "namespace": "faultline"}]},
    ):
        manifests.apply(ops_applied, doc)
    kubeconfig = token_kubeconfig(ops_applied, tmp_path / "kubeconfig", "faultline", "bridge-partial")
    started = time.monotonic()
    result = faultline("record", "--kubeconfig", str(kubeconfig), "--cluster", "c", "--out", str(tmp_path / "t.jsonl"))
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - started < 30
    assert "RBAC forbids the bridge to list workloads.kueue.x-k8s.io" in result.stderr
    assert 'User "system:serviceaccount:faultline:bridge-partial" cannot list resource "workloads"' in result.stderr  # the server's words
    assert '- apiGroups: ["kueue.x-k8s.io"]\n      resources: ["workloads"]\n      verbs: ["list", "watch"]' in result.stderr
    assert "Traceback" not in result.stderr


def test_the_bridge_as_its_service_account_survives_api_server_restarts(ops_applied, tmp_path, caplog):
    """A restarted API server answers 403 for a moment until its RBAC caches sync; a watch
    that was granted before retries it instead of stopping the bridge."""
    caplog.set_level(logging.DEBUG, logger="faultline.bridge")
    kubeconfig = token_kubeconfig(ops_applied, tmp_path / "kubeconfig", "faultline", "faultline-bridge")
    api = KubeApi(api_client(kubeconfig=str(kubeconfig)))
    sink = MemorySink()
    try:
        running = Running(Bridge(api, sink, settings(backoff_initial=0.05, backoff_max=0.5, progress_interval=0.1)))
        wait_for(lambda: {t for t, _, _ in sink.progress} == TOPICS, timeout=60, what="every kind watched")
        for _ in range(3):
            ops_applied.restart_apiserver()
            wait_for(lambda: running.error is not None or all(w.progress.live for w in running.bridge.watches), timeout=60, what="every watch live again")
            assert running.error is None, running.error
        running.stop()
    finally:
        api.close()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "faultline.bridge"]
    forbidden = [(i, m) for i, (_, m) in enumerate(messages) if "HTTP 403" in m and "recovered after" not in m]
    # Each 403 was retried and its watch came back: a "recovered" line of the same watch
    # follows it (a 403 that stopped a watch would leave none).
    for i, message in forbidden:
        watch = message.split(": ", 1)[0]
        assert any(m.startswith(f"{watch}: recovered after") for _, m in messages[i + 1 :]), message
    # An outage is logged once when it starts, however many 403s it retried (those are debug).
    starts = [m for level, m in messages if level >= logging.WARNING and "HTTP 403" in m]
    assert len(starts) <= len(running.bridge.watches) * 3, starts


@pytest.mark.parametrize("command", ["record", "run"])
def test_a_wrong_ca_fails_within_5s_with_the_cause_and_the_fix(apiserver, tmp_path, command):
    kubeconfig = wrong_ca_kubeconfig(apiserver, tmp_path)
    args = [command, "--kubeconfig", str(kubeconfig), "--cluster", "c"] + (["--out", str(tmp_path / "t.jsonl")] if command == "record" else [])
    result = faultline(*args, timeout=30)
    ended = time.time()
    assert result.returncode == 1, result.stderr
    # Measured from the start of the watch: starting Python and importing the client is
    # the machine's time (seconds on a loaded 2-core runner), not the bridge's.
    assert seconds_after_start(result, ended) < 5
    assert f"the API server at {apiserver.url} presented a certificate that the kubeconfig does not trust" in result.stderr
    assert "certificate-authority" in result.stderr and "Traceback" not in result.stderr


def test_rejected_credentials_fail_at_once(apiserver, tmp_path):
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig", token="not-a-token")
    result = faultline("record", "--kubeconfig", str(kubeconfig), "--cluster", "c", "--out", str(tmp_path / "t.jsonl"), timeout=30)
    assert result.returncode == 1 and seconds_after_start(result, time.time()) < 5
    assert "rejected the bridge's credentials" in result.stderr and "401" in result.stderr
