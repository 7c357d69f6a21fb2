"""R12.3: a stage forwards progress only when what it would send differs from what its
scope last sent under the same (cluster, name, partition) (`topology.forwarded`). The
attempt stage hears of the jobs by two paths (the jobs stage, and the gang stage's own
watermark) and its own watermark, the least of them, stays where it was on about half of
what it hears: sent anyway, it was a third of that stage's progress records, each taken
in by the fleet stage for nothing (issue 37). Never sending a needed move is the danger:
the property below holds the reader's view of the stage's own watermark equal to the
stage's at every step, restores from a durable snapshot included."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.base.progress import NO_PROGRESS
from app.core.base.rules import DEFAULT_RULES
from app.core.engine.runner import Runner, Scope, Source
from app.core.engine.topology import ATTEMPTS_STAGE, GANGS_STAGE
from app.model.envelope import JOBS, PODS
from app.model.facts import ATTEMPT_FACTS, END_OF_TIME, FLEET_INPUTS, GANG_INPUTS, Progress
from tests.unit import builders as b

GANGS_JOBS = f"gangs:{JOBS}"


def _sent(runner: Runner, scope: Scope, topic: str, progress: Progress, partition: int = 0, partitions: int = 1) -> list[tuple[str, Progress]]:
    """The progress records the stage writes on `progress`, read from `topic`[`partition`]."""
    outcome = runner.progress(scope, None, Source(topic, topic, "", partition, None, partitions), progress)
    return [(out.emit.topic, out.emit.value) for out in outcome.out if isinstance(out.emit.value, Progress)]


def test_r12_3_the_attempt_stage_sends_its_own_watermark_only_when_it_moves() -> None:
    runner, scope = Runner(ATTEMPTS_STAGE, DEFAULT_RULES, Counter()), Scope(whole=True)
    at = lambda minutes: b.T0 + timedelta(minutes=minutes)  # noqa: E731
    assert _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, JOBS, 0, 1, at(0))) == []  # the gang path has shown none
    own = Progress(b.CLUSTER, f"attempts:{JOBS}", 0, 1, at(0))
    assert _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, GANGS_JOBS, 0, 1, at(0))) == [(FLEET_INPUTS, own)]
    # The jobs stage's progress moves on: the least of both paths does not.
    assert _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, JOBS, 0, 1, at(1))) == []
    assert scope.marks.of(b.CLUSTER, JOBS) == at(1)  # taken in all the same
    moved = Progress(b.CLUSTER, f"attempts:{JOBS}", 0, 1, at(1))
    assert _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, GANGS_JOBS, 0, 1, at(2))) == [(FLEET_INPUTS, moved)]
    # Another cluster, another source topic: each its own.
    assert _sent(runner, scope, ATTEMPT_FACTS, Progress("prod-b", PODS, 0, 1, at(0))) == [(FLEET_INPUTS, Progress("prod-b", f"attempts:{PODS}", 0, 1, at(0)))]


def test_r12_3_a_restored_scope_sends_its_watermark_again_at_the_next_progress() -> None:
    # What was sent before a restart may not have left (the states and progress are
    # durable before the batch's records are sent): a new scope sends afresh.
    runner, scope = Runner(ATTEMPTS_STAGE, DEFAULT_RULES, Counter()), Scope(whole=False)
    _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, JOBS, 0, 1, b.T0), 1, 2)
    _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, GANGS_JOBS, 0, 1, b.T0), 1, 2)
    restored = Scope(whole=False)
    restored.restore(scope.snapshot())
    again = _sent(runner, restored, ATTEMPT_FACTS, Progress(b.CLUSTER, JOBS, 0, 1, b.T0 + b.minutes(1)), 1, 2)
    assert again == [(FLEET_INPUTS, Progress(b.CLUSTER, f"attempts:{JOBS}", 1, 2, b.T0))]  # its own partition, 1 of 2
    assert _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, JOBS, 0, 1, b.T0 + b.minutes(1)), 1, 2) == []  # the scope that sent it


def test_r12_3_the_gang_stage_sends_its_watermark_to_both_topics_or_to_neither() -> None:
    runner, scope = Runner(GANGS_STAGE, DEFAULT_RULES, Counter()), Scope(whole=True)
    first = _sent(runner, scope, GANG_INPUTS, Progress(b.CLUSTER, JOBS, 0, 2, b.T0))
    assert first == []  # partition 1 of k8s.jobs has shown none
    both = _sent(runner, scope, GANG_INPUTS, Progress(b.CLUSTER, JOBS, 1, 2, b.T0 + b.minutes(1)))
    own = Progress(b.CLUSTER, GANGS_JOBS, 0, 1, b.T0)
    assert both == [(ATTEMPT_FACTS, own), (FLEET_INPUTS, own)]
    assert _sent(runner, scope, GANG_INPUTS, Progress(b.CLUSTER, JOBS, 1, 2, b.T0 + b.minutes(2))) == []  # partition 0 holds it


def test_r12_3_the_end_of_the_input_is_sent_once() -> None:
    runner, scope = Runner(ATTEMPTS_STAGE, DEFAULT_RULES, Counter()), Scope(whole=True)
    for name in (JOBS, GANGS_JOBS):
        _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, name, 0, 1, b.T0))
    assert _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, JOBS, 0, 1, END_OF_TIME, final=True)) == []  # the gang path goes on
    ended = _sent(runner, scope, ATTEMPT_FACTS, Progress(b.CLUSTER, GANGS_JOBS, 0, 1, END_OF_TIME, final=True))
    assert ended == [(FLEET_INPUTS, Progress(b.CLUSTER, f"attempts:{JOBS}", 0, 1, END_OF_TIME, final=True))]


# One step: progress of a path (the jobs stage's, of source partition 0 or 1 of 2, or the
# gang stage's), at a minute, or the end of the input; or a restore from the scope's
# durable snapshot (a restart, a new ownership).
_STEP = st.one_of(
    st.tuples(st.sampled_from([(JOBS, 0, 2), (JOBS, 1, 2), (GANGS_JOBS, 0, 1)]), st.integers(0, 6) | st.none()),
    st.just("restore"),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=40), st.booleans())
def test_r12_3_what_the_stage_sent_always_tells_its_reader_its_own_watermark(steps: list, whole: bool) -> None:
    runner, scope = Runner(ATTEMPTS_STAGE, DEFAULT_RULES, Counter()), Scope(whole=whole)
    mine, count = (0, 1) if whole else (1, 2)
    name = f"attempts:{JOBS}"
    reader = NO_PROGRESS  # what the fleet stage knows of this stage partition's watermark
    for step in steps:
        if step == "restore":
            restored = Scope(whole=whole)
            restored.restore(scope.snapshot())
            scope = restored
            continue
        (topic, partition, partitions), minute = step
        at = END_OF_TIME if minute is None else b.T0 + timedelta(minutes=minute)
        progress = Progress(b.CLUSTER, topic, partition, partitions, at, final=minute is None and partitions == 1)
        for _, sent in _sent(runner, scope, ATTEMPT_FACTS, progress, mine, count):
            reader = reader.observe(sent) or reader
        paths = [scope.marks.of(b.CLUSTER, path) for path in (JOBS, GANGS_JOBS)]
        want = None if None in paths else min(p for p in paths if p is not None)
        seen = reader.latest.get(f"{b.CLUSTER}/{name}", {}).get(mine)
        if f"{b.CLUSTER}/{name}" in reader.ended:
            seen = END_OF_TIME
        assert seen == want, (step, paths)
