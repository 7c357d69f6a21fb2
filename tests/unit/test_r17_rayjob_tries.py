"""SPEC R17 with R16.4: a RayJob retried under one Kueue Workload. Each try runs on a
RayCluster of its own, under its own key; the Workload's quota is split between them by
when each try began (its `status.startTime`), so every hour's reserved counts once, its
idle is what no try ran, and an earlier try's hold ends where the next try began
(app/core/stages/gang_quota.py `shares`)."""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec
import orjson
import pytest

from app.core.base.emit import Emit
from app.core.base.rules import DEFAULT_RULES, Rules
from app.core.stages.gang_quota import JOINS_KEPT
from app.model.fleet_records import GOODPUT, Goodput
from app.model.records import CLASSIFIED_FAILURES, IDLE_QUOTA, ClassifiedFailure, IdleQuota
from tests.unit import restart_stories
from tests.unit.builders import T0, condition, kueue_workload, minutes, rayjob, record, updated, with_progress
from tests.unit.drivers import new_pipeline

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

GPUS = 8  # the Workload's one pod set: one worker of 8 GPUs, as each try's GPU worker asks
ADMITTED = T0 - minutes(60)  # 11:00
FINISHED = T0 + minutes(0.2)  # 12:00:12
FIRST_RUN = (T0 - minutes(55), T0 - minutes(30))  # the first try's GPU worker: 11:05 to its Xid 79 at 11:30
SECOND_BEGAN = T0 - minutes(26)  # the second try's startTime, with its RayCluster's name: 11:34
SECOND_RUN = (T0 - minutes(25), T0 - minutes(1))  # the second try's GPU worker: 11:35 to 11:59


def _seconds(span: tuple[datetime, datetime]) -> int:
    return int((span[1] - span[0]).total_seconds())


def _story() -> list[dict]:
    """restart_stories.rayjob_retried_then_fails under a Workload admitted at 11:00 and
    finished at 12:00:12, in observation order."""
    records = restart_stories.rayjob_retried_then_fails()
    job = records[0]["value"]["object"]
    workload = kueue_workload(job, workers=1, gpus=GPUS, created=ADMITTED - minutes(1))
    admitted = [condition("QuotaReserved", "QuotaReserved", "", ADMITTED), condition("Admitted", "Admitted", "", ADMITTED)]
    finished = updated(workload, conditions=[*admitted, condition("Finished", "JobFinished", "", FINISHED)])
    records += [
        record(workload, ADMITTED - minutes(1), "ADDED"),
        record(updated(workload, conditions=admitted), ADMITTED),
        record(finished, FINISHED + minutes(0.1)),
    ]
    return sorted(records, key=lambda r: r["value"]["observed_at"])  # stable: each object's own order kept


def _attempt(story: list[dict]) -> str:
    meta = next(r for r in story if r["topic"] == "k8s.jobs")["value"]["object"]["metadata"]
    return f"prod-a/{meta['namespace']}/RayJob/{meta['name']}/{meta['uid']}"


def _run(records: list[dict], rules: Rules = DEFAULT_RULES) -> list[Emit]:
    pipeline = new_pipeline(rules)
    out: list[Emit] = []
    for line in with_progress(records, tail=timedelta(minutes=60)):
        out += pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
    return out + pipeline.finish()


def _hours(out: list[Emit]) -> dict[str, Goodput]:
    latest = {e.key: e.value for e in out if e.topic == GOODPUT}
    return {k: v for k, v in latest.items() if v.attempts}


def _idle(out: list[Emit]) -> list[IdleQuota]:
    return [e.value for e in out if e.topic == IDLE_QUOTA]


def _verdicts(out: list[Emit]) -> list[ClassifiedFailure]:
    return [e.value for e in out if e.topic == CLASSIFIED_FAILURES]


def test_r17_a_rayjob_retried_under_one_workload_counts_each_hours_quota_once_over_its_tries() -> None:
    out = _run(_story())
    [eleven, twelve] = sorted(_hours(out).values(), key=lambda h: h.hour)
    running = GPUS * (_seconds(FIRST_RUN) + _seconds(SECOND_RUN))  # both tries' GPU workers
    assert eleven.reserved_gpu_seconds == GPUS * 3600  # 11:00 to 12:00, once (not once per try)
    assert eleven.running_gpu_seconds == running == 23_520
    assert eleven.idle_gpu_seconds == GPUS * 3600 - running == 5_280  # what no try ran
    assert twelve.reserved_gpu_seconds == GPUS * 12 and twelve.running_gpu_seconds == 0


def test_r17_a_retried_rayjobs_final_verdict_carries_its_own_trys_figures() -> None:
    """The final verdict's attempt is the last try's cluster: its share from the try's
    start until the failure, against that try's running (the hours hold the earlier try's)."""
    story = _story()
    [final] = [v for v in _verdicts(_run(story)) if v.terminal]
    assert final.key == _attempt(story)
    figures = final.goodput
    assert figures is not None
    assert figures.reserved_gpu_seconds == GPUS * int((T0 - SECOND_BEGAN).total_seconds())  # 12,480: from 11:34 to the failure
    assert figures.running_gpu_seconds == GPUS * _seconds(SECOND_RUN)
    assert figures.idle_gpu_seconds == figures.reserved_gpu_seconds - figures.running_gpu_seconds == 960


