"""Typed decoding of source records, with a reason a person can act on when it fails."""

from __future__ import annotations

import msgspec

from app.model.envelope import EVENTS, JOBS, PODS, WORKLOADS, Envelope
from app.model.k8s import Event, Job, Pod, Workload

SourceObject = Pod | Event | Job | Workload

_OBJECT_TYPES: dict[str, type] = {PODS: Pod, EVENTS: Event, JOBS: Job, WORKLOADS: Workload}
_ENVELOPE = msgspec.json.Decoder(Envelope)
_DECODERS = {topic: msgspec.json.Decoder(kind) for topic, kind in _OBJECT_TYPES.items()}


class BadRecord(ValueError):
    """A source record that cannot be read; the message says what is wrong."""


def decode_source(topic: str, value: bytes) -> tuple[Envelope, SourceObject]:
    decoder = _DECODERS.get(topic)
    if decoder is None:
        raise BadRecord(f"unknown source topic {topic!r}: expected one of {', '.join(_OBJECT_TYPES)}")
    try:
        envelope = _ENVELOPE.decode(value)
    except msgspec.DecodeError as exc:
        raise BadRecord(f"envelope: {exc}") from None
    try:
        obj = decoder.decode(envelope.object)
    except msgspec.DecodeError as exc:
        raise BadRecord(f"{_OBJECT_TYPES[topic].__name__} object: {exc}") from None
    if not envelope.cluster or "/" in envelope.cluster:
        raise BadRecord(f"envelope: cluster {envelope.cluster!r} must be a non-empty name without '/'")
    if topic != EVENTS and not obj.metadata.uid:
        raise BadRecord(f"{_OBJECT_TYPES[topic].__name__} object: metadata.uid is missing or empty")
    return envelope, obj
