"""Typed decoding of source records, in one pass, with a reason a person can act on
when it fails."""

from __future__ import annotations

from json.decoder import scanstring
from typing import Generic, TypeVar

import msgspec

from app.model.envelope import BOOKMARK, EVENTS, JOBS, PODS, WORKLOADS, RecordType, TraceLine
from app.model.facts import ATTEMPT_FACTS, FLEET_INPUTS, GANG_INPUTS, AttemptInput, FleetInput, GangStageInput
from app.model.k8s import Event, Job, Pod, Timestamp, Workload

SourceObject = Pod | Event | Job | Workload
T = TypeVar("T")


class TypedEnvelope(msgspec.Struct, Generic[T], frozen=True, gc=False):
    """The envelope with its object decoded as the view its topic names."""

    type: RecordType
    observed_at: Timestamp
    cluster: str
    object: T


class TypedTraceLine(msgspec.Struct, Generic[T], frozen=True, gc=False):
    topic: str
    key: str
    value: TypedEnvelope[T]


_OBJECT_TYPES: dict[str, type] = {PODS: Pod, EVENTS: Event, JOBS: Job, WORKLOADS: Workload}
_SOURCE = {topic: msgspec.json.Decoder(TypedEnvelope[kind]) for topic, kind in _OBJECT_TYPES.items()}
_TRACE = {topic: msgspec.json.Decoder(TypedTraceLine[kind]) for topic, kind in _OBJECT_TYPES.items()}
_TRACE_BY_TOPIC = {topic.encode(): decoder for topic, decoder in _TRACE.items()}


class BadRecord(ValueError):
    """A record that cannot be read; the message says what is wrong."""


# What a hostile record can make a decoder raise besides DecodeError: nesting deeper than
# the decoder's recursion limit (even in a field the views skip).
_UNREADABLE = (msgspec.DecodeError, RecursionError)


def _checked(topic: str, envelope: TypedEnvelope) -> TypedEnvelope:
    if not envelope.cluster or "/" in envelope.cluster:
        raise BadRecord(f"envelope: cluster {envelope.cluster!r} must be a non-empty name without '/'")
    if envelope.type == BOOKMARK:
        return envelope  # progress (SPEC R12.1): no object state
    if topic != EVENTS and not envelope.object.metadata.uid:
        raise BadRecord(f"{_OBJECT_TYPES[topic].__name__} object: metadata.uid is missing or empty")
    return envelope


def decode_source(topic: str, value: bytes) -> tuple[TypedEnvelope, SourceObject]:
    """The envelope and its typed object; BadRecord names what is wrong and where."""
    decoder = _SOURCE.get(topic)
    if decoder is None:
        raise BadRecord(f"unknown source topic {topic!r}: expected one of {', '.join(_OBJECT_TYPES)}")
    try:
        envelope = decoder.decode(value)
    except RecursionError:
        raise BadRecord("record nested too deeply to read") from None
    except msgspec.DecodeError as exc:
        where = "envelope" if "$.object" not in str(exc) else f"{_OBJECT_TYPES[topic].__name__} object"
        raise BadRecord(f"{where}: {exc}") from None
    return _checked(topic, envelope), envelope.object


_INTERNAL = {
    ATTEMPT_FACTS: msgspec.json.Decoder(AttemptInput),
    GANG_INPUTS: msgspec.json.Decoder(GangStageInput),
    FLEET_INPUTS: msgspec.json.Decoder(FleetInput),
}
_INTERNAL_ENCODER = msgspec.json.Encoder()


def decode_internal(topic: str, value: bytes) -> AttemptInput | GangStageInput | FleetInput:
    """A record of an internal re-key topic, as a stage wrote it (`encode_internal`)."""
    decoder = _INTERNAL.get(topic)
    if decoder is None:
        raise BadRecord(f"unknown internal topic {topic!r}: expected one of {', '.join(_INTERNAL)}")
    try:
        return decoder.decode(value)
    except _UNREADABLE as exc:
        raise BadRecord(f"{topic} record: {exc}") from None
    except ValueError as exc:  # a Struct's own check (GangInput: one object)
        raise BadRecord(f"{topic} record: {exc}") from None


def encode_internal(value: AttemptInput | GangStageInput | FleetInput) -> bytes:
    return _INTERNAL_ENCODER.encode(value)


_LINE = msgspec.json.Decoder(TraceLine)


def parse_trace_line(line: bytes) -> TraceLine:
    """A trace line's topic, key and (raw) value; BadRecord says why it is none. A value
    nested too deeply for the decoder is still found when the line is written as
    faultline writes traces (topic, key, then value), so that it reaches the stage that
    reads its topic and is dead-lettered there, as the worker would."""
    try:
        return _LINE.decode(line)
    except RecursionError:
        found = _shallow_trace_line(line)
        if found is None:
            raise BadRecord("not a trace record: nested too deeply to read, and not written as {\"topic\", \"key\", \"value\"}") from None
        return found
    except msgspec.DecodeError as exc:
        raise BadRecord(f"not a trace record: {exc}") from None


def _shallow_trace_line(line: bytes) -> TraceLine | None:
    """`{"topic": T, "key": K, "value": V}` read without decoding V (which is left as
    the rest of the line, its last brace taken off)."""
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if not text.startswith("{") or not text.endswith("}"):
        return None
    fields: dict[str, str] = {}
    at = 1
    for name in ("topic", "key"):
        found = _string_field(text, at, name)
        if found is None:
            return None
        fields[name], at = found
        at = _after(text, at, ",")
        if at is None:
            return None
    start = _string_field(text, at, "value", value=False)
    if start is None:
        return None
    return TraceLine(topic=fields["topic"], key=fields["key"], value=msgspec.Raw(text[start[1] : -1].strip().encode()))


def _after(text: str, at: int, token: str) -> int | None:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at + len(token) if text.startswith(token, at) else None


def _string_field(text: str, at: int, name: str, *, value: bool = True) -> tuple[str, int] | None:
    """`"name": "string"` at `at` -> (the string, the index after it); with `value=False`
    only `"name":` is read -> ("", the index after the colon)."""
    at = _after(text, at, '"')
    if at is None:
        return None
    try:
        found, at = scanstring(text, at)
    except ValueError:
        return None
    at = _after(text, at, ":") if found == name else None
    if at is None or not value:
        return ("", at) if at is not None else None
    at = _after(text, at, '"')
    if at is None:
        return None
    try:
        return scanstring(text, at)
    except ValueError:
        return None


def decode_trace_line(line: bytes) -> TypedTraceLine | None:
    """Fast path for a trace line that names its topic first (as faultline writes them):
    one decode for line, envelope and object. None means: take the careful path."""
    if line.startswith(b'{"topic":"'):
        start = 10
    elif line.startswith(b'{"topic": "'):
        start = 11
    else:
        return None
    decoder = _TRACE_BY_TOPIC.get(line[start : line.find(b'"', start)])
    if decoder is None:
        return None
    try:
        record = decoder.decode(line)
        _checked(record.topic, record.value)
    except (*_UNREADABLE, BadRecord):
        return None
    return record
