"""`faultline run` is durable (issue 18): stopped mid-story on the real API server and
started again on the same state folder, it prints exactly what one uninterrupted run
prints, while pods are deleted and attempts fail in between."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.bridge.helpers import Operation, story_operations, wait_for
from tests.bridge.realkube import ROOT, SHORT_SKEW_SECONDS, LiveKueue, StoryPlayer, faultline_env, interrupt, namespace, short_skew_rules
from tests.unit import builders, stories
from tests.unit.scenario import final_verdicts

pytestmark = pytest.mark.apiserver

CLUSTER = "real-a"
HEADERS = ("WHAT ",)  # run's one header (app/cli/live_output.py)


def phases(records_by_story: list[list[dict[str, Any]]]) -> tuple[list[Operation], list[Operation], list[Operation]]:
    """Each story cut in three: until its last fault Event is written (the pods still
    run); then until its last deletion (attempts fail, faulted pods are deleted); the
    rest. The second part is played while the interrupted run is down.

    The Events stay out of the second part: after a restart each kind's watch replays
    its changes in order, but the kinds independently of each other, so a fault updated
    while the run was down could come back after its pod's failure and revise the verdict
    (R7.2: a second, identical-looking line; R7.1: the same final verdict). An
    uninterrupted run whose Event watch lags behind its Pod watch prints the same."""
    cut: tuple[list[Operation], list[Operation], list[Operation]] = ([], [], [])
    for records in records_by_story:
        ops = story_operations(records)
        events = max(i for i, o in enumerate(ops) if o.plural == "events") + 1
        deletions = max(i for i, o in enumerate(ops) if o.op == "delete") + 1
        cut[0].extend(ops[:events])
        cut[1].extend(ops[events:deletions])
        cut[2].extend(ops[deletions:])
    return cut


def start(state: Path, kubeconfig: Path, ns: str, name: str, tmp_path: Path, *more: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    args = ["run", "--kubeconfig", str(kubeconfig), "--cluster", CLUSTER, "--namespaces", ns, "--progress-interval", "0.2",
            "--state", str(state), "--out", str(tmp_path / f"{name}.jsonl"), *more]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=faultline_env(), stdout=stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL)
    return proc, out, err


def stop(proc: subprocess.Popen[bytes], how: signal.Signals = signal.SIGTERM) -> None:
    interrupt(proc, how)


def changes_logged(state: Path) -> int:
    """Changes (not progress records) in a run's event log."""
    return sum(1 for path in (state / "log").glob("*.jsonl") for line in path.read_bytes().splitlines() if b'"type":"BOOKMARK"' not in line)


def printed(*outs: Path) -> Counter[str]:
    """Verdict and transition lines as printed, headers aside, spacing collapsed (each
    process aligns its columns to what it printed so far)."""
    lines: Counter[str] = Counter()
    for out in outs:
        for line in out.read_text().splitlines():
            if line.strip() and not line.startswith(HEADERS):
                lines[re.sub(r"\s{2,}", "  ", line.strip())] += 1
    return lines


