"""R7.3 after a crash: the records a new ownership finds unsent in its table's outboxes
(app/stream/unsent.py) each leave once, in the order they were made in their input
partition, whatever the restart reads first. The crash itself, on a real broker:
tests/integration/test_stream_unsent.py."""

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
    five, nine, twelve = _sent("k8s.events:0:5", b"pod-b"), _sent("k8s.events:0:9", b"pod-a"), _sent("k8s.events:0:12", b"pod-b")
    other = _sent("k8s.pods:0:3", b"pod-c")
    kept = KeptRecords([(b"pod-b", twelve), (b"pod-a", nine), (b"pod-c", other), (b"pod-b", five)])

    assert kept.superseded(b"pod-a") == [five, nine]
    assert kept.take("k8s.events:0:5") == [] and kept.take("k8s.events:0:9") == []
    assert kept.take("k8s.events:0:12") == [twelve]
    assert kept.take("k8s.pods:0:3") == [other]
    assert kept.carried(b"pod-b") == [five]  # held by pod-b's entry: pod-b's next entry keeps it
    assert kept.take("k8s.pods:0:4") is None and not kept.superseded(b"pod-c")


def test_r7_3_a_key_with_nothing_kept_sends_nothing_early() -> None:
    kept = KeptRecords([(b"pod-a", _sent("k8s.events:1:2", b"pod-a"))])
    assert kept.superseded(b"pod-z") == [] and kept.carried(b"pod-z") == []
    assert kept.take("k8s.events:1:2") == [_sent("k8s.events:1:2", b"pod-a")]
    assert not kept


_KEYS = [b"k0", b"k1", b"k2"]
_PARTITIONS = ["k8s.pods:0", "k8s.events:0"]


@st.composite
def _restarts(draw: st.DrawFn) -> tuple[list[tuple[bytes, Sent]], list[tuple[str, object]]]:
    """What the outboxes held, and what the restart does: the causes come again in their
    partitions' order, interleaved with keys folded again, in any order."""
    kept: list[tuple[bytes, Sent]] = []
    comes: dict[str, list[str]] = {}
    for partition in _PARTITIONS:
        offsets = sorted(draw(st.sets(st.integers(0, 30), max_size=6)))
        comes[partition] = [f"{partition}:{offset}" for offset in offsets]
        for cause in comes[partition]:
            for n, key in enumerate(draw(st.lists(st.sampled_from(_KEYS), min_size=1, max_size=3))):
                kept.append((key, _sent(cause, key, n)))
    steps: list[tuple[str, object]] = []
    cursors = dict.fromkeys(_PARTITIONS, 0)
    while any(cursors[p] < len(comes[p]) for p in _PARTITIONS):
        if draw(st.booleans()):
            steps.append(("fold", draw(st.sampled_from(_KEYS))))
            continue
        partition = draw(st.sampled_from([p for p in _PARTITIONS if cursors[p] < len(comes[p])]))
        steps.append(("comes", comes[partition][cursors[partition]]))
        cursors[partition] += 1
    return kept, steps


@settings(max_examples=300, deadline=None)
@given(_restarts())
def test_r7_3_every_kept_record_leaves_once_in_its_partitions_order(restart: tuple[list[tuple[bytes, Sent]], list[tuple[str, object]]]) -> None:
    records, steps = restart
    kept = KeptRecords(records)
    sent: list[Sent] = []
    for step, what in steps:
        if step == "comes":
            assert isinstance(what, str)
            sent.extend(kept.take(what) or [])
        else:
            assert isinstance(what, bytes)
            sent.extend(kept.superseded(what))
            assert not [s for key, s in records if key == what and s not in sent]  # none of its records left behind
    assert sorted(sent, key=repr) == sorted((s for _, s in records), key=repr)  # each once
    for partition in _PARTITIONS:
        offsets = [int(s.cause.rsplit(":", 1)[1]) for s in sent if s.cause.startswith(partition + ":")]
        assert offsets == sorted(offsets)
