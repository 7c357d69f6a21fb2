from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit import drivers


@pytest.fixture(params=drivers.DRIVERS)
def driver(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test through one in-process driver (tests/unit/drivers.py)."""
    drivers.current = request.param
    try:
        yield request.param
    finally:
        drivers.current = "memory"