def story() -> list[list[dict[str, Any]]]:
    builders.reset_ids()
    t0 = datetime.now(timezone.utc) - timedelta(minutes=2)
    return [stories.jobset_restart_then_complete(t0=t0), stories.mpijob_row_remap(t0=t0), stories.pod_task_nvlink(t0=t0)]


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_run_stopped_and_started_again_mid_story_prints_what_one_uninterrupted_run_prints(apiserver, tmp_path, how):
    by_story = story()
    records = [r for s in by_story for r in s]
    first, down, last = phases(by_story)
    ns = namespace(apiserver, "durable")
    kubeconfig = apiserver.kubeconfig
    whole, broken = tmp_path / "whole-state", tmp_path / "broken-state"
    reference, ref_out, ref_err = start(whole, kubeconfig, ns, "whole", tmp_path)
    interrupted, out_1, err_1 = start(broken, kubeconfig, ns, "broken-1", tmp_path)
    restarted = None
    try:
        for err in (ref_err, err_1):
            wait_for(lambda err=err: "every watch has listed and is live" in err.read_text(), timeout=90, what=f"{err.name}: live")
        player = StoryPlayer(apiserver, ns)
        changes = player.play_operations(first)
        wait_for(lambda: changes_logged(broken) == changes, timeout=60, what=f"{changes} changes in the interrupted run's log")
        stop(interrupted, how)
        changes = player.play_operations(down)  # faulted pods deleted, attempts failed: while the run is down
        wait_for(lambda: changes_logged(whole) == changes, timeout=60, what="the reference run's log")
        restarted, out_2, err_2 = start(broken, kubeconfig, ns, "broken-2", tmp_path)
        wait_for(lambda: changes_logged(broken) == changes, timeout=90, what="the changes made while the run was down")
        changes = player.play_operations(last)
        expected = printed(ref_out)
        wait_for(lambda: changes_logged(whole) == changes == changes_logged(broken), timeout=60, what=f"{changes} changes in both logs")
        wait_for(lambda: printed(ref_out) == printed(out_1, out_2) and printed(ref_out) != expected, timeout=60,
                 what="both runs to print the same")
    finally:
        stop(reference)
        stop(interrupted)
        if restarted is not None:
            stop(restarted)
    texts = {p.name: p.read_text() for p in (ref_err, err_1, err_2)}
    assert reference.returncode == 0 and restarted.returncode == 0, texts
    assert not any("Traceback" in t for t in texts.values()), texts
    assert interrupted.returncode == (0 if how == signal.SIGTERM else -signal.SIGKILL)

    # The reference is right: its verdicts are the story's.
    want = {key.split("/", 2)[2]: (v.code, v.kind) for key, v in final_verdicts(records).items()}
    got = {}
    for line in (tmp_path / "whole.jsonl").read_bytes().splitlines():
        out = orjson.loads(line)
        if out["topic"] == "faultline.classified-failures":
            got[out["key"].split("/", 2)[2]] = (out["value"]["code"], out["value"]["kind"])
    assert got == want
    # Exactly the same lines: none missing, none printed twice, none different.
    assert printed(out_1, out_2) == printed(ref_out)
    assert "\ngang " in ref_out.read_text() and "Xid 63 CRITICAL" in ref_out.read_text()
    assert f"no saved state in {broken}: listing the cluster from scratch" in texts["broken-1.err"]
    assert "no saved state" not in texts["broken-2.err"] and "replayed " in texts["broken-2.err"]
    # --out after the restart is complete: the replayed log's outputs, then the live ones,
    # ending on the same verdicts. Not on the same revision: each kind's watch catches up on
    # its own, so the restarted run can see the JobSet's restart before the deletions of its
    # pods and revise the GPU time as they arrive (R7.2: 48 → 24 → 8 GPU-seconds where the
    # uninterrupted run printed 8 once); run's table leaves such revisions out, so the lines
    # printed above are the same. Nor to the GPU-second: the restart has no failure
    # condition, so its time is when each run saw it (R5.2), and a pod still running then
    # ran until then.
    broken, whole = latest_verdicts(tmp_path / "broken-2.jsonl"), latest_verdicts(tmp_path / "whole.jsonl")
    assert {k: v[:-1] for k, v in broken.items()} == {k: v[:-1] for k, v in whole.items()}
    for key, (*_, seconds) in whole.items():
        assert seconds is not None and broken[key][-1] is not None and abs(broken[key][-1] - seconds) <= 60, (key, broken[key], seconds)


def latest_verdicts(path: Path) -> dict[str, tuple]:
    """Each verdict's last revision as (code, kind, Xid, terminal, GPU-seconds)."""
    latest = {}
    for line in path.read_bytes().splitlines():
        out = orjson.loads(line)
        if out["topic"] == "faultline.classified-failures":
            v = out["value"]
            latest[out["key"]] = (v["code"], v["kind"], (v["gpu_fault"] or {}).get("code"), v["terminal"], v["gpu_seconds"])
    return latest


