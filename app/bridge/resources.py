"""What the bridge watches: each kind, where the API serves it, and the topic and key of
its records (DESIGN.md, "Source record")."""

from __future__ import annotations

from typing import Any

from app.core.kinds.base import Api
from app.core.kinds.registry import WATCHED


# One watched resource: where the API serves it, its topic and key (each kind's own
# module says it: app/core/kinds).
Kind = Api
KINDS: tuple[Kind, ...] = WATCHED
KINDS_BY_NAME = {kind.name: kind for kind in KINDS}


def kinds_named(names: list[str]) -> tuple[Kind, ...]:
    """The kinds to watch, in KINDS order; all of them for an empty list."""
    if not names:
        return KINDS
    unknown = [n for n in names if n not in KINDS_BY_NAME]
    if unknown:
        raise ValueError(f"unknown kind(s) {', '.join(unknown)}: expected some of {', '.join(KINDS_BY_NAME)}")
    return tuple(kind for kind in KINDS if kind.name in names)


def key_of(kind: Kind, obj: dict[str, Any]) -> str:
    """The Kafka key of a change to `obj`: its uid, or for an Event the uid of the object
    it is about (involvedObject, else events.k8s.io's regarding), so an Event lands on
    the partition of its pod. An Event naming no uid (a cluster-scoped event) is keyed
    by its own uid: its changes keep their order and spread over partitions."""
    meta = obj.get("metadata") or {}
    if kind.key == "involved_object":
        for field in ("involvedObject", "regarding"):
            ref = obj.get(field)
            if isinstance(ref, dict) and ref.get("uid"):
                return str(ref["uid"])
    return str(meta.get("uid") or "")
