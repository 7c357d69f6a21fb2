"""Fixtures every test folder may use: a real Kubernetes API server (etcd + kube-apiserver,
ops/kube/local_apiserver.py), one per test session. Tests that use it are marked
`apiserver` (`pytest -m apiserver` runs them alone)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def local_apiserver() -> ModuleType:
    from ops.kube import local_apiserver

    return local_apiserver


@contextmanager
def running_apiserver(data_dir: Path, **options: Any) -> Iterator[Any]:
    """A LocalApiServer (`options` are its own) started in `data_dir`, stopped after; a
    start that fails fails the test with the server's words."""
    module = local_apiserver()
    server = module.LocalApiServer(data_dir, **options)
    try:
        server.start()
    except module.ApiServerError as exc:
        server.stop()
        pytest.fail(f"the local API server did not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running LocalApiServer with the bridge's CRDs installed. Its binaries come from
    $KUBEBUILDER_ASSETS, else they are built with Go once (the helper says so)."""
    # A pytest-managed dir (kept after the run) so the server logs survive a failure.
    with running_apiserver(tmp_path_factory.mktemp("apiserver")) as server:
        yield server
