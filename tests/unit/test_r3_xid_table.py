"""SPEC R3: the Xid table."""

from __future__ import annotations

import pytest

from app.core.base.xid import DEFAULT_XID_TABLE as xid


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_r3_user_codes(code):
    assert xid.severity("XID", code) == "USER"


@pytest.mark.parametrize("code", [48, 62, 63, 64, 74, 79, 94, 95, 109, 119, 120, 140])
def test_r3_critical_codes(code):
    assert xid.severity("XID", code) == "CRITICAL"


@pytest.mark.parametrize("code", [92, 32, 38, 44, 121, 143, 154, 4242])
def test_r3_warn_is_92_and_every_unlisted_code(code):
    assert xid.severity("XID", code) == "WARN"


def test_r3_every_sxid_is_critical_and_an_nvlink_error():
    assert xid.severity("SXID", 20034) == "CRITICAL"
    assert xid.failure_code("SXID", 12028) == "GpuNvlinkError"
    assert xid.name("SXID", 12028) == "SXid 12028"


@pytest.mark.parametrize(
    ("code", "failure"),
    [
        (79, "GpuFallenOffBus"),
        (48, "GpuEccUncorrectable"),
        (94, "GpuEccUncorrectable"),
        (95, "GpuEccUncorrectable"),
        (140, "GpuEccUncorrectable"),
        (63, "GpuRowRemapPending"),
        (64, "GpuRowRemapPending"),
        (74, "GpuNvlinkError"),
        (119, "GpuGspError"),
        (120, "GpuGspError"),
        (62, "GpuXidError"),
        (31, "GpuXidError"),
        (4242, "GpuXidError"),
    ],
)
def test_r3_failure_code_of_each_xid(code, failure):
    assert xid.failure_code("XID", code) == failure


def test_r3_names_known_and_unknown():
    assert xid.name("XID", 79) == "GPU has fallen off the bus"
    assert xid.name("XID", 154) == "GPU recovery action changed"
    assert xid.name("XID", 4242) == "Xid 4242"
