"""Workloads without an orchestrator on a real API server (issue 24, SPEC R13): a Kubeflow
Trainer TrainJob, a bare JobSet, an indexed batch Job and a bare GPU pod fail (and CPU-only
CronJob Jobs come and go), re-enacted as the API calls their controllers make: objects
created, then their status written through the status subresource. `faultline run`
prints a verdict for each of the four, the same as `faultline classify` of the trace
`faultline record` recorded meanwhile, and the same as the stories' own records give."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.cli import live_output, render
from tests.bridge.helpers import wait_for
from tests.bridge.realkube import ROOT, StoryPlayer, faultline_env, interrupt, namespace
from tests.unit import builders, stories
from tests.unit.scenario import final_verdicts

pytestmark = pytest.mark.apiserver

CLUSTER = "real-w"
# <cluster>/<namespace>/<Kind>/<name> then "/<uid>" (a key) or " (<uid, 8 characters>)" (a name as printed).
ATTEMPT = re.compile(r"^[^/\s]+/[^/\s]+/(?P<kind>[A-Za-z]+)/(?P<name>[^/\s]+)(?:/(?P<uid>[0-9a-f-]{8})[0-9a-f-]*| \((?P<short>[0-9a-f]{8})\))?$")


def workload_stories(t0: datetime) -> list[dict[str, Any]]:
    builders.reset_ids()
    names = ("trainjob-xid79", "jobset-bare-xid79", "job-indexed-xid48", "pod-bare-xid119", "cronjob-cpu")
    return [r for name in names for r in stories.WORKLOAD_STORIES[name](t0=t0)]


def attempt(text: str) -> tuple[str, str, str]:
    """(Kind, name, uid's first 8 characters) of a printed attempt key or name."""
    found = ATTEMPT.match(text.strip())
    assert found, f"not an attempt key or name: {text!r}"
    return found["kind"], found["name"], found["uid"] or found["short"] or ""


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def run_printed(text: str) -> tuple[dict[str, tuple[str, ...]], Counter[tuple[Any, ...]]]:
    """`faultline run`'s table: the last verdict per attempt (code, kind, GPU-H, GPU fault,
    pod) and the gang transitions (attempt, transition, code), each cell as printed."""
    verdicts, transitions = {}, Counter()
    for line in text.splitlines():
        if not line.strip() or line[0].isspace():
            continue  # a verdict's reasons, indented
        row = cells(line)
        if row[0] in ("verdict", "revised"):
            verdicts[row[1]] = tuple(row[2:7])
        elif row[0] == "gang":  # WHAT JOBSET CODE KIND GPU-H TRANSITION
            transitions[(row[1], row[5], row[2])] += 1
    return verdicts, transitions


def as_run_prints(what: str, row: tuple[str, ...]) -> list[str]:
    """A row of run's table (WHAT, ATTEMPT / JOBSET, CODE, KIND, GPU-H, GPU FAULT /
    TRANSITION, POD) as run prints it: its columns keep their widths, so a longer cell is
    cut in the middle (issue 38)."""
    return cells(render.Columns(live_output.HEADER, live_output.MINIMUM, fixed=True).line((what, *row, "")))[1:]


def classify_printed(text: str) -> tuple[dict[str, tuple[str, ...]], Counter[tuple[Any, ...]]]:
    """`faultline classify`'s two tables, read as `run_printed` reads run's (each cell cut
    as run's columns cut it)."""
    verdicts, transitions = {}, Counter()
    section = None
    for line in text.splitlines():
        if not line.strip() or line[0].isspace():
            continue
        if line.startswith("ATTEMPT "):
            section = "verdicts"
        elif line.startswith("GANG TRANSITIONS"):
            section = "gangs"
        elif line.startswith("JOBSET "):
            continue
        elif section == "verdicts":
            attempt(cells(line)[0])  # a workload attempt's name
            row = as_run_prints("verdict", tuple(cells(line)[:6]))  # ATTEMPT CODE KIND GPU-H GPU-FAULT POD, as run's
            verdicts[row[0]] = tuple(row[1:6])
        elif section == "gangs":
            jobset, transition, code = cells(line)[:3]
            row = as_run_prints("gang", (jobset, code, "-", "-", transition, "-"))
            transitions[(row[0], row[4], row[1])] += 1
    return verdicts, transitions


def story_summary(records: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, str, str | None, str | None]]:
    """The stories' own verdicts by (Kind, name): the uids differ on the real server."""
    out = {}
    for key, v in final_verdicts(records).items():
        kind, name = key.split("/")[2:4]
        out[(kind, name)] = (v.code, v.kind, v.gpu_fault.code if v.gpu_fault else None, v.faulted_pod.name if v.faulted_pod else None)
    return out


