"""The ops/k8s manifests, read and applied to an API server (tests on the real one)."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from tests.bridge import kustomize

MANIFESTS = Path(__file__).resolve().parents[2] / "ops" / "k8s"


def documents(names: str = "*.yaml", components: list[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) of every object `kubectl apply -k ops/k8s` applies (the
    README's command), in the order it applies them; `names`: only those of the files
    whose name matches; `components`: with these of ops/k8s's opt-in components."""
    return [(Path(file).name, doc) for file, doc in kustomize.build(MANIFESTS, components) if fnmatch(Path(file).name, names)]


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


def dry_run(kube: Any, doc: dict[str, Any]) -> dict[str, Any]:
    """Server-side dry run of applying `doc` (created or updated, as `kubectl apply
    --dry-run=server` would): validated strictly and admitted, nothing stored; the object
    as the server would store it."""
    path = f"{collection(doc)}/{doc['metadata']['name']}?dryRun=All&fieldManager=faultline-tests&force=true&fieldValidation=Strict"
    status, answer = kube.request("PATCH", path, doc, content_type="application/apply-patch+yaml")
    if status not in (200, 201):
        raise AssertionError(f"{doc['kind']} {doc['metadata']['name']}: HTTP {status}: {answer}")
    return answer
