"""One attempt's evidence, from the attempt stage's own state: its pods with their trusted
faults, its current verdict and its revisions (the fleet page's attempt drawer)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from collections.abc import Mapping

from app.core.stages.attempts import AttemptState
from app.core.stages.pods import fault_record
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
    key: str  # the attempt key (SPEC R1, R13.3)
    cluster: str
    namespace: str
    current: ClassifiedFailure | None
    pods: list[PodEvidence]
    faults: list[Fault]  # by first_seen, then pod name, then Event
    verdicts: list[VerdictStep]  # revisions, oldest first


def attempt_state(states: Mapping[str, AttemptState], attempt_key: str) -> AttemptState | None:
    """The attempt stage's state of an attempt, by its attempt key: most are kept under
    it; a TrainJob's under its JobSet's key and a RayJob's under its RayCluster's (SPEC
    R13.4), found by the identity the state carries (a scan: for the embedded runner's
    page, one attempt at a time). A RayJob's tries have a state each: the one that wrote
    the verdict under the key asked for (`…/try/<n>` for a try retried, R16.4), else the
    first found."""
    state = states.get(attempt_key)
    if state is not None and state.identity is not None and state.identity.key == attempt_key:
        return state
    found = None
    for s in states.values():
        if s.emitted is not None and s.emitted.key == attempt_key:
            return s
        if found is None and s.identity is not None and s.identity.key == attempt_key:
            found = s
    return found


def evidence_of(attempt: AttemptState | None, rules_version: str) -> AttemptEvidence | None:
    """While the attempt stage keeps the attempt's state (R7.4: its retention); None
    before anything said which attempt it is (a JobSet's pods before the JobSet)."""
    if attempt is None or attempt.identity is None:
        return None
    ident = attempt.identity
    faults: list[Fault] = []
    pods = []
    for pod in attempt.pods.values():
        pods.append(PodEvidence(pod.name, pod.uid, pod.node_name, pod.phase + (" (deleted)" if pod.deleted else ""), len(pod.faults)))
        for attributed in pod.faults:  # fault Events and device-health faults (SPEC R14.2)
            faults.append(fault_record(ident.cluster, ident.namespace, attributed, ident.key, rules_version))
    faults.sort(key=lambda f: (f.fault.first_seen, f.fault.pod.name, f.key))
    return AttemptEvidence(
        key=ident.key,
        cluster=ident.cluster,
        namespace=ident.namespace,
        current=attempt.emitted,
        pods=sorted(pods, key=lambda p: (p.name, p.uid)),
        faults=faults,
        verdicts=[VerdictStep(*step) for step in attempt.revisions],
    )
