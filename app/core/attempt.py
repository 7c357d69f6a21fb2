"""Attempt identity (SPEC R1): which attempt, if any, a labelled object belongs to."""

from __future__ import annotations

import msgspec

from app.core.rules import Rules
from app.model.decode import BadRecord


class AttemptId(msgspec.Struct, frozen=True):
    cluster: str
    namespace: str
    run: str
    action: str
    attempt: str

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.namespace}/{self.run}/{self.action}/{self.attempt}"


def attempt_of(cluster: str, namespace: str, labels: dict[str, str], rules: Rules) -> AttemptId | None:
    """R1: all four labels or no attempt at all (a partial match would credit one
    action's fault to another)."""
    keys = rules.labels
    run, action, attempt = labels.get(keys.run), labels.get(keys.action), labels.get(keys.attempt)
    if labels.get(keys.managed) != "true" or not run or not action or not attempt:
        return None
    for what, value in (("namespace", namespace), (f"label {keys.run}", run), (f"label {keys.action}", action), (f"label {keys.attempt}", attempt)):
        if "/" in value:  # it would split the attempt key differently (SPEC R11.3)
            raise BadRecord(f"{what} {value[:256]!r} contains '/', which separates the parts of an attempt key")
    return AttemptId(cluster=cluster, namespace=namespace, run=run, action=action, attempt=attempt)


def is_child_pod(labels: dict[str, str], rules: Rules) -> bool:
    """A pod an operator or a batch Job created is a child pod, never a pod task's own."""
    return not labels.keys().isdisjoint(rules.child_pod_labels)