def changes_in(trace: Path) -> int:
    if not trace.exists():
        return 0
    return sum(1 for line in trace.read_bytes().split(b"\n")[:-1] if b'"type":"BOOKMARK"' not in line)


def verdicts_in(outputs: Path) -> dict[str, dict[str, Any]]:
    latest = {}
    if outputs.exists():
        for line in outputs.read_bytes().split(b"\n")[:-1]:
            out = orjson.loads(line)
            if out["topic"] == "faultline.classified-failures":
                latest[out["key"]] = out["value"]
    return latest


def start(*args: str, out: Path, err: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as stdout, err.open("wb") as stderr:
        return subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=faultline_env(), stdout=stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL)


class RecordAndRun:
    """`faultline record` and `faultline run` on namespace `ns` of `kube`, live once entered;
    stopped on exit, each having ended cleanly. `trace` and `outputs` are theirs, `run_out`
    what run printed."""

    def __init__(self, kube: Any, ns: str, cluster: str, tmp_path: Path) -> None:
        self.watch = ["--kubeconfig", str(kube.kubeconfig), "--cluster", cluster, "--namespaces", ns, "--progress-interval", "0.2"]
        self.trace, self.outputs, self.state = tmp_path / "trace.jsonl", tmp_path / "outputs.jsonl", tmp_path / "state"
        self.logs = {name: (tmp_path / f"{name}.out", tmp_path / f"{name}.err") for name in ("record", "run")}
        self.run_out = ""

    def __enter__(self) -> RecordAndRun:
        (record_out, record_err), (run_out, run_err) = self.logs["record"], self.logs["run"]
        self.procs = {
            "record": start("record", *self.watch, "--out", str(self.trace), out=record_out, err=record_err),
            "run": start("run", *self.watch, "--state", str(self.state), "--out", str(self.outputs), out=run_out, err=run_err),
        }
        try:
            wait_for(lambda: all("every watch has listed and is live" in err.read_text() for _, err in self.logs.values()), timeout=90,
                     what="every watch live")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs.values():
            interrupt(proc)
        texts = {name: (out.read_text(), err.read_text()) for name, (out, err) in self.logs.items()}
        self.run_out = texts["run"][0]
        if exc[0] is None:
            assert all(proc.returncode == 0 for proc in self.procs.values()), texts
            assert not any("Traceback" in err for _, err in texts.values()), texts

    def run_prints_what_classify_gives(self) -> None:
        """`faultline classify` of the recorded trace: the verdicts and transitions run printed."""
        classified = subprocess.run([sys.executable, "-m", "app", "classify", str(self.trace)], cwd=ROOT, env=faultline_env(),
                                    capture_output=True, text=True, timeout=120)
        assert classified.returncode == 0, classified.stderr
        run_verdicts, run_transitions = run_printed(self.run_out)
        trace_verdicts, trace_transitions = classify_printed(classified.stdout)
        print(f"\nfaultline run printed:\n{self.run_out}\nfaultline classify of the recorded trace:\n{classified.stdout}")
        assert run_verdicts == trace_verdicts
        assert run_transitions == trace_transitions


def test_r13_run_on_the_api_server_prints_the_verdicts_classify_gives_for_the_recorded_trace(apiserver, tmp_path):
    records = workload_stories(datetime.now(timezone.utc) - timedelta(minutes=2))
    expected = story_summary(records)
    assert {kind for kind, _ in expected} == {"TrainJob", "JobSet", "Job", "Pod"}
    ns = namespace(apiserver, "workloads")
    with RecordAndRun(apiserver, ns, CLUSTER, tmp_path) as watching:
        trace, outputs = watching.trace, watching.outputs
        changes = StoryPlayer(apiserver, ns).play(records)
        wait_for(lambda: changes_in(trace) == changes, timeout=60, what=f"{changes} changes in the trace")
        wait_for(lambda: len(verdicts_in(outputs)) == len(expected), timeout=60, what=f"{len(expected)} verdicts from run")
    watching.run_prints_what_classify_gives()
    # ... and both are the stories' own verdicts, by kind and name.
    got = {}
    for key, v in verdicts_in(outputs).items():
        kind, name, _ = attempt(key)
        got[(kind, name)] = (v["code"], v["kind"], (v["gpu_fault"] or {}).get("code"), (v["faulted_pod"] or {}).get("name"))
    assert got == expected
    # Every kind was recorded; the CPU-only CronJob Jobs among them are no attempts.
    recorded = {orjson.loads(line)["value"]["object"]["metadata"]["name"] for line in trace.read_bytes().splitlines()
                if b'"type":"BOOKMARK"' not in line}
    assert {"report-29000000", "llama-ft", "sweep-lr", "embed-shards", "notebook-gpu-7"} <= recorded
