"""Pod (core/v1): the tracked resource of a pod task under an orchestrator's labels (SPEC
R1, R4.1), or a bare pod that asks for a GPU — one with no controller — as a workload
attempt of its own (R13.2, R13.4: the pod itself)."""

from __future__ import annotations

from typing import Final

from app.core.base.rules import Rules
from app.core.kinds.base import Api, Route, WorkloadKind, workload_attempt
from app.model.envelope import PODS
from app.model.facts import PodFacts

POD: Final = "Pod"


class Pod(WorkloadKind):
    api = Api(POD, "", ("v1",), "pods", PODS, optional=False)

    def records_attempt(self) -> bool:
        return False  # its records are the pods stage's, never k8s.jobs'

    def route_pod(self, pod: PodFacts, rules: Rules) -> Route | None:
        """A bare pod: no controller at all (a pod of another controller, a ReplicaSet's or
        a StatefulSet's, is no attempt)."""
        if pod.controlled:
            return None
        attempt = workload_attempt(pod.cluster, pod.namespace, POD, pod.name, pod.uid)
        return Route(attempt.key, attempt)
