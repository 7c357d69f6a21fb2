"""The Xid / SXid table (SPEC R3, R14.3): severity, failure code, name and NVIDIA's
recommended immediate action of every known code.

The table is data: `XidTable` is part of the rule set (`Rules.xid`), hashed into
`rules_version` (SPEC R10.1), and a rule file may replace any of its fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal, get_args

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

# R14.3: the catalogue's "Resolution Bucket (Immediate Action)" values, plus UNKNOWN (it
# gives none), from the weakest to the strongest; `strongest` ranks by this order. Why
# this order: it is the catalogue's escalation ladder (RESTART_APP: "RESET_GPU or
# RESTART_BM is not deemed necessary"), each step taking more out of service — nothing,
# the application, one GPU, the node, the bare-metal host, then people at the hardware
# or NVIDIA support. A bucket whose step depends on what a workflow finds ranks by the
# largest step its guidance can end in, just below that step given outright, so a
# quarantine candidate's advice never understates; XID_154(_EVAL) defer to the Xid 154
# line, a fault of its own with its own action.
XidAction = Literal[
    "UNKNOWN",  # the catalogue gives no immediate action for this code
    "IGNORE",  # no action required
    "XID_154",  # follow the guidance the Xid 154 line reports
    "XID_154_EVAL",  # the Xid 154's action if one is seen, else RESTART_APP (NVLink5 decode sheet)
    "RESTART_APP",
    "WORKFLOW_XID_45",  # alone: restart the fabric manager; with other Xids: follow those
    "CHECK_UVM",  # RESET_GPU if UVM/vGPU is used, else IGNORE
    "RESET_GPU",
    "WORKFLOW_NVLINK5_ERR",  # decode the 144-150 message: up to RESET_GPU (link fatal: drain, then reset)
    "WORKFLOW_XID_48",  # alone: RESET_GPU; with Xid 63/64: drain and reset
    "RESTART_VM",  # the VM owning the GPU, i.e. the node when nodes are VMs
    "WORKFLOW_NVLINK_ERR",  # decode Xid 74's registers: a GPU reset or a node reboot clears it
    "RESTART_BM",  # restart the bare-metal host
    "UPDATE_SWFW",  # update driver and firmware
    "CHECK_MECHANICALS",  # check the device's seating and connections
    "CONTACT_SUPPORT",
]
ACTION_STRENGTH: Final[tuple[XidAction, ...]] = get_args(XidAction)
_STRENGTH: Final[dict[str, int]] = {action: rank for rank, action in enumerate(ACTION_STRENGTH)}


def strongest(actions: Iterable[str]) -> XidAction:
    """The strongest of `actions` by `ACTION_STRENGTH` (R14.3: a quarantine candidate's
    action among its counted faults), whatever their order; UNKNOWN when there are none.
    A string outside the vocabulary counts as UNKNOWN."""
    return ACTION_STRENGTH[max((_STRENGTH.get(action, 0) for action in actions), default=0)]


# NVIDIA's Xid catalogue for Ampere and newer GPUs, sheet "Xids": (code, Description,
# Resolution Bucket (Immediate Action)) for every row, codes 1-172. Source: NVIDIA,
# "Analyzing Xid Errors with the Xid Catalog",
# https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (the page's table
# of its Xid-Catalog.xlsx; the page carries no date), in the revision that
# leptonai/gpud transcribed on 2025-10-29 (components/accelerator/nvidia/xid/
# catalog_generated.go, "Generated at 2025-10-29T00:35:32Z", unchanged at its snapshot
# 4a8de33a of 2026-08-22). Transcribed from gpud's machine-readable copy and checked row
# by row against a stored copy of NVIDIA's page: they agree on every row.
# Description None: the catalogue says "Unused" (deprecated, or Volta and older). Action
# None: the row's bucket is empty (162-172 in this revision). Xids 144-150's bucket says
# to decode the message on the "Xid 144-150 Decode" sheet; faultline does not, so they
# keep WORKFLOW_NVLINK5_ERR.
_CATALOGUE: Final[tuple[tuple[int, str | None, XidAction | None], ...]] = (
    (1, None, "CONTACT_SUPPORT"),
    (2, None, "CONTACT_SUPPORT"),
    (3, None, "CONTACT_SUPPORT"),
    (4, None, "CONTACT_SUPPORT"),
    (5, None, "CONTACT_SUPPORT"),
    (6, None, "CONTACT_SUPPORT"),
    (7, None, "CONTACT_SUPPORT"),
    (8, "GPU stopped processing", "RESTART_APP"),
    (9, None, "CONTACT_SUPPORT"),
    (10, None, "CONTACT_SUPPORT"),
    (11, "Invalid or corrupted push buffer stream", "RESTART_APP"),
    (12, None, "CONTACT_SUPPORT"),
    (13, "Graphics Engine Exception", "RESTART_APP"),
    (14, None, "IGNORE"),
    (15, None, "CONTACT_SUPPORT"),
    (16, None, "CONTACT_SUPPORT"),
    (17, None, "CONTACT_SUPPORT"),
    (18, None, "CONTACT_SUPPORT"),
    (19, None, "CONTACT_SUPPORT"),
    (20, None, "CONTACT_SUPPORT"),
    (21, None, "CONTACT_SUPPORT"),
    (22, None, "CONTACT_SUPPORT"),
    (23, None, "CONTACT_SUPPORT"),
    (24, None, "CONTACT_SUPPORT"),
    (25, "Invalid or illegal push buffer stream", "RESTART_APP"),
    (26, None, "CONTACT_SUPPORT"),
    (27, None, "CONTACT_SUPPORT"),
    (28, None, "CONTACT_SUPPORT"),
    (29, None, "CONTACT_SUPPORT"),
    (30, None, "CONTACT_SUPPORT"),
    (31, "GPU memory page fault", "RESTART_APP"),
    (32, "Invalid or corrupted push buffer stream", "RESTART_APP"),
    (33, None, "CONTACT_SUPPORT"),
    (34, None, "CONTACT_SUPPORT"),
    (35, None, "CONTACT_SUPPORT"),
    (36, None, "CONTACT_SUPPORT"),
    (37, "Driver firmware error", "IGNORE"),
    (38, "Driver firmware error", "IGNORE"),
    (39, "Copy Engine Exception", "RESTART_APP"),
    (40, "Copy Engine Exception", "RESTART_APP"),
    (41, "Copy Engine Exception", "RESTART_APP"),
    (42, None, "CONTACT_SUPPORT"),
    (43, "GPU stopped processing", "IGNORE"),
    (44, "Graphics Engine fault during context switch", "IGNORE"),
    (45, "Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45"),
    (46, "GPU stopped processing", "RESET_GPU"),
    (47, None, "CONTACT_SUPPORT"),
    (48, "Double Bit ECC Error", "WORKFLOW_XID_48"),
    (49, None, "CONTACT_SUPPORT"),
    (50, None, "CONTACT_SUPPORT"),
    (51, None, "CONTACT_SUPPORT"),
    (52, None, "CONTACT_SUPPORT"),
    (53, None, "CONTACT_SUPPORT"),
    (54, "Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS"),
    (55, None, "CONTACT_SUPPORT"),
    (56, None, "CONTACT_SUPPORT"),
    (57, None, "CONTACT_SUPPORT"),
    (58, None, "CONTACT_SUPPORT"),
    (59, None, "CONTACT_SUPPORT"),
    (60, "Video processor exception", "RESTART_APP"),
    (61, None, "CONTACT_SUPPORT"),
    (62, "Internal micro-controller halt (newer drivers)", "RESET_GPU"),
    (63, "GPU memory remapping event", "IGNORE"),
    (64, "GPU memory remapping failure", "RESET_GPU"),
    (65, None, "CONTACT_SUPPORT"),
    (66, "Illegal access by driver", "IGNORE"),
    (67, "Illegal access by driver", "IGNORE"),
    (68, "NVDEC0 Exception", "RESTART_APP"),
    (69, "Graphics Engine class error", "RESTART_APP"),
    (70, "CE3: Unknown Error", "RESTART_APP"),
    (71, "CE4: Unknown Error", "RESTART_APP"),
    (72, "CE5: Unknown Error", "RESTART_APP"),
    (73, None, "CONTACT_SUPPORT"),
    (74, "NVLINK Error", "WORKFLOW_NVLINK_ERR"),
    (75, "CE6: Unknown Error", "RESTART_APP"),
    (76, "CE7: Unknown Error", "RESTART_APP"),
    (77, "CE8: Unknown Error", "RESTART_APP"),
    (78, "vGPU Start Error", "UPDATE_SWFW"),
    (79, "GPU has fallen off the bus", "RESTART_BM"),
    (80, "Corrupted data sent to GPU", "RESTART_APP"),
    (81, None, "CONTACT_SUPPORT"),
    (82, "NVJPG0 Error", "RESTART_APP"),
    (83, "NVDEC1 Error", "RESTART_APP"),
    (84, "NVDEC2 Error", "RESTART_APP"),
    (85, "CE9: Unknown Error", "RESTART_APP"),
    (86, "OFA Exception", "RESTART_APP"),
    (87, None, "CONTACT_SUPPORT"),
    (88, "NVDEC3 Error", "RESTART_APP"),
    (89, "NVDEC4 Error", "RESTART_APP"),
    (90, None, "CONTACT_SUPPORT"),
    (91, None, "CONTACT_SUPPORT"),
    (92, "High single-bit ECC error rate", "IGNORE"),
    (93, "Non-fatal violation of provisioned InfoROM wear limit", "IGNORE"),
    (94, "Contained memory error", "RESTART_APP"),
    (95, "Uncontained memory error", "RESET_GPU"),
    (96, "NVDEC5 Error", "RESTART_APP"),
    (97, "NVDEC6 Error", "RESTART_APP"),
    (98, "NVDEC7 Error", "RESTART_APP"),
    (99, "NVJPG1 Error", "RESTART_APP"),
    (100, "NVJPG2 Error", "RESTART_APP"),
    (101, "NVJPG3 Error", "RESTART_APP"),
    (102, "NVJPG4 Error", "RESTART_APP"),
    (103, "NVJPG5 Error", "RESTART_APP"),
    (104, "NVJPG6 Error", "RESTART_APP"),
    (105, "NVJPG7 Error", "RESTART_APP"),
    (106, "SMBPBI Test Message", "IGNORE"),
    (107, "SMBPBI Test Message Silent", "IGNORE"),
    (108, None, "IGNORE"),
    (109, "Context Switch Timeout Error", "RESET_GPU"),
    (110, "Security Fault Error", "RESET_GPU"),
    (111, None, "CONTACT_SUPPORT"),
    (112, None, "CONTACT_SUPPORT"),
    (113, None, "CONTACT_SUPPORT"),
    (114, None, "CONTACT_SUPPORT"),
    (115, None, "CONTACT_SUPPORT"),
    (116, None, "CONTACT_SUPPORT"),
    (117, None, "CONTACT_SUPPORT"),
    (118, None, "CONTACT_SUPPORT"),
    (119, "GSP RPC Timeout", "RESET_GPU"),
    (120, "GSP Error", "RESET_GPU"),
    (121, "C2C Error", "IGNORE"),
    (122, None, "CONTACT_SUPPORT"),
    (123, None, "CONTACT_SUPPORT"),
    (124, None, "CONTACT_SUPPORT"),
    (125, None, "CONTACT_SUPPORT"),
    (126, "CE10: Unknown Error", "RESTART_APP"),
    (127, "CE11: Unknown Error", "RESTART_APP"),
    (128, "CE12: Unknown Error", "RESTART_APP"),
    (129, "CE13: Unknown Error", "RESTART_APP"),
    (130, "CE14: Unknown Error", "RESTART_APP"),
    (131, "CE15: Unknown Error", "RESTART_APP"),
    (132, "CE16: Unknown Error", "RESTART_APP"),
    (133, "CE17: Unknown Error", "RESTART_APP"),
    (134, "CE18: Unknown Error", "RESTART_APP"),
    (135, "CE19: Unknown Error", "RESTART_APP"),
    (136, "Link Training Failed", "RESET_GPU"),
    (137, "NVLink Privilege Error", "IGNORE"),
    (138, None, "CONTACT_SUPPORT"),
    (139, "OFA1 Error", "RESTART_APP"),
    (140, "ECC Unrecovered Error", "RESET_GPU"),
    (141, "CUDA Fast Path Error", "IGNORE"),
    (142, "NVENC3 Error", "CONTACT_SUPPORT"),
    (143, "GPU Initialization Error", "RESET_GPU"),
    (144, "NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR"),
    (145, "NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR"),
    (146, "NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR"),
    (147, "NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR"),
    (148, "NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR"),
    (149, "NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR"),
    (150, "NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR"),
    (151, "Key rotation Error", "RESTART_VM"),
    (152, "DLA SMMU Error", "IGNORE"),
    (153, "DLA timeout Error", "IGNORE"),
    (154, "GPU Recovery Action Changed", "XID_154"),
    (155, "NVLINK: SW Defined Error", "RESET_GPU"),
    (156, "Resource Retirement Event", "RESET_GPU"),
    (157, "Resource Retirement Failure", "IGNORE"),
    (158, "GPU Fatal Timeout", "RESET_GPU"),
    (159, "CHI Non-Data Error", "CHECK_UVM"),
    (160, "Channel Retirement Event", "IGNORE"),
    (161, "Channel Retirement Failure", "IGNORE"),
    (162, "Power Smoothing HW Circuitry capability reengaged", None),
    (163, "Power Smoothing HW Circuitry capability disengaged", None),
    (164, "Power Smoothing HW Circuitry low lifetime reached", None),
    (165, "Power Smoothing HW Circuitry lifetime exhausted", None),
    (166, "CC traffic seen prior to link properly being configured for encrypted traffic", None),
    (167, "PCIE_FATAL_TIMEOUT", None),
    (168, "Errors found in WPR (write protected region)", None),
    (169, "Internal micro-controller halt", None),
    (170, "Interrupt seen in CC mode", None),
    (171, "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", None),
    (172, "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", None),
)

# R14.3: codes the catalogue lists beyond R3's table are named by its Description; R3's
# own names (from NVIDIA's older Xid list) stay.
_NAMES_ALL: Final[dict[int, str]] = {code: name for code, name, _ in _CATALOGUE if name is not None} | _NAMES
_ACTIONS: Final[dict[int, XidAction]] = {code: action for code, _, action in _CATALOGUE if action is not None}


class XidTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Which Xid codes are the workload's (user), which make the device untrustworthy
    (critical); every other Xid is a warning. Every SXid is `sxid_severity`."""

    user: frozenset[int] = frozenset({13, 31, 43, 45})
    critical: frozenset[int] = frozenset({48, 62, 63, 64, 74, 79, 94, 95, 109, 119, 120, 140})
    sxid_severity: Severity = "CRITICAL"
    names: dict[int, str] = msgspec.field(default_factory=lambda: dict(_NAMES_ALL))
    codes: dict[int, str] = msgspec.field(default_factory=lambda: dict(_CODES))
    sxid_code: str = "GpuNvlinkError"
    default_code: str = "GpuXidError"
    # R14.3: NVIDIA's recommended immediate action per Xid: advice shown with a fault,
    # never a verdict (severities stay R3's). The catalogue covers Xids only, so an SXid
    # and any Xid it gives no action for are UNKNOWN unless a rule file says otherwise.
    actions: dict[int, XidAction] = msgspec.field(default_factory=lambda: dict(_ACTIONS))
    default_action: XidAction = "UNKNOWN"
    sxid_action: XidAction = "UNKNOWN"

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

    def action(self, kind: FaultKind, code: int) -> XidAction:
        """NVIDIA's recommended immediate action for this fault (R14.3)."""
        if kind == "SXID":
            return self.sxid_action
        return self.actions.get(code, self.default_action)


DEFAULT_XID_TABLE: Final = XidTable()
