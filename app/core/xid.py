"""The Xid / SXid table (SPEC R3): severity, failure code and name of every known code.

This module is data. It is hashed into `rules_version` (SPEC R10.1), so any edit here
names a new rule set.
"""

from __future__ import annotations

from typing import Final

from app.model.records import FaultKind, Severity

USER_XIDS: Final = frozenset({13, 31, 43, 45})
CRITICAL_XIDS: Final = frozenset({48, 62, 63, 64, 74, 79, 94, 95, 109, 119, 120, 140})

XID_NAMES: Final[dict[int, str]] = {
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

XID_CODES: Final[dict[int, str]] = {
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
SXID_CODE: Final = "GpuNvlinkError"
DEFAULT_CODE: Final = "GpuXidError"

# Ranking used by the tail clamp (R2.3) and by the verdict's choice (R6.3 ranks differently).
SEVERITY_RANK: Final[dict[Severity, int]] = {"USER": 1, "WARN": 2, "CRITICAL": 3}


def table_severity(kind: FaultKind, code: int) -> Severity:
    if kind == "SXID":
        return "CRITICAL"
    if code in CRITICAL_XIDS:
        return "CRITICAL"
    if code in USER_XIDS:
        return "USER"
    return "WARN"


def failure_code(kind: FaultKind, code: int) -> str:
    if kind == "SXID":
        return SXID_CODE
    return XID_CODES.get(code, DEFAULT_CODE)


def fault_name(kind: FaultKind, code: int) -> str:
    if kind == "SXID":
        return f"SXid {code}"
    return XID_NAMES.get(code, f"Xid {code}")


def table_fingerprint() -> dict[str, object]:
    """Everything in this table, as plain data, for the rules_version hash."""
    return {
        "user": sorted(USER_XIDS),
        "critical": sorted(CRITICAL_XIDS),
        "names": {str(k): v for k, v in sorted(XID_NAMES.items())},
        "codes": {str(k): v for k, v in sorted(XID_CODES.items())},
        "sxid_code": SXID_CODE,
        "default_code": DEFAULT_CODE,
    }
