"""Dead letters, built in one place for every driver (SPEC R11.1, R11.3).

A dead letter must always be writable, whatever the bad record was: its value is cut to
`VALUE_BYTES` before it is turned into text (a control byte is escaped to six bytes in
JSON, so the text stays under 6 × VALUE_BYTES = 96 KiB), its topic, key and reason to a
few thousand characters (at most 6 bytes each in JSON): under 150 KiB in all, far under
the broker's 1 MiB. The size and digest of the whole value let an operator match it to
the original.
"""

from __future__ import annotations

import hashlib

from app.core.base.emit import Emit
from app.model.records import DEAD_LETTER, DeadLetter

VALUE_BYTES = 16 * 1024
KEY_CHARS = 1024
REASON_CHARS = 2048


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def dead_letter(
    topic: str, key: str | bytes | None, partition: int | None, offset: int | None, reason: str, value: bytes
) -> Emit:
    """The `faultline.dead-letter` record for one bad record, keyed by the record's key."""
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    key = _cut(key, KEY_CHARS) if key is not None else None
    letter = DeadLetter(
        topic=_cut(topic, KEY_CHARS),
        key=key,
        partition=partition,
        offset=offset,
        reason=_cut(reason, REASON_CHARS),
        value=value[:VALUE_BYTES].decode("utf-8", "replace"),
        size=len(value),
        sha256=hashlib.sha256(value).hexdigest(),
        truncated=len(value) > VALUE_BYTES,
    )
    return Emit(DEAD_LETTER, key or "", letter)
