"""The source record: what the bridge writes to Kafka and what a trace line holds."""

from __future__ import annotations

from typing import Literal

import msgspec

from app.model.k8s import Timestamp

ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]

# Source topics (DESIGN.md); drivers add the configured prefix.
PODS = "k8s.pods"
EVENTS = "k8s.events"
JOBS = "k8s.jobs"
WORKLOADS = "k8s.workloads"
SOURCE_TOPICS = (PODS, EVENTS, JOBS, WORKLOADS)


class Envelope(msgspec.Struct, frozen=True):
    """One Kubernetes change. `object` stays raw until the topic says what it is."""

    type: ChangeType
    observed_at: Timestamp
    cluster: str
    object: msgspec.Raw


class TraceLine(msgspec.Struct, frozen=True):
    topic: str
    key: str
    value: msgspec.Raw