def logged(state: Path) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of each change in a run's event log, in order."""
    out = []
    for path in sorted((state / "log").glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            value = orjson.loads(line)["value"]
            if value["type"] != "BOOKMARK":
                meta = value["object"]["metadata"]
                out.append((value["type"], meta["name"], meta["resourceVersion"]))
    return out


def test_run_restarted_after_etcd_compacted_its_position_relists_and_feeds_each_change_once(apiserver, tmp_path):
    """Down longer than etcd and the API server's watch cache keep history: the state at
    the saved position is gone (410), so the bridge relists everything as ADDED. The log takes only what changed: the
    unchanged pod is not fed again. (A pod deleted meanwhile gets no DELETED record: the
    bridge cannot name it, docs/bridge.md.)"""
    ns = namespace(apiserver, "compacted")
    state = tmp_path / "state"
    args = ["--kinds", "Pod"]

    def run() -> tuple[subprocess.Popen[bytes], Path]:
        proc, _, err = start(state, apiserver.kubeconfig, ns, f"run-{len(list(tmp_path.glob('*.err')))}", tmp_path, *args)
        wait_for(lambda: "every watch has listed and is live" in err.read_text(), timeout=60, what="the run live")
        return proc, err

    def pod(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"nodeName": "node-a", "containers": [{"name": "main", "image": "t:1"}]}}

    proc, _ = run()
    made = {name: apiserver.call("POST", f"/api/v1/namespaces/{ns}/pods", pod(name))["metadata"]["resourceVersion"] for name in ("a", "b", "d")}
    wait_for(lambda: len(logged(state)) == 3, what="three pods in the log")
    stop(proc)
    assert proc.returncode == 0
    patched = apiserver.call("PATCH", f"/api/v1/namespaces/{ns}/pods/a", orjson.dumps({"metadata": {"labels": {"x": "1"}}}),
                             content_type="application/merge-patch+json")["metadata"]["resourceVersion"]
    apiserver.call("DELETE", f"/api/v1/namespaces/{ns}/pods/b", {"gracePeriodSeconds": 0})
    created = apiserver.call("POST", f"/api/v1/namespaces/{ns}/pods", pod("c"))["metadata"]["resourceVersion"]
    apiserver.compact()
    apiserver.stop_apiserver()  # a new watch cache starts at the current revision: the old state is etcd's only, compacted
    apiserver.start_apiserver()
    proc, err = run()
    wait_for(lambda: len(logged(state)) == 5, what="the relisted changes in the log")
    stop(proc)
    assert proc.returncode == 0
    assert logged(state)[:3] == [("ADDED", "a", made["a"]), ("ADDED", "b", made["b"]), ("ADDED", "d", made["d"])]
    assert sorted(logged(state)[3:]) == [("ADDED", "a", patched), ("ADDED", "c", created)]
    text = err.read_text()
    assert "no longer has the state at resourceVersion" in text and "Traceback" not in text


