"""One attempt's evidence, from the attempt stage's own state: its pods with their trusted
faults, its current verdict and its revisions (the fleet page's attempt drawer)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from app.core.attempt_stage import AttemptState, attempt_id_of
from app.model.records import ClassifiedFailure, ErrorKind, Fault


class PodEvidence(msgspec.Struct, frozen=True):
    name: str
    uid: str
    node: str = ""
    phase: str = ""
    faults: int = 0


class VerdictStep(msgspec.Struct, frozen=True):
    """One revision of an attempt's verdict."""

    revision: int
    code: str
    kind: ErrorKind
    generation: int
    terminal: bool
    failed_at: datetime


class AttemptEvidence(msgspec.Struct, frozen=True):
    key: str
    cluster: str
    namespace: str
    current: ClassifiedFailure | None
    pods: list[PodEvidence]
    faults: list[Fault]  # by first_seen, then pod name, then Event
    verdicts: list[VerdictStep]  # revisions, oldest first


def evidence_of(attempt: AttemptState | None, rules_version: str) -> AttemptEvidence | None:
    """While the attempt stage keeps the attempt's state (R7.4: its retention)."""
    if attempt is None:
        return None
    ident = attempt_id_of(attempt.key)
    faults: list[Fault] = []
    pods = []
    for pod in attempt.pods.values():
        pods.append(PodEvidence(pod.name, pod.uid, pod.node_name, pod.phase + (" (deleted)" if pod.deleted else ""), len(pod.faults)))
        for attributed in pod.faults:
            key = f"{ident.cluster}/{attributed.event_uid}"
            faults.append(Fault(key, ident.cluster, ident.namespace, attributed.event_uid, attempt.key, attributed.fault, rules_version))
    faults.sort(key=lambda f: (f.fault.first_seen, f.fault.pod.name, f.event_uid))
    return AttemptEvidence(
        key=attempt.key,
        cluster=ident.cluster,
        namespace=ident.namespace,
        current=attempt.emitted,
        pods=sorted(pods, key=lambda p: (p.name, p.uid)),
        faults=faults,
        verdicts=[VerdictStep(*step) for step in attempt.revisions],
    )