def test_r17_3_a_retried_rayjob_has_no_idle_quota_while_a_try_runs() -> None:
    """Idle at most 5 minutes at a stretch (11:00-11:05, 11:30-11:35, 11:59-12:00:12): none
    to report, where each try's key holding the whole quota made two, one never cleared."""
    assert _idle(_run(_story())) == []


def test_r17_3_an_earlier_trys_hold_ends_where_the_next_try_began_its_idle_quota_cleared() -> None:
    """With a 3-minute limit the gaps around the first try's run are idle quota: each
    reported once on the first try's key and cleared once — the one after its failure
    where the second try began (its hold ends there) — and none on the second try's key
    before its own start."""
    rules = Rules(max_idle_quota_seconds=180)
    story = _story()
    idle = _idle(_run(story, rules))
    told = [(r.key, r.since, r.idle, r.at) for r in idle]
    assert all(r.since >= ADMITTED for r in idle)
    for r in idle:
        assert not (FIRST_RUN[0] <= r.since < FIRST_RUN[1]) and not (SECOND_RUN[0] <= r.since < SECOND_RUN[1])  # no try was running
    opened = {(k, s) for k, s, i, _ in told if i}
    closed = {(k, s) for k, s, i, _ in told if not i}
    assert opened == closed and len(told) == 2 * len(opened)  # each reported once, cleared once
    ends = sorted(at for _, _, i, at in told if not i)
    assert ends == [FIRST_RUN[0], SECOND_BEGAN], told  # 11:00-11:05 and 11:30-11:34, the second ended where the next try began
    assert {k for k, _ in opened} == {_attempt(story)}  # the attempt's key (IdleQuota/v1), both on the first try's share


@pytest.mark.parametrize("where", ["before", "after"])
def test_r12_7_a_retried_rayjobs_quota_splits_the_same_whichever_comes_first(where: str) -> None:
    """The Workload's records all before the RayJob's, or all after: the joins are kept
    with their own times, so the shares, hours, idle quota and final verdicts are the same."""
    story = _story()
    expected = _run(story)
    workloads = [r for r in story if r["topic"] == "k8s.workloads"]
    rest = [r for r in story if r["topic"] != "k8s.workloads"]
    got = _run(workloads + rest if where == "before" else rest + workloads)
    assert {k: msgspec.json.encode(v) for k, v in _hours(got).items()} == {k: msgspec.json.encode(v) for k, v in _hours(expected).items()}
    # The latest verdict per attempt (a Workload read after the failure revises its figures in).
    assert {v.key: (v.code, v.goodput) for v in _verdicts(got)} == {v.key: (v.code, v.goodput) for v in _verdicts(expected)}
    assert [msgspec.json.encode(r) for r in _idle(got)] == [msgspec.json.encode(r) for r in _idle(expected)]


def test_r11_5_a_rayjob_renaming_its_cluster_endlessly_keeps_the_latest_joins() -> None:
    job = rayjob("rename", deployment="Initializing", job_status="", labels={})
    workload = kueue_workload(job, workers=1, gpus=GPUS, created=ADMITTED)
    admitted = [condition("QuotaReserved", "QuotaReserved", "", ADMITTED), condition("Admitted", "Admitted", "", ADMITTED)]
    records = [record(job, ADMITTED, "ADDED"), record(updated(workload, conditions=admitted), ADMITTED)]
    for i in range(100):
        at = ADMITTED + timedelta(seconds=10 * (i + 1))
        records.append(record(updated(job, rayClusterName=f"rename-{i:05d}", startTime=at.isoformat().replace("+00:00", "Z")), at))
    pipeline = new_pipeline()
    for line in records:
        pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
    [gang] = [g for g in pipeline.states["gangs"].values() if g.jobset is not None]
    assert [j.key.rsplit("/", 1)[1] for j in gang.jobset.joins] == [f"rename-{i:05d}" for i in range(100 - JOINS_KEPT, 100)]


def test_r17_a_gang_state_stored_before_joins_still_sends_its_quota_to_its_one_key() -> None:
    """An upgrade: a job's state stored with its one key (`join`, before `joins`) sends a
    Workload's change to that key at once, not only after the job's next record."""
    story = _story()
    pipeline = new_pipeline()
    first_try = [r for r in story if datetime.fromisoformat(r["value"]["observed_at"]) <= T0 - minutes(50)]
    for line in first_try:  # admitted, the first try named and its pods running: one join
        pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
    gangs = pipeline.states["gangs"]
    [(gang, state)] = [(k, s) for k, s in gangs.items() if s.jobset is not None and s.jobset.joins]
    [join] = state.jobset.joins
    gangs[gang] = msgspec.structs.replace(state, jobset=msgspec.structs.replace(state.jobset, joins=(), join=join.key))
    finished = story[-1]
    assert finished["topic"] == "k8s.workloads"
    pipeline.feed(finished["topic"], finished["key"], orjson.dumps(finished["value"]))
    quota = pipeline.states["attempts"][join.key].usage.quota
    assert [hold.end for w in quota.workloads for hold in w.holds] == [FINISHED]
