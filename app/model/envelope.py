"""The source record: what the bridge writes to Kafka and what a trace line holds."""

from __future__ import annotations

from typing import Literal

import msgspec

from app.model.k8s import Timestamp

ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]
# SPEC R12.1: a progress record; its object is {apiVersion, kind, metadata: {resourceVersion}}.
BOOKMARK = "BOOKMARK"
RecordType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]

# Source topics (DESIGN.md); drivers add the configured prefix.
PODS = "k8s.pods"
EVENTS = "k8s.events"
JOBS = "k8s.jobs"
WORKLOADS = "k8s.workloads"
SOURCE_TOPICS = (PODS, EVENTS, JOBS, WORKLOADS)


class Envelope(msgspec.Struct, frozen=True):
    """A source record (DESIGN.md): one Kubernetes change as the bridge observed it —
    `type` ADDED/MODIFIED/DELETED, `observed_at` by the bridge's clock, `cluster`, and the
    object exactly as the API server served it — or, with `type` BOOKMARK, the bridge's
    progress (SPEC R12.1): every change of the kind `object.kind` it received before
    `observed_at` has been published and acknowledged; `object` is then only
    {apiVersion, kind, metadata: {resourceVersion}}, and the bridge writes it to every
    partition of the topic. `object` stays raw until the topic says what it is."""

    type: RecordType
    observed_at: Timestamp
    cluster: str
    object: msgspec.Raw


class TraceLine(msgspec.Struct, frozen=True):
    topic: str
    key: str
    value: msgspec.Raw