def test_a_gang_preempted_while_run_is_down_is_waited_for_and_readmitted_as_one_run_sees_it(apiserver, tmp_path):
    """A JobSet under Kueue (resume after preemption on) runs; while the run is stopped it is
    preempted and suspended; started again, the run decides the wait on the Workload's
    progress (R9.4, R12.4); killed (SIGKILL) during the wait and started again, it sees the
    readmission and the completion. The transitions printed equal those of an
    uninterrupted run, the wait's length included: it is Kueue's, from the Workload's own
    Evicted and Admitted condition times (issue 29), not the time between when each run
    happened to see them. The story is played as it happens (`LiveKueue`): its objects
    carry the cluster's own times."""
    from tests.unit.gang_builders import GangWorld

    ns = namespace(apiserver, "gang")
    whole, broken = tmp_path / "whole-state", tmp_path / "broken-state"
    reference, ref_out, ref_err = start(whole, apiserver.kubeconfig, ns, "whole", tmp_path)
    interrupted, out_1, err_1 = start(broken, apiserver.kubeconfig, ns, "broken-1", tmp_path)
    restarted = again = None
    try:
        for err in (ref_err, err_1):
            wait_for(lambda err=err: "every watch has listed and is live" in err.read_text(), timeout=90, what=f"{err.name}: live")
        live = LiveKueue(apiserver, ns, GangWorld(policy="true"))
        live.start()
        wait_for(lambda: "Pending -> Running" in out_1.read_text(), timeout=60, what="the gang running")
        stop(interrupted)
        live.sleep(1)
        live.preempt("InCohortReclamation").suspend().jobs_stopped().release_quota()
        wait_for(lambda: changes_logged(whole) == live.changes, timeout=60, what="the reference run's log")
        restarted, out_2, err_2 = start(broken, apiserver.kubeconfig, ns, "broken-2", tmp_path)
        wait_for(lambda: "-> WaitingForReadmission" in out_2.read_text(), timeout=60, what="the wait decided after the restart")
        stop(restarted, signal.SIGKILL)  # killed during the wait
        live.sleep(3)  # the wait goes on while it is down
        again, out_3, err_3 = start(broken, apiserver.kubeconfig, ns, "broken-3", tmp_path)
        wait_for(lambda: "every watch has listed and is live" in err_3.read_text(), timeout=90, what="broken-3: live")
        live.readmit().unsuspend().workers_ready().pods_ready()
        live.sleep(1)
        live.complete().finish()
        wait_for(lambda: "-> Completed" in ref_out.read_text() and "-> Completed" in out_3.read_text(), timeout=60, what="both runs: completed")
    finally:
        stop(reference)
        stop(interrupted)
        if restarted is not None:
            stop(restarted)
        if again is not None:
            stop(again)
    assert reference.returncode == interrupted.returncode == again.returncode == 0 and restarted.returncode == -signal.SIGKILL
    texts = [p.read_text() for p in (ref_err, err_1, err_2, err_3)]
    assert not any("Traceback" in t for t in texts), texts

    assert transitions(out_1, out_2, out_3) == transitions(ref_out)
    gang = [line for line in printed(ref_out) if line.startswith("gang ")]
    assert [line.split("  ")[5] for line in gang] == [  # WHAT, JOBSET, CODE, KIND, GPU-H, TRANSITION
        "Pending -> Running", "Running -> WaitingForReadmission", "WaitingForReadmission -> Running", "Running -> Completed"]
    evicted = next(c for c in live.world.wl["status"]["conditions"] if c["type"] == "Evicted")  # now False: when it was True, see the records
    assert evicted["status"] == "False"
    # Kueue's wait, in whole seconds as its conditions have them (the runs' clocks have
    # microseconds), and longer than the restarts it spanned.
    assert waited(gang[2]) == live.kueues_wait() >= 3


def transitions(*outs: Path) -> Counter[str]:
    """Printed gang transitions, waits included."""
    return Counter(line for line in printed(*outs) if line.startswith("gang "))


def waited(line: str) -> float:
    found = re.search(r"waited ([0-9.]+)s", line)
    assert found is not None, line
    return float(found.group(1))


def gang_records(path: Path) -> list[dict[str, Any]]:
    """The gang transitions in a run's --out file, in order: what R12.7 holds fixed."""
    out = []
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        if record["topic"] == "faultline.gang-transitions":
            v = record["value"]
            out.append({"key": record["key"], **{f: v[f] for f in ("from", "to", "code", "retry", "waited_seconds", "reconstructed")},
                        "cause": (v["cause"] or {}).get("reason")})  # fmt: skip
    return out


