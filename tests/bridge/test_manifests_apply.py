"""`kubectl apply -k ops/k8s`, exactly as the README says, on an empty real API server
(etcd + kube-apiserver, no CRDs, nothing created before): every object is created, with
strict field validation, in the order kustomize builds them (tests/bridge/kustomize.py
reproduces the part of kustomize ops/k8s uses). And the opt-in components: Kafka over TLS
with SASL (a server-side dry run of the whole build), the brokers' NetworkPolicy."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app import settings as settings_mod
from tests.bridge import kustomize, manifests
from tests.conftest import running_apiserver

pytestmark = pytest.mark.apiserver

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ["mark", "kafka-tls", "kafka-brokers"]


@pytest.fixture(scope="module")
def empty_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An API server of its own, with nothing in it (not even the bridge's CRDs)."""
    with running_apiserver(tmp_path_factory.mktemp("empty-apiserver"), install_crds=False) as server:
        yield server


def readme_command() -> str:
    """The command the README's Deploy section gives for ops/k8s."""
    deploy = (ROOT / "README.md").read_text().split("## Deploy", 1)[1].split("\n## ", 1)[0]
    [command] = re.findall(r"^kubectl apply \S+ \S+", deploy, re.MULTILINE)
    return command


def test_the_readme_applies_ops_k8s_with_its_kustomization():
    assert readme_command() == "kubectl apply -k ops/k8s"
    assert "kubectl apply -f ops/k8s" not in (ROOT / "README.md").read_text()


def test_every_manifest_file_is_in_the_build_or_an_opt_in_component():
    files = {str(p.relative_to(manifests.MANIFESTS)) for p in manifests.MANIFESTS.rglob("*.yaml") if p.name != kustomize.KUSTOMIZATION}
    built = {file for file, _ in kustomize.build(manifests.MANIFESTS, COMPONENTS)}
    assert built == files
    components = sorted(p.parent.name for p in manifests.MANIFESTS.glob(f"*/{kustomize.KUSTOMIZATION}"))
    assert components == sorted(COMPONENTS)
    top = (manifests.MANIFESTS / kustomize.KUSTOMIZATION).read_text()
    assert all(f"#   - {name}" in top for name in COMPONENTS)  # each offered, commented out


def test_kubectl_apply_k_ops_k8s_creates_everything_on_an_empty_api_server(empty_apiserver):
    docs = [doc for _, doc in kustomize.build(manifests.MANIFESTS)]
    assert docs[0]["kind"] == "Namespace"
    for doc in docs:  # in order, each created at once: nothing waits on a later one
        status, answer = empty_apiserver.request("POST", manifests.collection(doc) + "?fieldValidation=Strict", doc)
        assert status == 201, f"{doc['kind']} {doc['metadata']['name']}: HTTP {status}: {answer}"
    for doc in docs:
        empty_apiserver.call("GET", f"{manifests.collection(doc)}/{doc['metadata']['name']}")


def test_the_order_holds_under_kustomizes_default_sort_too():
    """Should `sortOptions: fifo` be dropped (kustomize before v5 does not know it), the
    legacy order still puts the Namespace before everything in it."""
    top = kustomize.read(manifests.MANIFESTS / kustomize.KUSTOMIZATION)
    assert top["sortOptions"] == {"order": "fifo"}
    legacy = sorted((doc for _, doc in kustomize.build(manifests.MANIFESTS)), key=kustomize._legacy_key)
    assert legacy[0]["kind"] == "Namespace" and legacy[0]["metadata"]["name"] == "faultline"


def test_kafka_over_tls_with_sasl_validates_on_the_api_server(empty_apiserver, tmp_path):
    """The kafka-tls component on top of what is applied: a server-side dry run of every
    object (strict validation and admission); the pods
    that talk to Kafka get the password from the Secret and the CA as a file, and what the
    ConfigMap and the Secret give them are valid settings."""
    for doc in [doc for _, doc in kustomize.build(manifests.MANIFESTS)]:  # as the test above leaves it, whatever ran first
        status, answer = empty_apiserver.request("POST", manifests.collection(doc), doc)
        assert status in (201, 409), answer
    # A Job's pod template cannot change: the topics Job, done with, is deleted first (as
    # kafka-tls/kustomization.yaml says), so switching to TLS also covers a first install.
    # (Background: no garbage collector runs here to take the orphan finalizer off.)
    empty_apiserver.call("DELETE", "/apis/batch/v1/namespaces/faultline/jobs/faultline-topics?propagationPolicy=Background", expect=(200, 202))
    built = [doc for _, doc in kustomize.build(manifests.MANIFESTS, ["kafka-tls"])]
    stored = {(doc["kind"], doc["metadata"]["name"]): manifests.dry_run(empty_apiserver, doc) for doc in built}

    secret = stored[("Secret", "faultline-kafka")]
    assert set(secret["data"]) == {"sasl-password", "ca.crt"}
    config = stored[("ConfigMap", "faultline")]["data"]
    for kind, name in (("Deployment", "faultline-bridge"), ("StatefulSet", "faultline-worker"), ("Job", "faultline-topics")):
        pod = stored[(kind, name)]["spec"]["template"]["spec"]
        [container] = pod["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["FAULTLINE_SASL_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "faultline-kafka", "key": "sasl-password"}}
        volume = next(v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "faultline-kafka")
        mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
        assert mount["readOnly"] is True
        [item] = volume["secret"]["items"]
        assert f"{mount['mountPath']}/{item['path']}" == config["FAULTLINE_SSL_CAFILE"]
        assert {"configMapRef": {"name": "faultline"}} in container["envFrom"]
    # What a pod's environment holds, the CA file where the volume puts it: valid settings.
    ca = tmp_path / "ca.crt"
    ca.write_text("a certificate")
    env = {**config, "FAULTLINE_SSL_CAFILE": str(ca), "FAULTLINE_SASL_PASSWORD": "from the Secret"}
    settings = settings_mod.load(env=env)
    assert settings.security_protocol == "SASL_SSL" and settings.sasl_username and settings.ssl_cafile == str(ca)
    assert "FAULTLINE_SASL_PASSWORD" not in config  # a secret never in the ConfigMap


def test_the_brokers_network_policy_applies_in_the_brokers_namespace(empty_apiserver):
    """kafka-brokers is opt-in: it lives in the brokers' namespace, which is theirs."""
    [policy] = [doc for file, doc in kustomize.build(manifests.MANIFESTS, ["kafka-brokers"]) if file.startswith("kafka-brokers/")]
    namespace = policy["metadata"]["namespace"]
    manifests.apply(empty_apiserver, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    manifests.dry_run(empty_apiserver, policy)
