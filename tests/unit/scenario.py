"""Run source records through the embedded pipeline and read what came out."""

from __future__ import annotations

import orjson

from app.core.base.emit import Emit
from app.core.base.rules import DEFAULT_RULES, Rules
from app.model.fleet_records import DERIVED_TOPICS
from app.model.records import CLASSIFIED_FAILURES, FAULTS, ClassifiedFailure
from tests.unit.drivers import new_pipeline


def run(records: list[dict], rules: Rules = DEFAULT_RULES, *, derived: bool = False) -> list[Emit]:
    """Through the driver the test runs with (tests/unit/drivers.py): every output record
    (the fleet's derived records too with `derived`; tests/fleet checks those)."""
    pipeline = new_pipeline(rules)
    out: list[Emit] = []
    for r in records:
        out.extend(pipeline.feed(r["topic"], r["key"], orjson.dumps(r["value"])))
    return out if derived else [e for e in out if e.topic not in DERIVED_TOPICS]


def verdicts(records: list[dict], rules: Rules = DEFAULT_RULES) -> list[ClassifiedFailure]:
    return [e.value for e in run(records, rules) if e.topic == CLASSIFIED_FAILURES]


def final_verdicts(records: list[dict], rules: Rules = DEFAULT_RULES) -> dict[str, ClassifiedFailure]:
    """Latest verdict per attempt key."""
    latest: dict[str, ClassifiedFailure] = {}
    for v in verdicts(records, rules):
        latest[v.key] = v
    return latest


def only_verdict(records: list[dict], rules: Rules = DEFAULT_RULES) -> ClassifiedFailure:
    final = final_verdicts(records, rules)
    assert len(final) == 1, f"expected one attempt with a verdict, got {sorted(final)}"
    return next(iter(final.values()))


def faults(records: list[dict], rules: Rules = DEFAULT_RULES):
    return [e.value for e in run(records, rules) if e.topic == FAULTS]
