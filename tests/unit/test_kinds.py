"""The workload kinds (app/core/kinds): one module each behind one interface, one registry,
and no other module that names a kind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.core.base.rules import DEFAULT_CHILD_POD_LABELS
from app.core.kinds import registry
from app.core.kinds.base import WorkloadKind

APP = Path(__file__).resolve().parents[2] / "app"

# Where a kind may be spelled outside its own module: the model's types of the objects,
# the rule set's default child-pod labels (a setting's default, R10.1), and Kueue's own
# module (the Workload is Kueue's, not a workload kind).
ALLOWED = {APP / "core" / "base" / "rules.py", APP / "core" / "identity" / "kueue.py"}


def _spelled(kind: WorkloadKind) -> list[str]:
    """How code names a kind: its name as a string, its API group (a label prefix)."""
    found = [rf'"{re.escape(kind.name)}"']
    if kind.api.group:  # as a string, or before the "/" of an apiVersion or a label key
        found.append(rf'(?<![\w.-]){re.escape(kind.api.group)}(?=[/"])')
    return found


def test_no_module_outside_the_kinds_names_a_kind() -> None:
    """Adding a kind is one module and one registration: nothing else asks by name."""
    patterns = [re.compile(p) for kind in registry.KINDS for p in _spelled(kind)]
    offenders = []
    for path in APP.rglob("*.py"):
        if path.is_relative_to(APP / "core" / "kinds") or path.is_relative_to(APP / "model") or path in ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(p.search(line) for p in patterns):
                offenders.append(f"{path.relative_to(APP.parent)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_rule_sets_child_pod_labels_are_every_kinds_own() -> None:
    """R4: a pod an operator created is a child pod; the default names every kind's labels
    (a kind added without them would make its pods look like pod tasks)."""
    own = {label for kind in registry.KINDS for label in kind.child_pod_labels}
    assert own == set(DEFAULT_CHILD_POD_LABELS)


@pytest.mark.parametrize("kind", registry.KINDS, ids=lambda k: k.name)
def test_every_kind_is_found_by_each_version_the_bridge_may_watch(kind: WorkloadKind) -> None:
    for version in kind.api.versions:
        assert registry.kind_of(kind.api.api_version(version), kind.name) is kind
    assert registry.kind_named(kind.name) is kind
    assert registry.kind_of("unknown.example.com/v1", kind.name) is None  # another group's kind of that name


def test_the_bridge_watches_every_kind_once_with_events_and_workloads() -> None:
    names = [api.name for api in registry.WATCHED]
    assert len(names) == len(set(names))
    assert {k.name for k in registry.KINDS} | {"Event", "Workload"} == set(names)
    assert [api.name for api in registry.WATCHED if not api.optional] == ["Pod", "Event", "Job"]  # served by every API server


def test_pod_labels_read_are_the_attempt_labels_then_every_kinds_once() -> None:
    from app.core.base.rules import DEFAULT_RULES

    read = registry.pod_labels_read(DEFAULT_RULES.labels)
    assert read[:4] == ("flyte.org/managed", "run", "action", "attempt")
    assert len(read) == len(set(read))
    assert {label for kind in registry.KINDS for label in kind.pod_labels} <= set(read)
