"""What a fresh list means against the objects the bridge has published (pure: no I/O).

After 410 Gone the watch of a kind is rebuilt from a list. Compared with the objects
published before (uid -> resourceVersion), each listed object is new (ADDED), changed
(MODIFIED) or unchanged (not published again); each object published before and absent
from the whole list was deleted meanwhile (DELETED, with its last published state).

A relist that finds nothing new, nothing changed and nothing deleted publishes nothing
and needs no gap marker: no published object has an unseen state. (An object created and
deleted entirely within the gap is invisible to any list, marker or not.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import msgspec

Change = Literal["ADDED", "MODIFIED"]


class Listed(msgspec.Struct, frozen=True, gc=False):
    """One object of a list page: its uid, resourceVersion, record key and JSON."""

    uid: str
    resource_version: str
    key: str
    object_json: bytes


class RelistOutcome(msgspec.Struct, frozen=True):
    published: int  # ADDED + MODIFIED records
    deleted: int
    deletions_complete: bool

    @property
    def needs_gap(self) -> bool:
        """A gap marker says which net changes stand for unseen intermediate states."""
        return bool(self.published or self.deleted or not self.deletions_complete)


def page_changes(known_version: Callable[[str], str | None], page: Iterable[Listed]) -> list[tuple[Change, Listed]]:
    """The records one list page calls for: ADDED for an object not known, MODIFIED for
    one known at another resourceVersion; unchanged objects are left out."""
    changes: list[tuple[Change, Listed]] = []
    for item in page:
        previous = known_version(item.uid)
        if previous != item.resource_version:
            changes.append(("ADDED" if previous is None else "MODIFIED", item))
    return changes


def deleted_meanwhile(known: Iterable[str], listed: set[str]) -> list[str]:
    """The uids published before and absent from the complete list, in a stable order."""
    return sorted(uid for uid in known if uid not in listed)
