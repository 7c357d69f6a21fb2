"""The fleet stage over output records, as the embedded driver runs it, with the fleet
view beside it: the other stages' part played from their output records."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec

from app.core.base.emit import Emit
from app.core.fleet.fold import FleetStats
from app.core.stages.fleet_inputs import counted_failure, failure_changes, fault_changes, gang_change
from app.core.fleet.read_model import FleetState, read
from app.core.base.progress import NO_PROGRESS, Watermarks, settles
from app.core.base.rules import DEFAULT_FLEET, DEFAULT_RULES, FleetSettings
from app.core.engine.topology import FLEET_STAGE, INPUT_OF, Failed, apply, settle
from app.model.facts import FLEET_INPUTS, Progress
from app.model.records import ClassifiedFailure, Fault, GangTransition
from tests.fleet.records import CLUSTER


class Fleet:
    """The fleet stage over output records, as the embedded driver runs it, with the read
    model beside it."""

    def __init__(self, settings: FleetSettings = DEFAULT_FLEET) -> None:
        self.rules = msgspec.structs.replace(DEFAULT_RULES, fleet=settings)
        self.settings = settings
        self.states: dict[str, FleetStats] = {}
        self.marks: Watermarks = NO_PROGRESS
        self.emitted: dict[str, Any] = {}  # what the other stages emitted last, per key
        self.view = FleetState()

    def feed(self, emit: Emit) -> list[Emit]:
        value = emit.value
        if isinstance(value, Fault):
            before = self.emitted.get(emit.key)
            self.emitted[emit.key] = value
            at = value.fault.last_seen
            inputs = fault_changes(value.cluster, at, emit.key, before.fault if before else None, value.fault, self.rules)
        elif isinstance(value, ClassifiedFailure):
            # As the attempt stage keeps them: how each failure (tracked object, generation) counts.
            before = self.emitted.get(emit.key, {})
            after = {**before, f"{value.tracked.uid}/{value.generation}": counted_failure(value)}
            self.emitted[emit.key] = after
            at = value.failed_at
            inputs = failure_changes(value.cluster, value.namespace, at, before, after, self.rules)
        elif isinstance(value, GangTransition):
            at, inputs = value.at, gang_change(value.at, value, self.rules)
        else:
            read(self.view, emit, self.settings)  # dead letters: the view counts them
            return []
        read(self.view, emit, self.settings)
        out = self._progress(at)  # the bridge has published everything observed before this record
        for item in inputs:
            out += self._fold(item)
        for derived in out:
            read(self.view, derived, self.settings)
        return out

    def _fold(self, item: Emit) -> list[Emit]:
        result = apply(FLEET_STAGE, INPUT_OF[FLEET_INPUTS].fold, self.states.get(item.key), item.key, item.value, self.rules, self.marks)
        assert not isinstance(result, Failed), result
        if result.state is not None:
            self.states[item.key] = result.state
        return result.emits

    def _progress(self, at: datetime) -> list[Emit]:
        marks = self.marks.observe(Progress(CLUSTER, "k8s.pods", 0, 1, at))
        if marks is None:
            return []
        self.marks = marks
        out: list[Emit] = []
        now = marks.stream_time(CLUSTER)
        assert FLEET_STAGE.waits_until is not None
        for key in sorted(self.states):
            until = FLEET_STAGE.waits_until(self.states[key], self.rules)
            if until is None or not settles(until, now):
                continue
            result = settle(FLEET_STAGE, self.states[key], key, self.rules, marks)
            assert not isinstance(result, Failed), result
            self.states[key] = result.state
            out += result.emits
        return out


def run(emits: Iterable[Emit], settings: FleetSettings = DEFAULT_FLEET, fleet: Fleet | None = None) -> tuple[Fleet, list[Emit]]:
    fleet = fleet or Fleet(settings)
    out: list[Emit] = []
    for emit in emits:
        out += fleet.feed(emit)
    return fleet, out
