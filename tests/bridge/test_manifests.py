"""ops/k8s: every manifest is valid against the Kubernetes schemas (kubernetes-validate
ships them: no network), and the bridge's RBAC grants exactly what it watches."""

from __future__ import annotations

from collections import defaultdict

import pytest

from app.bridge.resources import KINDS
from tests.bridge.manifests import by_kind, documents

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (it belongs in the test extra)"
)

# The oldest Kubernetes minor still commonly run, and the newest the package knows.
VERSIONS = ["1.29.0", kubernetes_validate.latest_version() + ".0"]
READ = ["list", "watch"]
# The GPU event guard needs ValidatingAdmissionPolicy v1 and the node name in pod-bound
# tokens: Kubernetes 1.30 or newer.
NEEDS = {"ValidatingAdmissionPolicy": "1.30.0", "ValidatingAdmissionPolicyBinding": "1.30.0"}


def at_least(version: str, minimum: str) -> str:
    def parts(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split("."))

    return version if parts(version) >= parts(minimum) else minimum


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_for_kubernetes(version):
    docs = documents()
    assert {doc["kind"] for _, doc in docs} >= {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Job"}
    for name, doc in docs:
        target = at_least(version, NEEDS.get(doc["kind"], version))
        try:
            kubernetes_validate.validate(doc, target, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']} is invalid for Kubernetes {target}: {exc.message}")


def test_the_validator_rejects_a_misspelt_field():
    doc = by_kind("Deployment", "faultline-bridge")
    doc["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, VERSIONS[0], strict=True)


def test_the_bridge_role_reads_exactly_the_watched_resources():
    role = by_kind("ClusterRole", "faultline-bridge")
    granted: dict[str, set[str]] = defaultdict(set)
    for rule in role["rules"]:
        assert sorted(rule["verbs"]) == READ, rule  # read only
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, no nonResourceURLs
        for group in rule["apiGroups"]:
            granted[group].update(rule["resources"])
    watched: dict[str, set[str]] = defaultdict(set)
    for kind in KINDS:
        watched[kind.group].add(kind.plural)
    assert dict(granted) == dict(watched)

    binding = by_kind("ClusterRoleBinding", "faultline-bridge")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "faultline-bridge"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "faultline-bridge", "namespace": "faultline"}]


@pytest.mark.parametrize(("kind", "name"), [("Deployment", "faultline-bridge"), ("StatefulSet", "faultline-worker")])
def test_deployments_run_non_root_read_only_with_resources_and_probes(kind, name):
    deployment = by_kind(kind, name)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == name
    [container] = pod["containers"]
    security = container["securityContext"]
    assert security == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    assert "livenessProbe" in container
    assert container["command"] == ["faultline", name.removeprefix("faultline-")]
    assert {"configMapRef": {"name": "faultline"}} in container["envFrom"]


def test_the_bridge_is_a_single_replica_replaced_not_rolled():
    spec = by_kind("Deployment", "faultline-bridge")["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    env = {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}
    probe = " ".join(spec["template"]["spec"]["containers"][0]["livenessProbe"]["exec"]["command"])
    assert env["FAULTLINE_HEARTBEAT_FILE"] in probe


def test_the_worker_and_the_topics_job_have_no_kubernetes_api_access():
    for kind, name in (("StatefulSet", "faultline-worker"), ("Job", "faultline-topics")):
        pod = by_kind(kind, name)["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == "faultline-worker"
    bound = [doc for _, doc in documents() if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert all(s["name"] != "faultline-worker" for doc in bound for s in doc["subjects"])


def test_the_config_map_only_sets_known_settings():
    from app import settings as settings_mod
    from app.bridge import settings as bridge_settings

    known = {info.env for info in settings_mod.describe()} | {info.env for info in bridge_settings.describe()}
    data = by_kind("ConfigMap", "faultline")["data"]
    assert set(data) <= known, set(data) - known
    settings_mod.load(env=data)  # the values are valid settings
    bridge_settings.load(env=data)
