"""Absent CRDs, RBAC denials, bad credentials and bad settings: what the user sees."""

from __future__ import annotations

import logging
import time

import pytest

from app.bridge import settings as bridge_settings
from app.bridge.client import KubeApi, api_client
from app.bridge.errors import BridgeError, Forbidden, Unauthorized
from app.bridge.bridge import Bridge
from app.settings import SettingsError
from tests.bridge.helpers import MemorySink, Running, pod, settings, wait_for


def test_an_absent_crd_is_skipped_with_one_log_line_and_picked_up_once_installed(kube, api, caplog):
    caplog.set_level(logging.INFO, logger="faultline.bridge")
    kube.uninstall("rayjobs")
    kube.create("pods", pod("p"))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod,RayJob", crd_recheck=0.1)))
    wait_for(lambda: len(sink.records) == 1)  # the other kinds are not held up
    wait_for(lambda: running.bridge.watches[1].counts["absent_checks"] >= 4, what="several rechecks")
    absent = [r for r in caplog.records if "RayJob" in r.getMessage() and "not served" in r.getMessage()]
    assert len(absent) == 1
    assert "ray.io/v1 rayjobs" in absent[0].getMessage() and "CRD" in absent[0].getMessage()

    kube.install("rayjobs")
    kube.create("rayjobs", {"metadata": {"name": "rj", "namespace": "ml"}, "status": {"jobStatus": "RUNNING"}})
    wait_for(lambda: len(sink.records) == 2)
    running.stop()
    assert sink.records[1].topic == "k8s.jobs"
    assert any("now served as ray.io/v1" in r.getMessage() for r in caplog.records)
    assert not [r for r in kube.requests_of("watch", "rayjobs") if r.code == 404]


def test_forbidden_list_says_which_verb_resource_scope_and_the_rule_that_fixes_it(kube, api):
    kube.forbid("list", "pods")
    running = Running(Bridge(api, MemorySink(), settings()))
    running.join()
    error = running.error
    assert isinstance(error, Forbidden)
    message = str(error)
    assert "RBAC forbids the bridge to list pods (v1 Pod) at the cluster scope (all namespaces)" in message
    assert 'User "system:serviceaccount:faultline:faultline-bridge" cannot list resource "pods"' in message  # the server's words
    assert '- apiGroups: [""]\n      resources: ["pods"]\n      verbs: ["list", "watch"]' in message
    assert "ClusterRoleBinding" in message and "ops/k8s/rbac.yaml" in message


def test_forbidden_watch_in_a_namespace(kube, api):
    kube.forbid("watch", "workloads", "ml")
    running = Running(Bridge(api, MemorySink(), settings(namespaces="ml", kinds="Pod,Workload")))
    running.join()
    error = running.error
    assert isinstance(error, Forbidden)
    assert error.verb == "watch" and error.namespace == "ml" and error.kind.name == "Workload"
    message = str(error)
    assert 'to watch workloads.kueue.x-k8s.io (kueue.x-k8s.io/v1beta2 Workload) in namespace "ml"' in message
    assert '- apiGroups: ["kueue.x-k8s.io"]' in message and 'RoleBinding in namespace "ml"' in message


def test_rejected_credentials_stop_the_bridge_with_a_clear_error(kube, tmp_path):
    path = kube.write_kubeconfig(tmp_path / "kubeconfig")
    path.write_text(path.read_text().replace("fake-token", "wrong-token"))
    api = KubeApi(api_client(kubeconfig=str(path)))
    try:
        running = Running(Bridge(api, MemorySink(), settings(kinds="Pod")))
        running.join()
    finally:
        api.close()
    assert isinstance(running.error, Unauthorized)
    assert "401" in str(running.error) and "service account token" in str(running.error)


def test_a_missing_kubeconfig_names_the_file_and_the_flag(tmp_path):
    with pytest.raises(BridgeError) as raised:
        api_client(kubeconfig=str(tmp_path / "nope"))
    assert str(tmp_path / "nope") in str(raised.value) and "--kubeconfig" in str(raised.value)


def test_a_kubeconfig_context_is_honoured(kube, tmp_path):
    path = kube.write_kubeconfig(tmp_path / "kubeconfig", context="prod")
    text = path.read_text().replace("current-context: prod", "current-context: nowhere")
    path.write_text(text)
    with pytest.raises(BridgeError):
        api_client(kubeconfig=str(path))
    api = KubeApi(api_client(kubeconfig=str(path), context="prod"))
    try:
        kube.create("pods", pod("p"))
        sink = MemorySink()
        running = Running(Bridge(api, sink, settings(kinds="Pod")))
        wait_for(lambda: len(sink.records) == 1)
        running.stop()
    finally:
        api.close()


@pytest.mark.parametrize(
    ("overrides", "env", "expected"),
    [
        ({}, {}, "setting cluster is required: give --cluster NAME or set FAULTLINE_CLUSTER"),
        ({"cluster": "a/b"}, {}, "setting cluster = 'a/b' (from flag --cluster) is invalid"),
        ({"cluster": "a"}, {"FAULTLINE_NAMESPACES": "ml,,x"}, "(from environment variable FAULTLINE_NAMESPACES)"),
        ({"cluster": "a", "kinds": "Pod,CronJob"}, {}, "unknown kind(s) CronJob: expected some of Pod,"),
        ({"cluster": "a", "page_size": "0"}, {}, "expected int >= 1 and <= 10000; fix --page-size or FAULTLINE_PAGE_SIZE"),
        ({"cluster": "a", "backoff_initial": "5", "backoff_max": "1"}, {}, "raise --backoff-max"),
    ],
)
def test_bad_settings_name_the_setting_and_the_fix(overrides, env, expected):
    with pytest.raises(SettingsError) as raised:
        bridge_settings.load(overrides, env=env)
    assert expected in str(raised.value)


def test_settings_from_environment_and_flags():
    loaded = bridge_settings.load({"namespaces": "ml,infer"}, env={"FAULTLINE_CLUSTER": "prod-a", "FAULTLINE_WATCH_TIMEOUT": "60"})
    assert loaded.cluster == "prod-a" and loaded.watch_timeout == 60 and loaded.namespace_list() == ["ml", "infer"]


def test_the_bridge_knows_neither_kafka_nor_http_nor_the_pipeline():
    import subprocess
    import sys

    code = (
        "import sys, app.bridge.bridge, app.bridge.sinks; "
        "print(sorted(m for m in ('kafka', 'kubernetes', 'urllib3', 'app.replay', 'app.stream') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_stop_during_backoff_is_prompt(kube, api):
    kube.set_unavailable(True)
    running = Running(Bridge(api, MemorySink(), settings(kinds="Pod", backoff_initial=5, backoff_max=5)))
    wait_for(lambda: kube.requests_of("list", "pods"), what="a first try")
    time.sleep(0.1)
    started = time.monotonic()
    running.stop()
    assert time.monotonic() - started < 3.0


def test_the_heartbeat_file_is_touched_while_the_bridge_runs(kube, api, tmp_path):
    beat = tmp_path / "run" / "heartbeat"
    running = Running(Bridge(api, MemorySink(), settings(kinds="Pod", heartbeat_file=str(beat))))
    wait_for(beat.exists, what="the heartbeat file")
    first = beat.stat().st_mtime_ns
    running.stop()
    assert first > 0


def test_docs_list_every_bridge_setting():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "bridge.md").read_text()
    for info in bridge_settings.describe():
        assert f"`{info.flag}`" in doc and f"`{info.env}`" in doc, info.name
