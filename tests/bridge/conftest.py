"""Fixtures for the bridge tests: the API server double, the real `kubernetes` client
pointed at it through a kubeconfig, and a check that no thread is left behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.bridge.client import KubeApi, api_client
from tests.bridge.apiserver import FakeKube
from tests.bridge.helpers import stop_leftover_bridges


@pytest.fixture(autouse=True)
def no_threads_left_behind() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    stop_leftover_bridges()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        if not left:
            return
        time.sleep(0.05)
    raise AssertionError(f"threads left behind: {[t.name for t in left]}")


@pytest.fixture
def kube_factory() -> Iterator[Callable[..., FakeKube]]:
    servers: list[FakeKube] = []

    def make(**kwargs: Any) -> FakeKube:
        server = FakeKube(**kwargs).start()
        servers.append(server)
        return server

    yield make
    stop_leftover_bridges()
    for server in servers:
        server.stop()


@pytest.fixture
def kube(kube_factory: Callable[..., FakeKube]) -> FakeKube:
    return kube_factory()


@pytest.fixture
def api_factory(tmp_path: Path) -> Iterator[Callable[[FakeKube], KubeApi]]:
    """The real client, configured from a kubeconfig file, as `faultline bridge --kubeconfig` does."""
    apis: list[KubeApi] = []

    def make(server: FakeKube) -> KubeApi:
        path = server.write_kubeconfig(tmp_path / f"kubeconfig-{len(apis)}")
        api = KubeApi(api_client(kubeconfig=str(path)))
        apis.append(api)
        return api

    yield make
    for api in apis:
        api.close()


@pytest.fixture
def api(kube: FakeKube, api_factory: Callable[[FakeKube], KubeApi]) -> KubeApi:
    return api_factory(kube)


@pytest.fixture
def real_api(apiserver: Any) -> Iterator[KubeApi]:
    """The real client on the real API server, as its admin (tests/conftest.py `apiserver`)."""
    api = KubeApi(api_client(kubeconfig=str(apiserver.kubeconfig)))
    yield api
    api.close()


@pytest.fixture(scope="session")
def ops_applied(apiserver: Any) -> Any:
    """The real API server with every ops/k8s manifest created with strict field
    validation, except the GPU event guard's binding (it would refuse the other tests'
    fault events; the guard's own tests bind it and unbind it)."""
    from tests.bridge import manifests

    docs = [doc for _, doc in manifests.documents()]
    # A namespace the manifests use without creating it is the user's (their Kafka's): it
    # exists in their cluster.
    created = {doc["metadata"]["name"] for doc in docs if doc["kind"] == "Namespace"}
    for name in sorted({d["metadata"].get("namespace") for d in docs} - created - {None}):
        manifests.apply(apiserver, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    for doc in docs:
        if doc["kind"] != "ValidatingAdmissionPolicyBinding":
            manifests.apply(apiserver, doc)
    return apiserver


@pytest.fixture
def bare_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real API server of its own, with no CRD installed: a test installs the operators'
    own CRDs (tests/bridge/crds) and sees the bridge find them. Costs a start (3-7 s)."""
    from tests.conftest import running_apiserver

    with running_apiserver(tmp_path_factory.mktemp("bare-apiserver"), install_crds=False) as server:
        yield server
