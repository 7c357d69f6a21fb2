"""Which pods an attempt's failure may use (SPEC R4): what every kind shares (which of its
pods are its children is the kind's own, app/core/kinds)."""

from __future__ import annotations

from typing import Final

from app.model.facts import ContainerFacts, PodFacts

PRIMARY_ANNOTATIONS: Final = ("primary_container_name", "kubectl.kubernetes.io/default-container")


def declared_primary(annotations: dict[str, str]) -> str:
    """R4.4: Flyte's stamp wins over kubectl's default; no guessing beyond those two."""
    for key in PRIMARY_ANNOTATIONS:
        if annotations.get(key):
            return annotations[key]
    return ""


def _exited_zero(container: ContainerFacts | None) -> bool:
    return container is not None and container.terminated and container.exit_code == 0


def has_succeeded(pod: PodFacts) -> bool:
    """R4.3/R4.4: a pod that finished its work contributes nothing."""
    if pod.phase == "Succeeded":
        return True
    if pod.primary_container:
        primary = next((c for c in pod.containers if c.name == pod.primary_container), None)
        return _exited_zero(primary)
    statuses = [c for c in pod.containers if c.reported]
    return pod.phase == "Running" and bool(statuses) and all(_exited_zero(c) for c in statuses)
