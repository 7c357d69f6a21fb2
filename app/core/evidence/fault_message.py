"""Parse the machine tail of a `[gpu-health]` event message (SPEC R2.2, R2.3).

Parsing never raises: anything that is not a fault yields None.
"""

from __future__ import annotations

from typing import Final

import msgspec

from app.core.base.bounds import Trim
from app.core.base.xid import DEFAULT_XID_TABLE, SEVERITY_RANK, XidTable
from app.model.records import FaultKind, Severity

MARKER: Final = "[gpu-health]"
_WIRE_SEVERITY: Final[dict[str, Severity]] = {"user": "USER", "warn": "WARN", "critical": "CRITICAL"}


class ParsedMessage(msgspec.Struct, frozen=True):
    kind: FaultKind
    code: int
    severity: Severity
    gpu_uuid: str = ""
    gpu_index: int | None = None
    pci_bus_id: str = ""
    node: str = ""
    pid: int | None = None
    process: str = ""


def _int_or_none(text: str | None) -> int | None:
    # Base-10 digits only: `int()` would also take "+3", " 3" and "3_0".
    if text is None:
        return None
    digits = text[1:] if text.startswith("-") else text
    if not digits.isascii() or not digits.isdigit():
        return None
    return int(text)


def _tail_of(message: str) -> tuple[FaultKind, str] | None:
    # R2.3: the tail starts at the first " xid=", else at the first " sxid=".
    start = message.find(" xid=")
    if start >= 0:
        return "XID", message[start + 1 :]
    start = message.find(" sxid=")
    if start >= 0:
        return "SXID", message[start + 1 :]
    return None


def clamp_severity(table: Severity, wire: str | None) -> Severity:
    """R2.3: the tail may lower the table's severity, never raise it."""
    parsed = _WIRE_SEVERITY.get(wire or "")
    if parsed is None:
        return table
    return parsed if SEVERITY_RANK[parsed] <= SEVERITY_RANK[table] else table


def parse_fault_message(message: str, table: XidTable = DEFAULT_XID_TABLE) -> ParsedMessage | None:
    if MARKER not in message:
        return None
    found = _tail_of(message)
    if found is None:
        return None
    kind, tail = found
    fields: dict[str, str] = {}
    for token in tail.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    code = _int_or_none(fields.get("xid" if kind == "XID" else "sxid"))
    if code is None or code < 0:
        return None
    return ParsedMessage(
        kind=kind,
        code=code,
        severity=clamp_severity(table.severity(kind, code), fields.get("severity")),
        gpu_uuid=fields.get("gpu_uuid", ""),
        gpu_index=_int_or_none(fields.get("gpu_index")),
        pci_bus_id=fields.get("pci", ""),
        node=fields.get("node", ""),
        pid=_int_or_none(fields.get("pid")),
        process=fields.get("process", ""),
    )


def trimmed(parsed: ParsedMessage, trim: Trim) -> ParsedMessage:
    """A fault's tokens cut to `max_token_chars` (R11.5): the reporter's words, the one
    part of an Event kept as text."""
    if max(len(parsed.gpu_uuid), len(parsed.pci_bus_id), len(parsed.node), len(parsed.process)) <= trim.tokens:
        return parsed
    return msgspec.structs.replace(
        parsed,
        gpu_uuid=trim.token(parsed.gpu_uuid),
        pci_bus_id=trim.token(parsed.pci_bus_id),
        node=trim.token(parsed.node),
        process=trim.token(parsed.process),
    )
