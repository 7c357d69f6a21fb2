"""R7.3 after a crash: the records a new ownership finds in its table's outboxes, caused
at or past the committed offsets, are sent again before anything is folded, in the order
they were first sent (app/stream/unsent.py): each input partition's in offset order and
each key's in fold order, whatever the restart will read first. The crash itself, on a
real broker: tests/integration/test_stream_unsent.py."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from app.stream.codecs import Sent
from app.stream.unsent import in_order_sent


def _sent(cause: str, key: bytes, n: int = 0, order: tuple[int, int, int] | None = None) -> Sent:
    return Sent("faultline.faults", f"{key.decode()}/{n}", msgspec.Raw(b"{}"), None, None, cause, order)


def test_r7_3_a_key_folded_again_first_finds_what_it_kept_already_sent() -> None:
    """The lost fault of a CI run: a pod's Event was folded (the fault is in its outbox),
    the worker died before sending it, and after the restart the pod's next Pod record was
    read before the Event came again. The kept fault leaves before anything is folded,
    so the new fold's records come after it, and the Event, a repeat, sends nothing."""
    fault = _sent("k8s.events:0:7", b"pod-a", order=(3, 41, 0))
    assert in_order_sent([(b"pod-a", fault)]) == [fault]


def test_r7_3_a_key_s_records_leave_in_the_order_it_made_them_whichever_cause_comes_first() -> None:
    """The gpu_seconds of a CI run: a pod's Xid Event, then its Failed record, folded in
    one batch before the kill. The running view (from the Event) must reach the attempts
    stage before the failed one, whatever partition the restart reads first."""
    running = _sent("k8s.events:3:40", b"pod-2", order=(5, 7, 0))
    failed = _sent("k8s.pods:3:17", b"pod-2", order=(5, 7, 1))
    assert in_order_sent([(b"pod-2", failed), (b"pod-2", running)]) == [running, failed]


def test_r7_3_a_later_owner_s_records_leave_after_an_earlier_owner_s() -> None:
    """Entries of one partition written by two owners in turn: the later generation's
    records were sent after the earlier's, whatever their batch numbers."""
    early = _sent("k8s.pods:0:5", b"pod-a", order=(2, 900, 3))
    late = _sent("k8s.pods:0:9", b"pod-b", order=(4, 1, 0))
    assert in_order_sent([(b"pod-b", late), (b"pod-a", early)]) == [early, late]


def test_r7_3_records_kept_before_their_order_was_written_leave_first_by_cause() -> None:
    """An entry from a worker that did not write `Sent.order` yet: its records were sent
    before any that carry one; among them, each partition's in offset order."""
    old_late, old_early = _sent("k8s.events:0:12", b"pod-c"), _sent("k8s.events:0:5", b"pod-b")
    new = _sent("k8s.events:0:13", b"pod-c", order=(1, 0, 0))
    assert in_order_sent([(b"pod-c", new), (b"pod-c", old_late), (b"pod-b", old_early)]) == [old_early, old_late, new]


_KEYS = [b"k0", b"k1", b"k2"]
_PARTITIONS = ["k8s.pods:0", "k8s.events:0"]


@st.composite
def _runs(draw: st.DrawFn) -> tuple[list[Sent], list[tuple[bytes, Sent]], dict[str, int]]:
    """What a stage sent, batch after batch over one to three generations (each record
    marked as the agent marks it), what its entries' outboxes hold at the crash (each
    key's: the records of its last batch, in the order made), and the committed offset
    of each partition (at a batch boundary: offsets are committed after a batch's records)."""
    sent: list[Sent] = []
    outbox: dict[bytes, list[Sent]] = {}
    cursors = dict.fromkeys(_PARTITIONS, 0)
    boundaries = [dict(cursors)]
    for generation in range(1, draw(st.integers(1, 3)) + 1):
        for seq in range(draw(st.integers(1, 4))):
            batch: list[Sent] = []
            folded: dict[bytes, list[Sent]] = {}
            for _ in range(draw(st.integers(1, 5))):
                partition = draw(st.sampled_from(_PARTITIONS))
                cursors[partition] += draw(st.integers(1, 3))
                cause = f"{partition}:{cursors[partition]}"
                for n, key in enumerate(draw(st.lists(st.sampled_from(_KEYS), min_size=1, max_size=3, unique=True))):
                    record = _sent(cause, key, n, (generation, seq, len(batch)))
                    batch.append(record)
                    folded.setdefault(key, []).append(record)
            outbox.update(folded)  # a key's new entry replaces its outbox
            sent += batch
            boundaries.append({p: c + 1 for p, c in cursors.items()})
    committed = draw(st.sampled_from(boundaries))
    kept = [(key, record) for key in _KEYS for record in outbox.get(key, [])]
    return sent, kept, committed


@settings(max_examples=400, deadline=None)
@given(_runs())
def test_r7_3_kept_records_leave_once_in_the_order_they_were_first_sent(run: tuple[list[Sent], list[tuple[bytes, Sent]], dict[str, int]]) -> None:
    sent, kept, committed = run
    unsent = [(key, s) for key, s in kept if int(s.cause.rsplit(":", 1)[1]) >= committed[s.cause.rsplit(":", 1)[0]]]
    again = in_order_sent(unsent)
    assert sorted(again, key=repr) == sorted((s for _, s in unsent), key=repr)  # each once
    position = {id(s): i for i, s in enumerate(sent)}
    assert [position[id(s)] for s in again] == sorted(position[id(s)] for s in again)  # as first sent
    # Every record of the last batch (its states durable, nothing of it acknowledged) is kept.
    last = [s for s in sent if s.order is not None and s.order[:2] == sent[-1].order[:2]]
    assert all(any(s is k for _, k in unsent) for s in last if int(s.cause.rsplit(":", 1)[1]) >= committed[s.cause.rsplit(":", 1)[0]])
