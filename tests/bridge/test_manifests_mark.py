"""ops/k8s/mark (SPEC R18.3), read without a server: valid for Kubernetes, least privilege in
its Role, the Deployment hardened as the others, the admission policy naming the
ServiceAccount and condition the rest of the component and the settings name, and Kafka
over TLS reaching the mark when both components are used. (On a real API server:
tests/bridge/test_apiserver_mark.py.)"""

from __future__ import annotations

import re

import pytest

from app.core.actions.marking import GPU_FAULT_CONDITION
from app.mark import settings as mark_settings
from app.mark.metrics import METRICS
from app.mark.server import render
from app.mark.metrics import MarkMetrics
from tests.bridge import kustomize, manifests
from tests.bridge.markkube import MARK_SA, mark_documents
from tests.fleet import promtext

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (it belongs in the test extra)")


def doc(kind: str) -> dict:
    [found] = [d for d in mark_documents() if d["kind"] == kind]
    return found


def test_r18_3_every_manifest_of_the_component_is_valid_for_kubernetes_1_30_and_newer():
    for version in ("1.30.0", kubernetes_validate.latest_version() + ".0"):
        for d in mark_documents():
            kubernetes_validate.validate(d, version, strict=True)


def test_r18_3_the_role_grants_get_on_pods_and_patch_on_pods_status_only():
    role = doc("ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    ]
    binding, account = doc("ClusterRoleBinding"), doc("ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": account["metadata"]["namespace"]}]
    assert (account["metadata"]["namespace"], account["metadata"]["name"]) == MARK_SA
    # No other object of ops/k8s grants it anything.
    for _, other in manifests.documents():
        assert all(s.get("name") != MARK_SA[1] for s in other.get("subjects") or []), other["metadata"]["name"]


def test_r18_3_the_deployment_runs_the_mark_hardened_with_its_metrics_scraped():
    spec = doc("Deployment")["spec"]["template"]
    pod = spec["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["faultline", "mark"] and pod["serviceAccountName"] == MARK_SA[1]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert {"configMapRef": {"name": "faultline"}} in container["envFrom"]
    env = {e["name"]: e["value"] for e in container["env"]}
    port = env["FAULTLINE_MARK_METRICS_PORT"]
    assert env["FAULTLINE_MARK_METRICS_HOST"] == "0.0.0.0" and [p["containerPort"] for p in container["ports"]] == [int(port)]
    assert spec["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": "/metrics"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    known = {info.env for info in mark_settings.describe()}
    assert {name for name in env if name.startswith("FAULTLINE_MARK_")} <= known
    mark_settings.load(env=env)
    policy = doc("NetworkPolicy")["spec"]
    assert policy["podSelector"] == doc("Deployment")["spec"]["selector"] and policy["policyTypes"] == ["Ingress"]
    assert [p["port"] for rule in policy["ingress"] for p in rule["ports"]] == [int(port)]


def test_r18_3_the_admission_policy_names_the_component_s_service_account_and_the_default_condition():
    policy = doc("ValidatingAdmissionPolicy")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["marker"] == f'"system:serviceaccount:{MARK_SA[0]}:{MARK_SA[1]}"'
    assert variables["conditionType"] == f'"{GPU_FAULT_CONDITION}"' == f'"{mark_settings.MarkSettings().mark_condition_type}"'
    [condition] = policy["spec"]["matchConditions"]
    assert f'"system:serviceaccount:{MARK_SA[0]}:{MARK_SA[1]}"' in condition["expression"]
    assert condition["expression"].count(f'"{GPU_FAULT_CONDITION}"') == 2
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/status"]}
    ]
    assert doc("ValidatingAdmissionPolicyBinding")["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


def test_r18_3_kafka_over_tls_reaches_the_mark_when_its_component_comes_first():
    built = {(d["kind"], d["metadata"]["name"]): d for _, d in kustomize.build(manifests.MANIFESTS, ["mark", "kafka-tls"])}
    [container] = built[("Deployment", "faultline-mark")]["spec"]["template"]["spec"]["containers"]
    assert "FAULTLINE_SASL_PASSWORD" in {e["name"] for e in container["env"]}
    assert any(m["mountPath"] == "/etc/faultline/kafka" for m in container["volumeMounts"])
    top = (manifests.MANIFESTS / kustomize.KUSTOMIZATION).read_text()
    assert top.index("#   - mark") < top.index("#   - kafka-tls")  # offered in the order that works


def test_r18_1_the_mark_exposes_every_metric_it_names_in_prometheus_text_format():
    metrics = MarkMetrics()
    for _ in range(3):
        metrics.read()
    metrics.marked(0.2)
    metrics.marked(3.0)
    metrics.skipped("ended")
    metrics.refused()
    types, samples = promtext.parse(render(metrics))
    assert set(types) == set(METRICS)
    assert types["faultline_mark_seconds"] == "histogram" and types["faultline_mark_marks_total"] == "counter"
    assert promtext.value(samples, "faultline_mark_marks_total") == 2
    assert promtext.value(samples, "faultline_mark_skips_total", reason="ended") == 1
    assert promtext.value(samples, "faultline_mark_skips_total", reason="already_marked") == 0
    assert promtext.value(samples, "faultline_mark_seconds_bucket", le="0.25") == 1
    assert promtext.value(samples, "faultline_mark_seconds_bucket", le="5.0") == 2
    assert promtext.value(samples, "faultline_mark_seconds_bucket", le="+Inf") == 2
    assert promtext.value(samples, "faultline_mark_seconds_sum") == pytest.approx(3.2)


def test_r18_1_the_condition_type_setting_takes_what_the_api_server_takes():
    for good in ("faultline.io/GPUFault", "example.com/BadGPU", "GPUFault", "a.b-c.d/x_y.z"):
        assert mark_settings.load({"mark_condition_type": good}).mark_condition_type == good
    for bad in ("faultline.io/", "/GPUFault", "Faultline.IO/GPUFault", "faultline.io/GPU Fault", "a/b/c", "x" * 64):
        with pytest.raises(ValueError, match=re.escape("FAULTLINE_MARK_CONDITION_TYPE")):
            mark_settings.load({"mark_condition_type": bad})