def observed(state: Path, after: int) -> list[datetime]:
    """When the bridge saw each change in a run's log after its first `after`."""
    times = []
    for path in sorted((state / "log").glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            value = orjson.loads(line)["value"]
            if value["type"] != "BOOKMARK":
                times.append(datetime.fromisoformat(value["observed_at"].replace("Z", "+00:00")))
    return times[after:]


class TwoRuns:
    """Two runs of one namespace: `whole` watches all along; `broken` is stopped and
    started again on its own state (broken-1, broken-2, ...). As a context: both started
    and live on entry, every process stopped on exit. `errors()` is what each said on
    stderr, once each exited cleanly."""

    def __init__(self, apiserver: Any, ns: str, tmp_path: Path, *more: str) -> None:
        self.kubeconfig, self.ns, self.tmp_path, self.more = apiserver.kubeconfig, ns, tmp_path, more
        self.whole, self.broken = tmp_path / "whole-state", tmp_path / "broken-state"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.starts = 0  # of the broken run

    def _start(self, state: Path, name: str) -> None:
        self.procs[name], _, _ = start(state, self.kubeconfig, self.ns, name, self.tmp_path, *self.more)

    def _live(self, name: str) -> Path:
        err = self.tmp_path / f"{name}.err"
        wait_for(lambda: "every watch has listed and is live" in err.read_text(), timeout=90, what=f"{name}: live")
        return self.tmp_path / f"{name}.out"

    def __enter__(self) -> TwoRuns:
        self._start(self.whole, "whole")
        self.start_again()
        self._live("whole")
        return self

    def __exit__(self, *_: object) -> None:
        for proc in self.procs.values():
            stop(proc)

    def start_again(self) -> Path:
        """The broken run started (again), once live; its stdout."""
        self.starts += 1
        self._start(self.broken, f"broken-{self.starts}")
        return self._live(f"broken-{self.starts}")

    def stop_broken(self) -> None:
        stop(self.procs[f"broken-{self.starts}"])

    def outs(self, run: str) -> list[Path]:
        """The stdout of `whole`, or of every start of `broken`."""
        return [self.tmp_path / f"{name}.out" for name in self.procs if name.startswith(run)]

    def gang(self, run: str) -> list[dict[str, Any]]:
        """The gang transitions of `whole`, or of the latest start of `broken` (its --out
        holds the outputs of the whole event log, then the live ones)."""
        return gang_records(self.tmp_path / f"{run if run == 'whole' else f'broken-{self.starts}'}.jsonl")

    def errors(self) -> dict[str, str]:
        texts = {name: (self.tmp_path / f"{name}.err").read_text() for name in self.procs}
        assert all(proc.returncode == 0 for proc in self.procs.values()), texts
        assert not any("Traceback" in t for t in texts.values()), texts
        return texts


PREEMPTED_AND_BACK = [("Pending", "Running"), ("Running", "WaitingForReadmission"), ("WaitingForReadmission", "Running"), ("Running", "Completed")]


@pytest.mark.parametrize("labels", [None, {}], ids=["orchestrator-labels", "bare-jobset"])
def test_r12_7_run_stopped_before_an_eviction_and_started_after_the_readmission_prints_the_uninterrupted_runs_transitions(
    apiserver, tmp_path, labels
):
    """Issue 34: `run` SIGTERMed just before Kueue evicts the Workload and started again
    after the readmission, every record of the preemption written meanwhile: its resumed
    watches deliver each kind's backlog in one burst, the bridge's times saying nothing
    of what Kueue did first. It prints what the uninterrupted run prints: the preemption,
    the readmission with Kueue's wait, the completion — for a JobSet under an
    orchestrator's labels with resume after preemption on (R9) and for a bare JobSet (R15)."""
    from tests.unit.gang_builders import GangWorld

    with TwoRuns(apiserver, namespace(apiserver, "order"), tmp_path) as runs:
        live = LiveKueue(apiserver, runs.ns, GangWorld(policy="true" if labels is None else None, labels=labels))
        live.start()
        wait_for(lambda: changes_logged(runs.broken) == live.changes == changes_logged(runs.whole), timeout=60, what="the start in both logs")
        wait_for(lambda: "Pending -> Running" in runs.outs("broken")[0].read_text(), timeout=60, what="the gang running")
        before = changes_logged(runs.broken)
        runs.stop_broken()  # just before the eviction
        live.sleep(1)
        live.preempt("InCohortReclamation").suspend().jobs_stopped().release_quota()
        live.sleep(2)
        live.readmit().unsuspend().workers_ready().pods_ready()
        preempted = live.changes
        wait_for(lambda: changes_logged(runs.whole) == preempted, timeout=60, what="the preemption in the reference run's log")
        out_2 = runs.start_again()
        wait_for(lambda: changes_logged(runs.broken) == preempted, timeout=90, what="the preemption in the restarted run's log")
        live.sleep(1)
        live.complete().finish()
        wait_for(lambda: all("-> Completed" in o.read_text() for o in (*runs.outs("whole"), out_2)), timeout=60, what="both runs: completed")
    runs.errors()
    # The premise: the restarted run got the whole preemption in bursts, a second at most apart.
    burst = observed(runs.broken, before)[: preempted - before]
    print(f"\nthe restarted run read {len(burst)} changes of the preemption within {max(burst) - min(burst)}")
    assert len(burst) >= 8 and max(burst) - min(burst) < timedelta(seconds=1), burst

    assert transitions(*runs.outs("broken")) == transitions(*runs.outs("whole"))
    assert runs.gang("broken") == runs.gang("whole")
    gang = runs.gang("whole")
    assert [(t["from"], t["to"]) for t in gang] == PREEMPTED_AND_BACK
    assert gang[1]["cause"] == "Preempted" and not any(t["reconstructed"] for t in gang)
    assert gang[2]["waited_seconds"] == live.kueues_wait() >= 2


def test_r15_7_a_first_eviction_no_record_shows_is_reconstructed_after_a_relist(apiserver, tmp_path):
    """Issue 34: `run` stopped while a bare JobSet runs (R15); meanwhile Kueue evicts its
    Workload, counts the eviction (`status.schedulingStats.evictions`, absent until this
    first one) and readmits it; etcd is compacted and the API server restarted, so the run
    started again cannot resume its watches (410) and relists: no record it reads shows
    `Evicted=True`, only the count grown from absent to 1. It prints the preemption
    reconstructed (R15.7: `Running -> WaitingForReadmission -> Running`, the wait unknown),
    never nothing; the uninterrupted run saw it and prints Kueue's wait."""
    from tests.unit.gang_builders import GangWorld, with_eviction_counts

    with TwoRuns(apiserver, namespace(apiserver, "gap"), tmp_path) as runs:
        live = LiveKueue(apiserver, runs.ns, GangWorld(labels={}))
        live.start()
        assert "schedulingStats" not in live.world.wl["status"]  # Kueue writes it at a first eviction
        wait_for(lambda: changes_logged(runs.broken) == live.changes == changes_logged(runs.whole), timeout=60, what="the start in both logs")
        wait_for(lambda: "Pending -> Running" in runs.outs("broken")[0].read_text(), timeout=60, what="the gang running")
        runs.stop_broken()
        live.sleep(1)
        with_eviction_counts(live.world, ("Preempted", "", 1))
        live.preempt("InClusterQueue").suspend().jobs_stopped().release_quota()
        live.sleep(2)
        live.readmit().unsuspend().workers_ready().pods_ready()
        wait_for(lambda: changes_logged(runs.whole) == live.changes, timeout=60, what="the preemption in the reference run's log")
        apiserver.compact()
        apiserver.stop_apiserver()  # its new watch cache starts at the current revision: the old positions are gone
        apiserver.start_apiserver()
        out_2 = runs.start_again()
        wait_for(lambda: "WaitingForReadmission -> Running" in out_2.read_text(), timeout=60, what="the reconstructed readmission")
        live.sleep(1)
        live.complete().finish()
        wait_for(lambda: all("-> Completed" in o.read_text() for o in (*runs.outs("whole"), out_2)), timeout=60, what="both runs: completed")
    assert "no longer has the state at resourceVersion" in runs.errors()["broken-2"]  # relisted
    relisted = [orjson.loads(line)["value"]["object"] for path in sorted((runs.broken / "log").glob("*.jsonl"))
                for line in path.read_bytes().splitlines() if b'"kind":"Workload"' in line and b'"type":"BOOKMARK"' not in line]  # fmt: skip
    shown = [c["status"] for o in relisted for c in (o.get("status") or {}).get("conditions", []) if c["type"] == "Evicted"]
    assert "True" not in shown  # no record the restarted run read shows the eviction

    seen = runs.gang("whole")
    assert [(t["from"], t["to"]) for t in seen] == PREEMPTED_AND_BACK and not any(t["reconstructed"] for t in seen)
    assert seen[2]["waited_seconds"] == live.kueues_wait() >= 2
    rebuilt = runs.gang("broken")
    assert [(t["from"], t["to"]) for t in rebuilt] == PREEMPTED_AND_BACK
    assert [t["reconstructed"] for t in rebuilt] == [False, True, True, False]
    assert rebuilt[1]["cause"] == "Preempted" and rebuilt[2]["waited_seconds"] is None


def test_r11_4_run_stopped_longer_than_max_clock_skew_folds_what_changed_meanwhile(apiserver, tmp_path):
    """Issue 34: a pod task with an Xid 74 on its GPU runs while two runs watch it, both
    with `max_clock_skew` 5 s (a rule file); one is stopped, the pod fails 8 s later, the
    run is started again on its state. Its resumed watch delivers the failure stamped with
    the new time, its event log gives back the watermark of before the stop. The restarted
    run must classify the failure as the uninterrupted one does (GpuNvlinkError SYSTEM),
    and so must a replay of its event log at the next start: the three records (failed,
    terminating, deleted) are clock faults, counted and folded (R11.4, amended)."""
    builders.reset_ids()
    ops = story_operations(stories.pod_task_nvlink(t0=datetime.now(timezone.utc)))
    events = max(i for i, o in enumerate(ops) if o.plural == "events") + 1
    with TwoRuns(apiserver, namespace(apiserver, "skew"), tmp_path, "--rules", str(short_skew_rules(tmp_path))) as runs:
        player = StoryPlayer(apiserver, runs.ns)
        changes = player.play_operations(ops[:events])
        wait_for(lambda: changes_logged(runs.broken) == changes == changes_logged(runs.whole), timeout=60, what="the running pod in both logs")
        time.sleep(1)  # progress past the last change
        runs.stop_broken()
        time.sleep(SHORT_SKEW_SECONDS + 3)
        changes = player.play_operations(ops[events:])
        wait_for(lambda: changes_logged(runs.whole) == changes, timeout=60, what="the failure in the reference run's log")
        wait_for(lambda: "Xid 74" in runs.outs("whole")[0].read_text(), timeout=60, what="the reference run's verdict")
        out_2 = runs.start_again()
        wait_for(lambda: changes_logged(runs.broken) == changes, timeout=90, what="the failure in the restarted run's log")
        err_2 = tmp_path / "broken-2.err"
        wait_for(lambda: "Xid 74" in out_2.read_text() or "clock fault" in err_2.read_text(), timeout=30, what="a verdict or a clock fault")
        time.sleep(1)
    assert "clock fault" not in runs.errors()["broken-2"]
    assert printed(*runs.outs("broken")) == printed(*runs.outs("whole"))
