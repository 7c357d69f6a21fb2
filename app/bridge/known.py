"""The objects of one watch that the bridge has published and not yet seen deleted.

A relist after 410 Gone compares against this set to publish a DELETED record, with the
last object published, for every object that vanished while the watch was gone. It holds
per uid only the record key, the resourceVersion and the object's JSON: a cluster's
worth of objects, not their history.

Settled objects are kept zlib-compressed (a Pod's JSON shrinks two- to five-fold);
objects that just changed stay as they are until `pack()` (the watch calls it on
bookmarks, at the end of each list and watch, and whenever RAW_LIMIT are waiting), so an
object that changes a hundred times in a burst is compressed once, not a hundred times.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

RAW_LIMIT = 4096  # uncompressed objects waiting for pack(): bounds the extra memory


class KnownObjects:
    __slots__ = ("_objects", "_raw")

    def __init__(self) -> None:
        self._objects: dict[str, tuple[str, str, bytes]] = {}  # uid -> (key, resourceVersion, JSON)
        self._raw: set[str] = set()  # uids whose JSON is not compressed yet

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, uid: str) -> bool:
        return uid in self._objects

    def __iter__(self) -> Iterator[str]:
        return iter(self._objects)

    def remember(self, uid: str, key: str, resource_version: str, object_json: bytes) -> None:
        self._objects[uid] = (key, resource_version, object_json)
        self._raw.add(uid)
        if len(self._raw) > RAW_LIMIT:
            self.pack()

    def forget(self, uid: str) -> None:
        self._objects.pop(uid, None)
        self._raw.discard(uid)

    def resource_version(self, uid: str) -> str | None:
        entry = self._objects.get(uid)
        return entry[1] if entry is not None else None

    def uids(self) -> set[str]:
        return set(self._objects)

    def take(self, uid: str) -> tuple[str, bytes]:
        """Forget `uid`; its key and last object JSON."""
        key, _, data = self._objects.pop(uid)
        if uid in self._raw:
            self._raw.discard(uid)
            return key, data
        return key, zlib.decompress(data)

    def pack(self) -> None:
        """Compress every object remembered since the last pack."""
        objects = self._objects
        for uid in self._raw:
            key, rv, data = objects[uid]
            objects[uid] = (key, rv, zlib.compress(data, 1))
        self._raw.clear()

    def stored_bytes(self) -> int:
        return sum(len(data) for _, _, data in self._objects.values())
