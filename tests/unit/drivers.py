"""The in-process drivers every rule test runs through (as one recorder test suite runs
against every backend): `memory` hands records and states over as objects; `wire`
encodes and decodes every internal record and every state as Kafka and the Faust tables
would. A module opts in with `pytestmark = pytest.mark.usefixtures("driver")`; its tests
then run once per driver (the `driver` fixture, tests/unit/conftest.py)."""

from __future__ import annotations

from app.core.base.rules import DEFAULT_RULES, Rules
from app.embedded.pipeline import Pipeline

DRIVERS = ("memory", "wire")
current = "memory"


def new_pipeline(rules: Rules = DEFAULT_RULES) -> Pipeline:
    return Pipeline(rules, wire=current == "wire")
