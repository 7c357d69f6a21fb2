"""What `kubectl apply -k DIR` applies, and in which order: the part of kustomize that
ops/k8s uses, reproduced from its documentation and source (there is no kubectl on the
test machines). Anything else in a kustomization is refused, so a field the manifests
start to use fails here instead of being silently ignored.

Reproduced (kubernetes-sigs/kustomize; kubectl.docs.kubernetes.io/references/kustomize):
- `resources`: files (their documents in file order) and directories holding a
  kustomization, built recursively and inserted in place, in list order;
- `components` (kind Component): accumulated after the resources (and generators), each
  adding its resources and then transforming everything accumulated so far with its
  patches (kustomize v5.1, PR #5170);
- `patches` with a `target` (kind, name, namespace, group, version: anchored regular
  expressions, api/types/selector.go) and an inline JSON 6902 patch (add, replace, remove;
  `-` appends to a list);
- `sortOptions.order`: `fifo` keeps the order things were loaded in; `legacy` (the
  default) sorts by kind with the orderFirst/orderLast lists of api/resid/gvk.go, then by
  group_version_kind, then by the object's id (api/resmap/idslice.go; namespace and name
  here, which orders the same kind alike). Only the top-level kustomization's counts.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

Doc = dict[str, Any]
KUSTOMIZATION = "kustomization.yaml"
SUPPORTED = {"apiVersion", "kind", "resources", "components", "patches", "sortOptions"}

# kubernetes-sigs/kustomize api/resid/gvk.go: orderFirst, orderLast.
ORDER_FIRST = [
    "Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount", "PodSecurityPolicy",
    "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap", "Secret", "Service", "LimitRange",
    "PriorityClass", "PersistentVolume", "PersistentVolumeClaim", "Deployment", "StatefulSet", "CronJob",
    "PodDisruptionBudget",
]  # fmt: skip
ORDER_LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]


class Unsupported(Exception):
    """The kustomization uses something this reproduction does not: extend it, or keep the
    manifests to what it does."""


def read(path: Path) -> Doc:
    doc = yaml.safe_load(path.read_text()) or {}
    unknown = set(doc) - SUPPORTED
    if unknown:
        raise Unsupported(f"{path}: {sorted(unknown)}")
    return doc


def build(folder: Path, components: list[str] | None = None) -> list[tuple[str, Doc]]:
    """(the file each came from, relative to `folder`; the object) for every object, in
    the order `kubectl apply -k folder` applies them. `components`: the list of the
    top-level kustomization's `components` instead of its own (what uncommenting it does)."""
    top = read(folder / KUSTOMIZATION)
    if components is not None:
        top = {**top, "components": components}
    built = _accumulate(folder, top, folder, expect="Kustomization")
    order = (top.get("sortOptions") or {}).get("order", "legacy")
    if order == "fifo":
        return built
    if order != "legacy":
        raise Unsupported(f"sortOptions.order {order!r}")
    return sorted(built, key=lambda named: _legacy_key(named[1]))


def _accumulate(folder: Path, kustomization: Doc, root: Path, expect: str) -> list[tuple[str, Doc]]:
    if kustomization.get("kind", "Kustomization") != expect:
        raise Unsupported(f"{folder}: kind {kustomization.get('kind')!r} where a {expect} belongs")
    out: list[tuple[str, Doc]] = []
    for entry in kustomization.get("resources") or []:
        path = folder / entry
        if path.is_dir():
            out += _accumulate(path, read(path / KUSTOMIZATION), root, expect="Kustomization")
        else:
            out += [(str(path.relative_to(root)), doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    for entry in kustomization.get("components") or []:
        path = folder / entry
        component = read(path / KUSTOMIZATION)
        out += _accumulate(path, {**component, "patches": []}, root, expect="Component")
        out = _patched(path, component.get("patches") or [], out)
    return _patched(folder, kustomization.get("patches") or [], out)


def _patched(folder: Path, patches: list[Doc], docs: list[tuple[str, Doc]]) -> list[tuple[str, Doc]]:
    for patch in patches:
        if set(patch) != {"target", "patch"}:
            raise Unsupported(f"{folder}: a patch with {sorted(patch)} (only an inline patch with a target)")
        operations = yaml.safe_load(patch["patch"])
        if not isinstance(operations, list):
            raise Unsupported(f"{folder}: a strategic-merge patch (only JSON 6902)")
        hits = [i for i, (_, doc) in enumerate(docs) if _selected(patch["target"], doc)]
        if not hits:  # kustomize says nothing; a patch that misses its target is a mistake here
            raise AssertionError(f"{folder}: the patch of {patch['target']} matches no object")
        for i in hits:
            name, doc = docs[i]
            docs[i] = (name, _json6902(copy.deepcopy(doc), operations))
    return docs


def _selected(target: Doc, doc: Doc) -> bool:
    unknown = set(target) - {"kind", "name", "namespace", "group", "version"}
    if unknown:
        raise Unsupported(f"patch target fields {sorted(unknown)}")
    group, _, version = doc["apiVersion"].rpartition("/")
    have = {"kind": doc["kind"], "name": doc["metadata"]["name"], "namespace": doc["metadata"].get("namespace", ""),
            "group": group, "version": version}  # fmt: skip
    return all(re.fullmatch(pattern, have[field]) for field, pattern in target.items())


def _json6902(doc: Doc, operations: list[Doc]) -> Doc:
    for op in operations:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if op["op"] in ("add", "replace") and isinstance(node, list):
            if last == "-" and op["op"] == "add":
                node.append(op["value"])
            elif op["op"] == "add":
                node.insert(int(last), op["value"])
            else:
                node[int(last)] = op["value"]
        elif op["op"] == "add":
            node[last] = op["value"]
        elif op["op"] == "replace":
            if last not in node:
                raise AssertionError(f"replace {op['path']}: no such field")
            node[last] = op["value"]
        elif op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        else:
            raise Unsupported(f"JSON patch op {op['op']!r}")
    return doc


def _legacy_key(doc: Doc) -> tuple[int, str, str, str]:
    kind = doc["kind"]
    if kind in ORDER_FIRST:
        rank = -len(ORDER_FIRST) + ORDER_FIRST.index(kind)
    elif kind in ORDER_LAST:
        rank = 1 + ORDER_LAST.index(kind)
    else:
        rank = 0
    group, _, version = doc["apiVersion"].rpartition("/")
    gvk = "_".join([group or "~G", version or "~V", kind])
    return rank, gvk, doc["metadata"].get("namespace", ""), doc["metadata"]["name"]
