"""Make a CRD of an operator's release small enough to keep here: the named schema nodes
(each a large embedded Kubernetes type, e.g. a PodTemplateSpec) are replaced by an object
that keeps any fields (`x-kubernetes-preserve-unknown-fields`); everything else, the
status schemas above all, stays as upstream wrote it.

    python tests/bridge/crds/trim.py UPSTREAM.yaml "SOURCE" spec.podSets[].template > OUT.yaml

SOURCE goes into the header (repository, tag, commit, path). The CRDs here (upstream's
license: Apache-2.0):
- kueue-v0.19.2-workloads.yaml: kubernetes-sigs/kueue v0.19.2 (8eab68778fc1b52affe165fdf5af29d1e9b4f3cb)
  config/components/crd/bases/kueue.x-k8s.io_workloads.yaml, trimmed at spec.podSets[].template
  (1.4 MB upstream, of which the two versions' pod templates are 1.2 MB);
- trainer-v2.3.0-trainjobs.yaml: kubeflow/trainer v2.3.0 (658725bdae5c7e3a0854d93ac6ff492e109a22ab)
  manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml, trimmed at spec.runtimePatches
  (pod template overrides, 0.5 MB upstream);
- jobset-v0.12.0-jobsets.yaml: kubernetes-sigs/jobset v0.12.0 (f22e565ac3cc3265c7c45ef67ecffdc689af5d77)
  config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml, trimmed at
  spec.replicatedJobs[].template.spec.template (the child Jobs' pod template; their
  podFailurePolicy and the JobSet's failurePolicy stay as upstream wrote them; 0.8 MB upstream);
- lws-v0.10.0-leaderworkersets.yaml: kubernetes-sigs/lws v0.10.0 (2161f38ff333f9e24d3c44adef7cd5d9787cac00)
  config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml, trimmed at
  spec.leaderWorkerTemplate.leaderTemplate and spec.leaderWorkerTemplate.workerTemplate (two pod
  templates, 1.3 MB upstream);
- trainer-v1.9.4-jaxjobs.yaml: kubeflow/trainer v1.9.4 (4445c12aa62e4345b0c2c6ac9b215a70eca46ed7)
  manifests/base/crds/kubeflow.org_jaxjobs.yaml, trimmed at spec.jaxReplicaSpecs{}.template (the
  replica pod template, 0.6 MB upstream).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml


def node_at(schema: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The parent schema and key of `path` (dots between properties, `[]` for items, `{}`
    for the values of a map, i.e. `additionalProperties`)."""
    parent = schema
    parts = path.split(".")
    for part in parts[:-1]:
        parent = parent["properties"][part.removesuffix("[]").removesuffix("{}")]
        if part.endswith("[]"):
            parent = parent["items"]
        elif part.endswith("{}"):
            parent = parent["additionalProperties"]
    return parent["properties"], parts[-1]


def trim(crd: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        for path in paths:
            properties, key = node_at(schema, path)
            old = properties[key]
            properties[key] = {
                "description": (old.get("description", "") + "\n\nTrimmed here: any fields are kept.").strip(),
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
            }
    return crd


def main(argv: list[str]) -> int:
    upstream, source, *paths = argv
    with open(upstream) as f:
        crd = yaml.safe_load(f)
    header = f"# {source}\n# trimmed by tests/bridge/crds/trim.py at: {', '.join(paths)} (any fields kept there); the rest as upstream.\n"
    sys.stdout.write(header + yaml.safe_dump(trim(crd, paths), sort_keys=False, width=120))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
