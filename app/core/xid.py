"""The Xid / SXid table (SPEC R3): severity, failure code and name of every known code.

The table is data: `XidTable` is part of the rule set (`Rules.xid`), hashed into
`rules_version` (SPEC R10.1), and a rule file may replace any of its fields.
"""

from __future__ import annotations

from typing import Final

import msgspec

from app.model.records import FaultKind, Severity

# Ranking used by the tail clamp (R2.3); the verdict's choice ranks differently (R6.3).
SEVERITY_RANK: Final[dict[Severity, int]] = {"USER": 1, "WARN": 2, "CRITICAL": 3}

_NAMES: Final[dict[int, str]] = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    140: "Unrecovered ECC Error",
    154: "GPU recovery action changed",
}

_CODES: Final[dict[int, str]] = {
    79: "GpuFallenOffBus",
    48: "GpuEccUncorrectable",
    94: "GpuEccUncorrectable",
    95: "GpuEccUncorrectable",
    140: "GpuEccUncorrectable",
    63: "GpuRowRemapPending",
    64: "GpuRowRemapPending",
    74: "GpuNvlinkError",
    119: "GpuGspError",
    120: "GpuGspError",
}


class XidTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Which Xid codes are the workload's (user), which make the device untrustworthy
    (critical); every other Xid is a warning. Every SXid is `sxid_severity`."""

    user: frozenset[int] = frozenset({13, 31, 43, 45})
    critical: frozenset[int] = frozenset({48, 62, 63, 64, 74, 79, 94, 95, 109, 119, 120, 140})
    sxid_severity: Severity = "CRITICAL"
    names: dict[int, str] = msgspec.field(default_factory=lambda: dict(_NAMES))
    codes: dict[int, str] = msgspec.field(default_factory=lambda: dict(_CODES))
    sxid_code: str = "GpuNvlinkError"
    default_code: str = "GpuXidError"

    def severity(self, kind: FaultKind, code: int) -> Severity:
        if kind == "SXID":
            return self.sxid_severity
        if code in self.critical:
            return "CRITICAL"
        if code in self.user:
            return "USER"
        return "WARN"

    def failure_code(self, kind: FaultKind, code: int) -> str:
        if kind == "SXID":
            return self.sxid_code
        return self.codes.get(code, self.default_code)

    def name(self, kind: FaultKind, code: int) -> str:
        if kind == "SXID":
            return f"SXid {code}"
        return self.names.get(code, f"Xid {code}")


DEFAULT_XID_TABLE: Final = XidTable()
