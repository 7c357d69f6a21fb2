"""The ops/k8s manifests, read and applied to an API server (tests on the real one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "ops" / "k8s"


def documents(names: str = "*.yaml") -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) of every manifest, in file order; Namespaces first, as
    `kubectl apply -f ops/k8s/` needs them."""
    docs = []
    for path in sorted(MANIFESTS.glob(names)):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return sorted(docs, key=lambda named: named[1]["kind"] != "Namespace")


def by_kind(kind: str, name: str) -> dict[str, Any]:
    return next(doc for _, doc in documents() if doc["kind"] == kind and doc["metadata"]["name"] == name)


def collection(doc: dict[str, Any]) -> str:
    """The API path that creates `doc` (the kinds ops/k8s uses)."""
    api_version, kind = doc["apiVersion"], doc["kind"]
    plural = kind.lower()[:-1] + "ies" if kind.endswith("y") else kind.lower() + "s"
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    namespace = doc["metadata"].get("namespace")
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def apply(kube: Any, doc: dict[str, Any]) -> None:
    """Create `doc` with strict field validation (an unknown or duplicate field is an
    error, not a warning); one that exists already is replaced."""
    status, answer = kube.request("POST", collection(doc) + "?fieldValidation=Strict", doc)
    if status == 409:
        path = f"{collection(doc)}/{doc['metadata']['name']}"
        current = kube.call("GET", path)
        doc = {**doc, "metadata": {**doc["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        kube.call("PUT", path + "?fieldValidation=Strict", doc)
    elif status != 201:
        raise AssertionError(f"{doc['kind']} {doc['metadata']['name']}: HTTP {status}: {answer}")
