"""R7.3 after a crash: the records a new ownership finds unsent in its table's outboxes
(app/stream/unsent.py) each leave once, in the order they were made as far as the next
stage can tell (their input partition's, their key's), whatever the restart reads first.
The crash itself, on a real broker: tests/integration/test_stream_unsent.py."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from app.stream.codecs import Sent
from app.stream.unsent import KeptRecords


def _sent(cause: str, key: bytes, n: int = 0) -> Sent:
    return Sent("faultline.faults", f"{key.decode()}/{n}", msgspec.Raw(b"{}"), None, None, cause)


def test_r7_3_a_key_folded_again_before_its_cause_comes_sends_what_it_kept_first() -> None:
    """The lost fault of a CI run: a pod's Event was folded (the fault is in its outbox),
    the worker died before sending it, and after the restart the pod's next Pod record was
    read before the Event came again. The new fold does not find the fault again (the
    state has it): the kept record must leave, before what the new fold sends."""
    fault = _sent("k8s.events:0:7", b"pod-a")
    kept = KeptRecords([(b"pod-a", fault)])

    assert kept.superseded(b"pod-a") == [fault]
    assert kept.take("k8s.events:0:7") == []  # sent: the Event, when it comes, finds it so
    assert kept.carried(b"pod-a") == [fault]  # the pod's new entry keeps it until it has left


def test_r7_3_records_sent_early_take_those_kept_before_them_in_their_partition() -> None:
    """The next stage recognises repeats by position in each stream: a record of offset 9
    sent before one of offset 5 of the same partition would make that one look like a
    repeat. So everything kept up to offset 9 leaves, in order; offset 12 waits."""
    five, nine, twelve = _sent("k8s.events:0:5", b"pod-b"), _sent("k8s.events:0:9", b"pod-a"), _sent("k8s.events:0:12", b"pod-c")
    other = _sent("k8s.pods:0:3", b"pod-d")
    kept = KeptRecords([(b"pod-c", twelve), (b"pod-a", nine), (b"pod-d", other), (b"pod-b", five)])

    assert kept.superseded(b"pod-a") == [five, nine]
    assert kept.take("k8s.events:0:5") == [] and kept.take("k8s.events:0:9") == []
    assert kept.take("k8s.events:0:12") == [twelve]
    assert kept.take("k8s.pods:0:3") == [other]
    assert kept.carried(b"pod-b") == [five]  # held by pod-b's entry: pod-b's next entry keeps it
    assert kept.take("k8s.pods:0:4") is None and not kept.superseded(b"pod-d")


def test_r7_3_a_key_s_records_leave_in_the_order_it_made_them_whichever_cause_comes_first() -> None:
    """The gpu_seconds of a CI run: a pod's Xid Event, then its Failed record, folded in
    one batch before the kill; the restart read the Pod record first. Sent as each cause
    came, the running view (from the Event) reached the attempts stage after the failed
    one, and the verdict counted the pod until the failure instead of its end."""
    running = _sent("k8s.events:3:40", b"pod-2")  # the Event's fold: still running, a fault
    failed = _sent("k8s.pods:3:17", b"pod-2")  # the Pod record's: failed, with its end
    kept = KeptRecords([(b"pod-2", running), (b"pod-2", failed)])

    assert kept.take("k8s.pods:3:17") == [running, failed]
    assert kept.take("k8s.events:3:40") == []
    assert kept.counts["unsent_sent_early"] == 1  # the Event's record left before the Event came


def test_r7_3_an_entry_holding_unsent_records_is_held_until_they_have_left() -> None:
    """A sweep must not drop it before (app/stream/agents.py): a second crash would lose
    them, and their cause would be folded again from no state."""
    first, second = _sent("k8s.events:0:4", b"pod-a"), _sent("k8s.pods:0:9", b"pod-a")
    kept = KeptRecords([(b"pod-a", first), (b"pod-a", second), (b"pod-b", _sent("k8s.events:0:6", b"pod-b"))])
    assert kept.holds(b"pod-a") and kept.holds(b"pod-b") and not kept.holds(b"pod-c")
    assert kept.take("k8s.events:0:4") == [first]
    assert kept.holds(b"pod-a")  # its Pod record's records are still to leave
    assert kept.take("k8s.pods:0:9") == [second] and not kept.holds(b"pod-a")
    assert kept.superseded(b"pod-b") and not kept.holds(b"pod-b")


def test_r7_3_a_key_with_nothing_kept_sends_nothing_early() -> None:
    kept = KeptRecords([(b"pod-a", _sent("k8s.events:1:2", b"pod-a"))])
    assert kept.superseded(b"pod-z") == [] and kept.carried(b"pod-z") == []
    assert kept.take("k8s.events:1:2") == [_sent("k8s.events:1:2", b"pod-a")]
    assert not kept.by_cause


_KEYS = [b"k0", b"k1", b"k2"]
_PARTITIONS = ["k8s.pods:0", "k8s.events:0"]

Restart = tuple[list[tuple[bytes, Sent]], list[Sent], list[tuple[str, object]]]


@st.composite
def _restarts(draw: st.DrawFn) -> Restart:
    """What a worker folded before it died (the two partitions interleaved, each cause
    making records for one to three keys), what its entries' outboxes kept of it, and what
    the restart does: the causes come again in their partitions' order, interleaved with
    keys folded again, in any order."""
    made: list[Sent] = []  # in the order the dead worker made them
    cursors = dict.fromkeys(_PARTITIONS, 0)
    owner: dict[int, bytes] = {}
    for _ in range(draw(st.integers(0, 10))):
        partition = draw(st.sampled_from(_PARTITIONS))
        cursors[partition] += draw(st.integers(1, 3))
        cause = f"{partition}:{cursors[partition]}"
        for n, key in enumerate(draw(st.lists(st.sampled_from(_KEYS), min_size=1, max_size=3, unique=True))):
            owner[len(made)] = key
            made.append(_sent(cause, key, n))
    # Each key's outbox: its records, in the order made (what the table holds).
    kept = [(key, sent) for key in _KEYS for i, sent in enumerate(made) if owner[i] == key]
    comes = {p: sorted({s.cause for s in made if s.cause.startswith(p + ":")}, key=lambda c: int(c.rsplit(":", 1)[1])) for p in _PARTITIONS}
    steps: list[tuple[str, object]] = []
    at = dict.fromkeys(_PARTITIONS, 0)
    while any(at[p] < len(comes[p]) for p in _PARTITIONS):
        if draw(st.booleans()):
            steps.append(("fold", draw(st.sampled_from(_KEYS))))
            continue
        partition = draw(st.sampled_from([p for p in _PARTITIONS if at[p] < len(comes[p])]))
        steps.append(("comes", comes[partition][at[partition]]))
        at[partition] += 1
    return kept, made, steps


@settings(max_examples=400, deadline=None)
@given(_restarts())
def test_r7_3_every_kept_record_leaves_once_in_the_order_it_was_made(restart: Restart) -> None:
    kept, made, steps = restart
    records = KeptRecords(kept)
    sent: list[Sent] = []
    for step, what in steps:
        if step == "comes":
            assert isinstance(what, str)
            sent.extend(records.take(what) or [])
            assert all(s in sent for s in made if s.cause == what)  # its records left
        else:
            assert isinstance(what, bytes)
            sent.extend(records.superseded(what))
            assert all(s in sent for key, s in kept if key == what)  # none of its records left behind
        for key in _KEYS:  # a sweep leaves the entries whose records have not all left
            assert records.holds(key) == any(s not in sent for k, s in kept if k == key)
    assert sorted(sent, key=repr) == sorted(made, key=repr)  # each once
    position = {id(s): i for i, s in enumerate(made)}
    for partition in _PARTITIONS:  # each stream in order
        offsets = [int(s.cause.rsplit(":", 1)[1]) for s in sent if s.cause.startswith(partition + ":")]
        assert offsets == sorted(offsets)
    for key in _KEYS:  # each key's views in the order made
        order = [position[id(s)] for s in sent if s.key.startswith(key.decode() + "/")]
        assert order == sorted(order)
