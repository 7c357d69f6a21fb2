"""SPEC R17: where the GPU-hours went — reserved, running, useful, lost and idle GPU-seconds
and waits, per attempt (on its terminal verdict) and per (cluster, namespace, queue, hour)
on `faultline.goodput`; idle quota on `faultline.idle-quota`. Every rule through every
driver (`memory`, `wire`), from JobSets under Kueue whose pods the kubelet runs
(tests/unit/goodput_world.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.base.emit import Emit
from app.core.base.rules import DEFAULT_RULES, Rules
from app.core.verdicts.goodput import HourFigures, Run, _spread, hourly
from app.core.verdicts.goodput import seconds as goodput_seconds
from app.model.facts import WorkloadQuota
from app.model.fleet_records import GOODPUT, Goodput
from app.model.records import CLASSIFIED_FAILURES, GANG_TRANSITIONS, IDLE_QUOTA, ClassifiedFailure, GangTransition, GoodputFigures, IdleQuota
from tests.unit.drivers import new_pipeline
from tests.unit import builders, scenario, stories
from tests.unit.gang_builders import JOBSET_NAME, JOBSET_UID, NAMESPACE, k8s_time
from tests.unit.goodput_world import (
    GPUS_PER_POD,
    PodsWorld,
    evicted_but_held,
    failed_then_completed_generation,
    failed_under_kueue,
    pods_never_start,
    preempted_and_readmitted,
    run,
)

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

ATTEMPT = "prod-a/team-a/run-abc/a0/1"  # the JobSet's attempt, under the orchestrator's labels
GPUS = 4 * GPUS_PER_POD  # the Workload's pod set: 4 pods of 8 GPUs


def goodput(out: list[Emit]) -> dict[str, Goodput]:
    """The latest `faultline.goodput` record per key (the topic is compacted), but for hours
    whose attempts all moved to another key (their queue known later): none is the same."""
    latest = {e.key: e.value for e in out if e.topic == GOODPUT}
    return {k: v for k, v in latest.items() if v.attempts}


def total(out: list[Emit], field: str) -> int:
    return sum(getattr(r, field) for r in goodput(out).values())


def idle_records(out: list[Emit]) -> list[IdleQuota]:
    return [e.value for e in out if e.topic == IDLE_QUOTA]


def verdicts(out: list[Emit]) -> list[ClassifiedFailure]:
    return [e.value for e in out if e.topic == CLASSIFIED_FAILURES]


def times(world: PodsWorld, topic: str, test: Any) -> list[datetime]:
    """The observed_at of each record of `topic` whose object passes `test`."""
    return [datetime.fromisoformat(r["value"]["observed_at"]) for r in world.records if r["topic"] == topic and test(r["value"]["object"])]


def condition_time(obj: dict[str, Any], type_: str) -> datetime:
    found = next(c for c in obj["status"]["conditions"] if c["type"] == type_)
    return datetime.fromisoformat(found["lastTransitionTime"])


def seconds(a: datetime, b: datetime) -> int:
    return int((b - a).total_seconds())


def _workload_lines(world: PodsWorld) -> list[dict[str, Any]]:
    return [r["value"]["object"] for r in world.records if r["topic"] == "k8s.workloads" and r["value"]["type"] != "BOOKMARK"]


def _pod_lines(world: PodsWorld) -> list[dict[str, Any]]:
    return [r["value"]["object"] for r in world.records if r["topic"] == "k8s.pods" and r["value"]["type"] != "BOOKMARK"]


# --- R17.1 reserved ------------------------------------------------------------------------------


def test_r17_1_reserved_is_the_pod_sets_gpus_while_quota_is_reserved_until_the_workload_finishes() -> None:
    world = PodsWorld().create_jobset().create_workload().admit().unsuspend().pods_created().pause(60).pods_running().workers_ready()
    world.idle_for(3000).pods_succeeded().complete().finish().pods_deleted().progress()
    workloads = _workload_lines(world)
    reserved = condition_time(workloads[-1], "QuotaReserved")
    finished = condition_time(workloads[-1], "Finished")
    out = run(world)
    assert total(out, "reserved_gpu_seconds") == GPUS * seconds(reserved, finished)  # 4 pods x 8 GPUs, admission to Finished
    assert len(goodput(out)) == 2  # 10:30 to 11:20: two UTC hours, each counting its own part
    assert all(r.queue == "team-a" and r.namespace == NAMESPACE and r.attempts == 1 for r in goodput(out).values())


@pytest.mark.parametrize("end", ["Evicted", "deleted", "released"])
def test_r17_1_a_hold_ends_at_an_eviction_the_workloads_deletion_or_its_quota_released(end: str) -> None:
    world = PodsWorld(policy="false").create_jobset().create_workload().admit().idle_for(600)
    if end == "deleted":  # Kueue's finalizer holds it: the API server sets its deletionTimestamp
        world.wl["metadata"]["deletionTimestamp"] = k8s_time(world.now)
    {"Evicted": world.preempt, "deleted": world.delete_workload, "released": world.release_quota}[end]()
    last = world.records[-1]["value"]
    world.idle_for(600)
    admitted = condition_time(_workload_lines(world)[2], "QuotaReserved")
    if end == "deleted":
        ended = datetime.fromisoformat(last["object"]["metadata"]["deletionTimestamp"])
    else:
        ended = condition_time(last["object"], "Evicted" if end == "Evicted" else "QuotaReserved")
    out = run(world)
    assert total(out, "reserved_gpu_seconds") == GPUS * ((ended - admitted) // timedelta(seconds=1))


def test_r17_1_the_gpus_are_count_times_what_one_pod_of_the_set_requests_a_dra_claim_counting_one() -> None:
    world = PodsWorld()
    pod_set = world.wl["spec"]["podSets"][0]
    pod_set["count"] = 3
    template = pod_set["template"]["spec"]
    template["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "2"}, "claims": [{"name": "nic"}]}
    template["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "rdma"}]
    world.create_jobset().create_workload().admit().idle_for(600).release_quota().progress()
    workloads = _workload_lines(world)
    out = run(world)
    assert total(out, "reserved_gpu_seconds") == 3 * (2 + 1) * seconds(condition_time(workloads[2], "QuotaReserved"), condition_time(workloads[-1], "QuotaReserved"))


# --- R17.2 running, lost, useful, idle, waits -----------------------------------------------------


def test_r17_2_a_gang_preempted_and_readmitted_waits_and_idles_until_its_pods_run_again() -> None:
    world = preempted_and_readmitted()
    out = run(world)
    back = [e.value for e in out if e.topic == GANG_TRANSITIONS and e.value.from_ == "WaitingForReadmission"]
    assert len(back) == 1 and isinstance(back[0], GangTransition)
    assert total(out, "wait_seconds") == back[0].waited_seconds == 612  # Kueue's wait: Evicted to Admitted again
    assert total(out, "waits") == 1
    # Idle: the quota held while the pods pulled their image, before they first ran and
    # after the readmission until they ran again (an hour's idle is what it held beyond what
    # ran in it: the few seconds its pods ran on after the eviction offset as much).
    workloads, pods = _workload_lines(world), _pod_lines(world)
    starts = sorted({datetime.fromisoformat(p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]) for p in pods if p["status"].get("phase") == "Running" and "running" in p["status"]["containerStatuses"][0]["state"]})
    first_hold = condition_time(workloads[2], "QuotaReserved")
    readmitted = next(w for w in workloads if any(c["type"] == "Evicted" and c["status"] == "False" for c in w["status"].get("conditions", [])))
    second_hold = condition_time(readmitted, "Admitted")
    first_run = [s for s in starts if s < second_hold]
    again = [s for s in starts if s >= second_hold]
    before_pods = GPUS_PER_POD * (sum(seconds(first_hold, s) for s in first_run) + sum(seconds(second_hold, s) for s in again))
    ran_on = GPUS * 10  # at most: the pods stopped within seconds of the eviction
    assert before_pods - ran_on <= total(out, "idle_gpu_seconds") <= before_pods
    assert seconds(second_hold, min(again)) >= 300  # the five minutes its new pods pulled their image
    assert total(out, "useful_gpu_seconds") == total(out, "running_gpu_seconds") > 0  # nothing failed: all of it useful
    assert total(out, "reserved_gpu_seconds") == total(out, "running_gpu_seconds") + total(out, "idle_gpu_seconds")
    assert not idle_records(out)  # no stretch of it reached max_idle_quota


def test_r17_2_a_failed_generations_gpu_seconds_are_lost_and_a_completed_ones_useful() -> None:
    world = failed_then_completed_generation()
    out = run(world)
    [interim] = [v for v in verdicts(out) if v.generation == 0]
    assert not interim.terminal and interim.kind == "SYSTEM" and interim.code == "GpuFallenOffBus"
    assert total(out, "lost_system_gpu_seconds") == interim.gpu_seconds > 0  # the failed generation, by its verdict's kind
    assert total(out, "lost_user_gpu_seconds") == 0
    pods = _pod_lines(world)
    second = {p["metadata"]["uid"]: p for p in pods if p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"}
    ran = 0
    for p in second.values():
        state = p["status"]["containerStatuses"][0]["state"]
        if "terminated" in state and state["terminated"]["exitCode"] == 0:
            ran += GPUS_PER_POD * seconds(datetime.fromisoformat(state["terminated"]["startedAt"]), datetime.fromisoformat(state["terminated"]["finishedAt"]))
    assert ran > 0
    # Useful: every GPU-second that ran minus the lost ones; the completed generation's all of it.
    assert total(out, "useful_gpu_seconds") == total(out, "running_gpu_seconds") - interim.gpu_seconds
    assert total(out, "useful_gpu_seconds") >= ran


def test_r17_2_without_a_workload_goodput_is_useful_over_running() -> None:
    """Two pod tasks, no Kueue: one ran 30 minutes and succeeded, the other 30 and failed."""
    lines = []
    for run_name, exit_code in (("fine", 0), ("broke", 1)):
        p = builders.pod(run_name, labels=builders.attempt_labels(run=run_name), containers={"main": builders.running(builders.T0 - builders.minutes(30))})
        phase, reason = ("Succeeded", "Completed") if exit_code == 0 else ("Failed", "Error")
        ended = builders.updated(p, phase=phase, containerStatuses=[{"name": "main", "state": builders.terminated(exit_code, builders.T0, reason)}])
        lines += [builders.record(p, builders.T0 - builders.minutes(30), "ADDED"), builders.record(ended, builders.T0)]
    pipeline = new_pipeline()
    out = [e for line in lines for e in pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))] + pipeline.finish()
    [record] = goodput(out).values()
    assert (record.queue, record.reserved_gpu_seconds, record.attempts) == ("", 0, 2)
    assert (record.running_gpu_seconds, record.lost_user_gpu_seconds, record.useful_gpu_seconds) == (2 * 8 * 1800, 8 * 1800, 8 * 1800)
    assert record.goodput == 0.5  # useful / running: no Workload held quota
    [verdict] = verdicts(out)
    assert verdict.goodput == GoodputFigures(0, 8 * 1800, 0, 8 * 1800, 0, 0)


# --- R17.3 idle quota ----------------------------------------------------------------------------


def test_r17_3_a_workload_admitted_whose_pods_never_start_is_idle_quota_then_cleared_when_released() -> None:
    world = pods_never_start()
    out = run(world)
    reported = idle_records(out)
    assert [(r.idle, r.why) for r in reported] == [(True, "no-running-pod"), (False, "no-running-pod")]
    start, end = reported
    workloads = _workload_lines(world)
    admitted = condition_time(workloads[2], "QuotaReserved")
    released = condition_time(workloads[-1], "QuotaReserved")
    assert (start.key, start.gpus, start.queue, start.since) == (ATTEMPT, GPUS, "team-a", admitted)
    assert start.at == admitted + DEFAULT_RULES.max_idle_quota and start.idle_seconds == 900
    assert (end.since, end.at) == (admitted, released)
    assert start.workload is not None and start.workload.name == f"jobset-{JOBSET_NAME}-3f9a2"
    assert start.tracked.kind == "JobSet" and start.tracked.uid == JOBSET_UID
    assert total(out, "idle_gpu_seconds") == total(out, "reserved_gpu_seconds") == GPUS * seconds(admitted, released)


def test_r17_3_idle_quota_is_reported_when_stream_time_passes_the_limit_not_before() -> None:
    world = PodsWorld().create_jobset().create_workload().admit().unsuspend().pods_created().idle_for(840)
    assert not idle_records(run(world, end=False))  # 14 minutes: not yet
    world.idle_for(120)
    [reported] = idle_records(run(world, end=False))
    assert reported.idle and reported.at == reported.since + timedelta(minutes=15)


def test_r17_3_the_limit_is_a_rule_setting_and_part_of_the_rules_version() -> None:
    rules = Rules(max_idle_quota_seconds=30 * 60)
    assert rules.version != DEFAULT_RULES.version
    assert not idle_records(run(pods_never_start(), rules))  # idle 25 minutes, under the limit
    assert b'"max_idle_quota_seconds":900' in msgspec.json.encode(DEFAULT_RULES)


def test_r17_3_pods_that_run_within_the_limit_are_no_idle_quota() -> None:
    world = PodsWorld().create_jobset().create_workload().admit().unsuspend().pods_created().idle_for(600).pods_running().idle_for(1800)
    assert not idle_records(run(world))


def test_r17_3_a_workload_evicted_that_still_holds_its_quota_is_idle_quota_kueue_14811() -> None:
    world = evicted_but_held()
    out = run(world)
    reported = idle_records(out)
    assert [(r.idle, r.why) for r in reported] == [(True, "evicted-but-held"), (False, "evicted-but-held")]
    start, end = reported
    evicted = next(w for w in _workload_lines(world) if any(c["type"] == "Evicted" and c["status"] == "True" for c in w["status"].get("conditions", [])))
    since = condition_time(evicted, "Evicted")
    assert {c["type"]: c["status"] for c in evicted["status"]["conditions"]}["QuotaReserved"] == "True"  # the contradiction
    requeue_at = datetime.fromisoformat(evicted["status"]["requeueState"]["requeueAt"])
    assert start.since == since and start.requeue_at == requeue_at and start.gpus == GPUS
    assert start.at == max(requeue_at, since + DEFAULT_RULES.max_idle_quota)  # past requeueAt and the limit
    assert "kubernetes-sigs/kueue#14811" in start.reason
    assert end.at == condition_time(_workload_lines(world)[-1], "QuotaReserved")  # cleared when Kueue released it


def test_r17_3_a_brief_hold_after_an_eviction_is_no_idle_quota() -> None:
    """Kueue keeps the reservation while the evicted job's pods terminate (kueue#692):
    released within the limit, that is no contradiction worth reporting."""
    world = PodsWorld(policy="true").create_jobset().create_workload().admit().unsuspend().pods_created().pods_running().workers_ready()
    world.idle_for(600).evict_keeping_quota().suspend().pods_deleted().idle_for(120).release_quota().idle_for(1800)
    assert not idle_records(run(world))


# --- R17.4 on the verdict and per hour ------------------------------------------------------------


def test_r17_4_the_terminal_verdict_carries_the_attempts_figures_up_to_its_failure() -> None:
    world = failed_under_kueue()
    out = run(world)
    [verdict] = {v.key: v for v in verdicts(out)}.values()
    figures = verdict.goodput
    assert verdict.terminal and figures is not None
    workloads = _workload_lines(world)
    reserved_since = condition_time(workloads[2], "QuotaReserved")
    assert figures.reserved_gpu_seconds == GPUS * seconds(reserved_since, verdict.failed_at)
    assert figures.lost_gpu_seconds == verdict.gpu_seconds  # a failed attempt loses all it ran
    assert figures.running_gpu_seconds == verdict.gpu_seconds and figures.useful_gpu_seconds == 0
    assert figures.idle_gpu_seconds == figures.reserved_gpu_seconds - figures.running_gpu_seconds > 0  # the image pull
    body = msgspec.json.decode(msgspec.json.encode(verdict))
    assert list(body["goodput"]) == [
        "reserved_gpu_seconds", "running_gpu_seconds", "useful_gpu_seconds", "lost_gpu_seconds", "idle_gpu_seconds", "wait_seconds",
    ]  # fmt: skip


def test_r17_4_an_earlier_generations_verdict_carries_none() -> None:
    out = run(failed_then_completed_generation())
    assert [v.goodput for v in verdicts(out)] == [None]


def test_r17_4_per_hour_every_second_counts_in_the_hour_it_fell_in() -> None:
    out = run(preempted_and_readmitted())
    records = goodput(out)
    assert sorted(records) == [f"prod-a/team-a/team-a/2026-09-15T{h}:00:00Z" for h in ("10", "11")]
    ten = records["prod-a/team-a/team-a/2026-09-15T10:00:00Z"]
    assert ten.reserved_gpu_seconds == GPUS * seconds(datetime.fromisoformat("2026-09-15T10:30:05+00:00"), datetime.fromisoformat("2026-09-15T11:00:00+00:00"))
    assert ten.goodput == round(ten.useful_gpu_seconds / ten.reserved_gpu_seconds, 4)
    for r in records.values():
        assert r.useful_gpu_seconds == r.running_gpu_seconds - r.lost_user_gpu_seconds - r.lost_system_gpu_seconds
        assert r.idle_gpu_seconds == max(r.reserved_gpu_seconds - r.running_gpu_seconds, 0)


def test_r17_4_an_attempt_keeps_the_hours_the_fleet_keeps_and_no_more() -> None:
    """R11.5: an attempt running for three days tells the fleet its latest `history_hours`."""
    rules = msgspec.structs.replace(DEFAULT_RULES, fleet=msgspec.structs.replace(DEFAULT_RULES.fleet, history_hours=6, window_seconds=3600))
    world = PodsWorld().create_jobset().create_workload().admit().unsuspend().pods_created().pods_running().workers_ready()
    world.pause(3 * 86400).pods_succeeded().complete().finish().pods_deleted().progress()
    pipeline = new_pipeline(rules)
    out = run(world, rules, pipeline=pipeline)
    hours = sorted({r.hour for r in goodput(out).values()})
    assert len(hours) == 6 and hours[-1] == datetime.fromisoformat("2026-09-18T10:00:00+00:00")
    [state] = [s for s in pipeline.states["attempts"].values() if s.usage is not None]
    assert len(state.usage.hours) == 6


def test_r17_4_quota_facts_reach_the_attempt_whichever_comes_first() -> None:
    """The Workload's records all before the JobSet's, or after: the same figures (R7.1)."""
    world = failed_under_kueue()
    jobs = [r for r in world.records if r["topic"] == "k8s.jobs"]
    others = [r for r in world.records if r["topic"] != "k8s.jobs"]
    expected = run(world)
    for order in (jobs + others, others + jobs):
        world.records = order
        got = run(world)
        assert {v.key: v.goodput for v in verdicts(got)} == {v.key: v.goodput for v in verdicts(expected)}
        assert {k: msgspec.json.encode(v) for k, v in goodput(got).items()} == {k: msgspec.json.encode(v) for k, v in goodput(expected).items()}


def test_r17_4_a_workload_quota_kept_is_bounded() -> None:
    """R11.5: a job preempted and readmitted a hundred times keeps its latest holds."""
    world = PodsWorld(policy="true").create_jobset().create_workload().admit().unsuspend()
    for _ in range(100):
        world.pause(60).preempt().suspend().release_quota().pause(30).readmit().unsuspend()
    pipeline = new_pipeline()
    run(world, pipeline=pipeline)
    [gang] = pipeline.states["gangs"].values()
    [quota] = gang.quota
    assert isinstance(quota, WorkloadQuota) and len(quota.holds) == 32 and len(quota.waits) == 32


_INSTANTS = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=_INSTANTS, length=st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=60)), gpus=st.integers(1, 64))
def test_r17_4_each_hour_holds_the_whole_seconds_that_fell_in_it(start: datetime, length: timedelta, gpus: int) -> None:
    """A run's seconds by UTC hour, counted from its start to the end of each hour it
    touched: they add up to its whole seconds, and each hour holds what fell in it."""
    end = start + length
    hours = hourly([Run(gpus, start, end)], None, [], None, KEPT_MAX)
    assert sum(h.running for h in hours) == gpus * goodput_seconds(start, end)
    done = 0
    for h in hours:
        assert h.hour == h.hour.replace(minute=0, second=0, microsecond=0) and h.hour.utcoffset() == timedelta(0)
        upto = goodput_seconds(start, min(end, h.hour + timedelta(hours=1)))
        assert h.running == gpus * (upto - done) and h.idle == 0 and h.useful == h.running
        done = upto


KEPT_MAX = 24 * 90  # the most `history_hours` allows


def _kept_by_hand(hours: tuple[HourFigures, ...], kept: int) -> tuple[HourFigures, ...]:
    """The latest `kept` hours of every hour counted."""
    if not hours:
        return hours
    oldest = hours[-1].hour - timedelta(hours=kept - 1)
    return tuple(h for h in hours if h.hour >= oldest)


@settings(max_examples=300, deadline=None)
@given(
    start=_INSTANTS,
    lengths=st.lists(st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=30)), min_size=1, max_size=4),
    kept=st.integers(1, 6),
)
def test_r11_5_the_hours_kept_are_those_of_every_hour_counted(start: datetime, lengths: list[timedelta], kept: int) -> None:
    """R17.4 keeps an attempt's latest `history_hours`; a span longer than that is counted
    from just before them (R11.5): the hours kept are exactly those counting it whole gives."""
    runs = [Run(i + 1, start + timedelta(minutes=17 * i, microseconds=331 * i), start + length) for i, length in enumerate(lengths)]
    assert hourly(runs, None, [], None, kept) == _kept_by_hand(hourly(runs, None, [], None, KEPT_MAX), kept)


def test_r11_5_a_start_forged_centuries_back_costs_no_more_than_the_hours_kept() -> None:
    """A Workload's or pod's time is the tenant's to write: a hold or run that says it began
    in year 1 is counted over the hours the fleet keeps, not hour by hour since then."""
    end = datetime(2026, 9, 1, 12, 30, tzinfo=timezone.utc)
    counted: dict[int, list[int]] = {}
    _spread(counted, datetime(1, 1, 1, tzinfo=timezone.utc), end, 8, 1, 48)
    assert len(counted) <= 48 + 3
    hours = hourly([Run(8, datetime(1, 1, 1, tzinfo=timezone.utc), end)], None, [], None, 48)
    assert len(hours) == 48 and hours[-1].hour == datetime(2026, 9, 1, 12, tzinfo=timezone.utc)
    assert hours[-1].running == 8 * 30 * 60 and all(h.running == 8 * 3600 for h in hours[:-1])


def test_r17_2_a_pod_force_deleted_off_an_unreachable_node_ran_until_its_deletion_timestamp() -> None:
    """Kueue's failure recovery force-deletes a pod whose node stopped answering (R16.6): its
    container never says it stopped. It ran until its deletionTimestamp (the API server's,
    where its failure's GPU-seconds end, R5.1), not until a record first showed it Failed:
    the same figures when that record comes late, in a burst (R12.7)."""
    lines = stories.job_kueue_force_deleted()
    pods = {line["value"]["object"]["metadata"]["uid"]: line["value"]["object"] for line in lines if line["topic"] == "k8s.pods"}
    [lost] = [p for p in pods.values() if p["status"]["phase"] == "Failed" and "terminated" not in p["status"]["containerStatuses"][0]["state"]]
    started = datetime.fromisoformat(lost["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
    deleting = datetime.fromisoformat(lost["metadata"]["deletionTimestamp"])
    figures = []
    for late in (0, 90):
        moved = [
            {**line, "value": {**line["value"], "observed_at": k8s_time(datetime.fromisoformat(line["value"]["observed_at"]) + timedelta(seconds=late))}}
            if line["value"]["object"].get("status", {}).get("phase") == "Failed" and line["value"]["object"]["metadata"]["uid"] == lost["metadata"]["uid"]
            else line
            for line in lines
        ]
        out = scenario.run(moved, derived=True)
        [verdict] = [v for v in verdicts(out) if v.terminal]
        figures.append((verdict.goodput, {k: msgspec.json.encode(v) for k, v in goodput(out).items()}))
        [hour] = goodput(out).values()
        others = sum(GPUS_PER_POD * seconds(datetime.fromisoformat(p["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"]),
                                            datetime.fromisoformat(p["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]))
                     for p in pods.values() if "terminated" in p["status"]["containerStatuses"][0]["state"])  # fmt: skip
        assert hour.running_gpu_seconds == GPUS_PER_POD * seconds(started, deleting) + others
    assert figures[0] == figures[1]



def _forged(world: PodsWorld, at: str) -> PodsWorld:
    """The world with every Workload's QuotaReserved time written as `at`."""
    for record in world.records:
        if record["topic"] == "k8s.workloads" and record["value"]["type"] != "BOOKMARK":
            for condition in record["value"]["object"].get("status", {}).get("conditions", []):
                if condition["type"] == "QuotaReserved":
                    condition["lastTransitionTime"] = at
    return world


def test_r11_3_a_workload_time_at_the_calendars_end_refuses_its_record() -> None:
    """R9 and R17 compute with a Workload's condition times: one at 0001-01-01 is too close
    to the calendar's end for that arithmetic, so its record is dead-lettered, named."""
    out = run(_forged(pods_never_start(), "0001-01-01T00:00:00Z"))
    letters = [e.value for e in out if e.topic == "faultline.dead-letter"]
    assert letters and all("Workload condition 'QuotaReserved' lastTransitionTime 0001-01-01" in x.reason for x in letters)
    assert {x.topic for x in letters} == {"k8s.workloads"}
    assert total(out, "reserved_gpu_seconds") == 0


def test_r11_5_a_quota_forged_to_have_begun_in_1900_counts_only_the_hours_the_fleet_keeps() -> None:
    """A hold that says it began in 1900 (in range, but a century of hours) is told over the
    fleet's `history_hours`, as the honest one's hours are, with nothing older."""
    world = PodsWorld().create_jobset().create_workload().admit().unsuspend().pods_created().pause(60).pods_running().workers_ready()
    world.idle_for(3000).pods_succeeded().complete().finish().pods_deleted().progress()
    out = run(_forged(world, "1900-01-01T00:00:00Z"))
    hours = goodput(out)
    assert 0 < len(hours) <= DEFAULT_RULES.fleet.history_hours
    assert all(h.reserved_gpu_seconds <= GPUS * 3600 for h in hours.values())


def test_r17_3_idle_quota_waits_for_the_pods_progress_when_the_pods_are_read_behind_the_other_topics() -> None:
    """R12.7 for R17.3: a worker reading the pods topic behind the others (every other
    topic's records and progress first) decides no idle quota before it has heard of the
    pods: the same records as read in order, none here (the gang ran within the limit)."""
    world = preempted_and_readmitted()
    in_order = idle_records(run(world))
    pods_last = PodsWorld()
    pods_last.records = [r for r in world.records if r["topic"] != "k8s.pods"] + [r for r in world.records if r["topic"] == "k8s.pods"]
    assert idle_records(run(pods_last)) == in_order == []
