"""JSON Schemas of the source record and of every output record, generated from the msgspec types."""

from __future__ import annotations

from pathlib import Path

import msgspec

from app.bridge.records import BridgeGap, BridgePosition
from app.model.envelope import Envelope
from app.model.fleet_records import DERIVED_RECORD_TYPES
from app.model.records import ClassifiedFailure, DeadLetter, Fault, GangTransition, IdleQuota, StuckReadmission
from app.model.records_v1 import V1_RECORD_TYPES

RECORD_TYPES: tuple[type, ...] = (
    Envelope,
    Fault,
    ClassifiedFailure,
    GangTransition,
    StuckReadmission,
    IdleQuota,
    DeadLetter,
    *DERIVED_RECORD_TYPES,
    BridgeGap,
    BridgePosition,
    *V1_RECORD_TYPES,  # frozen: what older faultline wrote (docs/rules.md, *Records v2*)
)


# Records that carry no `schema` field of their own.
UNTAGGED: dict[type, str] = {Envelope: "faultline.SourceRecord/v1"}


def _schema_name(record: type) -> str:
    """The record's `schema` value: its msgspec tag, or the default of its `schema` field."""
    if record in UNTAGGED:
        return UNTAGGED[record]
    tag = record.__struct_config__.tag
    if isinstance(tag, str):
        return tag
    return next(f.default for f in msgspec.structs.fields(record) if f.name == "schema")


def schema_files() -> dict[str, bytes]:
    """File name -> schema bytes, e.g. `faultline.Fault.v1.json`."""
    files = {}
    for record in RECORD_TYPES:
        tag = _schema_name(record)  # e.g. "faultline.Fault/v1"
        schema = msgspec.json.schema(record)
        schema["title"] = tag
        files[tag.replace("/", ".") + ".json"] = msgspec.json.format(msgspec.json.encode(schema, order="sorted"), indent=2) + b"\n"
    return files


def write_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in schema_files().items():
        path = directory / name
        path.write_bytes(content)
        written.append(path)
    return written


def drift(directory: Path) -> list[str]:
    """Names of schema files that are missing or differ from the types."""
    stale = []
    for name, content in schema_files().items():
        path = directory / name
        if not path.exists() or path.read_bytes() != content:
            stale.append(name)
    return stale
