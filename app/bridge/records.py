"""What the bridge writes: source records (the DESIGN.md envelope, built as bytes once),
progress records, gap markers and positions."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

import msgspec
import orjson

# Bridge topics (logical names; the sink adds the prefix). Consumers of the source topics
# never read these.
BRIDGE_GAPS = "faultline.bridge-gaps"
BRIDGE_POSITIONS = "faultline.bridge-positions"

ALL_NAMESPACES = "*"  # the scope key of a watch over every namespace


class Page(msgspec.Struct, frozen=True):
    """One page of a list, as the API served it."""

    items: list[dict[str, Any]]
    resource_version: str
    cont: str | None
    item_kind: str  # the kind of the items (the list's kind without "List")
    api_version: str


class SourceRecord(msgspec.Struct, frozen=True, gc=False):
    """One change: logical topic, Kafka key, and the envelope JSON as bytes."""

    topic: str
    key: str
    value: bytes


class BridgeGap(msgspec.Struct, frozen=True, kw_only=True):
    """The watch of one kind lost its place (410 Gone) and was rebuilt from a fresh list:
    changes between the two resourceVersions reached the source topic only as their net
    result (ADDED/MODIFIED for what exists, DELETED with the last published object for
    what vanished); intermediate states were not seen.

    `deletions_complete` is false when the bridge could not know every object published
    before the gap (it was restarted and the API server no longer had the state at its
    saved position): an object deleted meanwhile then got no DELETED record."""

    schema: str = "faultline.BridgeGap/v1"
    cluster: str
    kind: str
    namespace: str | None  # None: all namespaces
    observed_at: str
    from_resource_version: str
    relisted_resource_version: str
    deleted: int
    deletions_complete: bool = True


class BridgePosition(msgspec.Struct, frozen=True, kw_only=True):
    """Where the watch of one kind stands, per namespace scope (ALL_NAMESPACES or a name).
    Saved only after every record before it was acknowledged."""

    schema: str = "faultline.BridgePosition/v1"
    cluster: str
    kind: str
    resource_versions: dict[str, str]
    observed_at: str


def now_us() -> int:
    """The bridge's clock: microseconds since the epoch (the resolution of `observed_at`)."""
    return time.time_ns() // 1000


def rfc3339_us(t_us: int) -> str:
    """RFC 3339 UTC with microseconds and Z, the envelope's `observed_at`."""
    seconds, micros = divmod(t_us, 1_000_000)
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{micros:06d}Z"


def now_rfc3339() -> str:
    return rfc3339_us(now_us())


class EnvelopeWriter:
    """Builds envelope bytes around an object already serialised, so each object is
    encoded once (the same bytes are kept for a later DELETED after a gap)."""

    def __init__(self, cluster: str) -> None:
        self._cluster = orjson.dumps(cluster)

    def envelope(self, change: str, observed_at: str, object_json: bytes) -> bytes:
        return b"".join(
            (
                b'{"type":"',
                change.encode(),
                b'","observed_at":"',
                observed_at.encode(),
                b'","cluster":',
                self._cluster,
                b',"object":',
                object_json,
                b"}",
            )
        )

    def bookmark(self, observed_at: str, api_version: str, kind: str, resource_version: str) -> bytes:
        """A progress record (SPEC R12.1): every change of `kind` the bridge received
        before `observed_at` was published and acknowledged."""
        obj = orjson.dumps({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": resource_version}})
        return self.envelope("BOOKMARK", observed_at, obj)
