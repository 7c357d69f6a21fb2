"""Fixtures every test folder may use: a real Kubernetes API server (etcd + kube-apiserver,
ops/kube/local_apiserver.py), one per test session. Tests that use it are marked
`apiserver` (`pytest -m apiserver` runs them alone)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_ops_module(relative: str) -> ModuleType:
    """A standalone module of ops/ (not a package), loaded by path once per process."""
    path = ROOT / relative
    name = "faultline_ops_" + path.stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def local_apiserver() -> Any:
    return load_ops_module("ops/kube/local_apiserver.py")


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running LocalApiServer with the bridge's CRDs installed. Its binaries come from
    $KUBEBUILDER_ASSETS, else they are built with Go once (the helper says so)."""
    module = local_apiserver()
    # A pytest-managed dir (kept after the run) so the server logs survive a failure.
    server = module.LocalApiServer(tmp_path_factory.mktemp("apiserver"))
    try:
        server.start()
    except module.ApiServerError as exc:
        server.stop()
        pytest.fail(f"the local API server did not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
