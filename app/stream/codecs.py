"""Bytes on the wire and in the tables.

Topic payloads are the contract's JSON (msgspec), never Faust model envelopes, so any
consumer can read them. Table values are an `Entry`: the core's state, the source
positions it reflects, so that a record redelivered after a crash (at-least-once) is
recognised as already applied instead of being folded twice, and its outbox: the records
the folds of its last batch caused, written with the state before they are sent, so that
a repeat can send them again (app/stream/delivery.py).
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

S = TypeVar("S")

_encoder = msgspec.json.Encoder()

# A table entry is compressed past this many bytes, and written without its outbox past
# `ENTRY_LIMIT` (the broker's default message size is 1 MiB): the core bounds a state and
# each record at `max_value_bytes`, but one key's batch may cause several records.
COMPRESS_OVER = 64 * 1024
ENTRY_LIMIT = 900 * 1024

# Header carried by every record a stage writes to a re-key topic: the source record
# it came from, `topic:partition:offset:index` (index: n-th record that source caused).
ORIGIN_HEADER = "faultline-origin"


def encode(value: object) -> bytes:
    """A record value or table entry as JSON (deterministic: field order is the type's)."""
    return _encoder.encode(value)


class Position(msgspec.Struct, frozen=True, array_like=True, order=True):
    """Where a fold input came from: the record's offset in its source topic-partition,
    then the index among the records that one source record caused."""

    offset: int
    index: int = 0


class Origin(msgspec.Struct, frozen=True):
    topic: str
    partition: int
    position: Position

    @property
    def stream(self) -> str:
        """The totally ordered stream this position belongs to."""
        return f"{self.topic}:{self.partition}"

    def header(self) -> bytes:
        return f"{self.topic}:{self.partition}:{self.position.offset}:{self.position.index}".encode()

    @classmethod
    def from_header(cls, raw: bytes) -> Origin | None:
        try:
            topic, partition, offset, index = raw.decode().rsplit(":", 3)
            return cls(topic, int(partition), Position(int(offset), int(index)))
        except ValueError:
            return None


class Sent(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One Kafka record a stage sends: its topic (the Kafka name), key, JSON value,
    partition (None: by key), origin header (records to a re-key topic), the input
    record whose fold caused it, `topic:partition:offset`, and where it was sent among
    everything its stage sent: (consumer generation, the agent's batch in it, its index
    among the batch's records); None in entries written before it was kept
    (app/stream/unsent.py sends what a crash left unsent again in that order)."""

    topic: str
    key: str
    value: msgspec.Raw
    partition: int | None
    header: str | None
    cause: str
    order: tuple[int, int, int] | None = None


class Entry(msgspec.Struct, Generic[S], omit_defaults=True):
    """A table value: the core's state for one key, the table partition it lives in
    (needed to write a tombstone from the expiry timer), per source stream the position
    of the last record folded into it, and the records its last batch's folds caused
    (sent only once the entry is durable; sent again when one of those folds' records
    comes again after a crash)."""

    partition: int
    positions: dict[str, Position]
    state: S
    outbox: list[Sent] = []

    def applied(self, origin: Origin) -> bool:
        """True if `origin` was already folded in (a redelivery after a crash)."""
        seen = self.positions.get(origin.stream)
        return seen is not None and origin.position <= seen


def entry_decoder(state_type: type) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(Entry[state_type])  # type: ignore[valid-type]
