"""Helpers of the tests on the real API server (tests/conftest.py `apiserver`): a namespace
of one's own, and a story (tests/unit/stories.py) played as the API calls its
controllers would make."""

from __future__ import annotations

import copy
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

from app.cli import live_output, render
from app.model.envelope import JOBS, WORKLOADS
from tests.bridge.helpers import Operation, story_operations, wait_for

# What a client may send of an object's metadata on create (the server sets the rest).
CREATE_METADATA = ("name", "labels", "annotations", "ownerReferences")


CRDS = Path(__file__).resolve().parent / "crds"


def operator_crd(name: str) -> dict[str, Any]:
    """A CRD of an operator's release, kept in tests/bridge/crds (trim.py says whence)."""
    import yaml

    return dict(yaml.safe_load((CRDS / name).read_text()))


def install_crd(kube: Any, crd: dict[str, Any], timeout: float = 60.0) -> None:
    """Create a CRD and wait until each of its served versions lists (established)."""
    import time

    kube.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    deadline = time.monotonic() + timeout
    for version in (v["name"] for v in crd["spec"]["versions"] if v["served"]):
        while kube.request("GET", f"/apis/{group}/{version}/{plural}?limit=1")[0] != 200:
            assert time.monotonic() < deadline, f"{plural}.{group}/{version} not served within {timeout}s"
            time.sleep(0.05)


def namespace(kube: Any, prefix: str = "t") -> str:
    """A new namespace with its default ServiceAccount (no controller-manager creates it,
    and a pod cannot be created without it)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kube.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube.call("POST", f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}})
    return name


ROOT = Path(__file__).resolve().parents[2]

# SPEC R11.4's `max_clock_skew`, small enough for a test to outwait (default 1 h).
SHORT_SKEW_SECONDS = 5


def short_skew_rules(folder: Path) -> Path:
    """A rule file (README "Reclassify history") with `max_clock_skew` SHORT_SKEW_SECONDS."""
    path = folder / "short-skew.toml"
    path.write_text(f'name = "short-skew"\nmax_clock_skew_seconds = {SHORT_SKEW_SECONDS}\n')
    return path


def faultline_env() -> dict[str, str]:
    """The environment of a `faultline` subprocess: the caller's without FAULTLINE_*
    settings (the tests pass every setting they mean)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")} | {"PYTHONPATH": str(ROOT)}


def faultline(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`faultline ARGS` to its end."""
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=faultline_env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def start_faultline(*args: str, out: Path, err: Path) -> subprocess.Popen[bytes]:
    """`faultline ARGS` in the background, its output and log into files."""
    with out.open("wb") as stdout, err.open("wb") as stderr:
        return subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=faultline_env(), stdout=stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL)


def verdicts_in(outputs: Path) -> dict[str, dict[str, Any]]:
    """The latest verdict per attempt key in a command's `--out` file, so far."""
    latest = {}
    if outputs.exists():
        for line in outputs.read_bytes().split(b"\n")[:-1]:
            out = orjson.loads(line)
            if out["topic"] == "faultline.classified-failures":
                latest[out["key"]] = out["value"]
    return latest


def interrupt(proc: subprocess.Popen[bytes], how: int = signal.SIGINT) -> None:
    """Stop a `faultline` command as Ctrl-C does (or with `how`), killing it after 60 s."""
    if proc.poll() is None:
        proc.send_signal(how)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def changes_in(trace: Path) -> int:
    """Changes in a `faultline record --out` file so far (its progress BOOKMARKs left out)."""
    if not trace.exists():
        return 0
    return sum(1 for line in trace.read_bytes().split(b"\n")[:-1] if b'"type":"BOOKMARK"' not in line)


# <cluster>/<namespace>/<Kind>/<name> then "/<uid>" (a key) or " (<uid, 8 characters>)" (a
# name as printed), then a LeaderWorkerSet's group: "/group/<index>" or " group <index>".
ATTEMPT = re.compile(
    r"^[^/\s]+/[^/\s]+/(?P<kind>[A-Za-z]+)/(?P<name>[^/\s]+)(?:/(?P<uid>[0-9a-f-]{8})[0-9a-f-]*| \((?P<short>[0-9a-f]{8})\))?"
    r"(?:/group/(?P<group>[0-9]+)| group (?P<shown>[0-9]+))?$"
)


def attempt(text: str) -> tuple[str, str, str, str]:
    """(Kind, name, uid's first 8 characters, a LeaderWorkerSet's group or "") of a printed
    attempt key or name."""
    found = ATTEMPT.match(text.strip())
    assert found, f"not an attempt key or name: {text!r}"
    return found["kind"], found["name"], found["uid"] or found["short"] or "", found["group"] or found["shown"] or ""


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
    TRANSITION, POD) as run prints it, WHAT left out: its columns keep their widths, so a
    longer cell is cut in the middle (issue 38)."""
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
            attempt(cells(line)[0])  # an attempt as named
            row = as_run_prints("verdict", tuple(cells(line)[:6]))  # ATTEMPT CODE KIND GPU-H GPU-FAULT POD, as run's
            verdicts[row[0]] = tuple(row[1:6])
        elif section == "gangs":
            jobset, transition, code = cells(line)[:3]
            attempt(jobset)
            row = as_run_prints("gang", (jobset, code, "-", "-", transition, "-"))
            transitions[(row[0], row[4], row[1])] += 1
    return verdicts, transitions


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
            "record": start_faultline("record", *self.watch, "--out", str(self.trace), out=record_out, err=record_err),
            "run": start_faultline("run", *self.watch, "--state", str(self.state), "--out", str(self.outputs), out=run_out, err=run_err),
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
        classified = faultline("classify", str(self.trace), timeout=120)
        assert classified.returncode == 0, classified.stderr
        run_verdicts, run_transitions = run_printed(self.run_out)
        trace_verdicts, trace_transitions = classify_printed(classified.stdout)
        print(f"\nfaultline run printed:\n{self.run_out}\nfaultline classify of the recorded trace:\n{classified.stdout}")
        assert run_verdicts == trace_verdicts
        assert run_transitions == trace_transitions


def wrong_ca_kubeconfig(kube: Any, tmp_path: Path) -> Path:
    """A kubeconfig for `kube` that trusts another CA than the one that signed it."""
    from tests.conftest import local_apiserver

    other_ca, _ = local_apiserver().make_ca(tmp_path / "other-ca")
    return kube.write_kubeconfig(tmp_path / "kubeconfig", ca_file=other_ca)


def seconds_after_start(result: subprocess.CompletedProcess[str], ended: float) -> float:
    """From a watch command's "watching ..." log line (Python started, imports done, the
    watches starting) to its exit at `ended` (time.time())."""
    found = re.search(r"^(\S+ \S+) INFO faultline\.bridge: watching ", result.stderr, re.M)
    assert found, result.stderr
    return ended - datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def collection_path(api_version: str, plural: str, ns: str) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{ns}/{plural}"


# Labels the API server puts on a Job's pod template itself (with the Job's uid).
JOB_TEMPLATE_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid", "batch.kubernetes.io/job-name", "job-name")


def submitted_job_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A Job's spec as a client submits it: without the selector and the template labels
    the API server generates from the Job's uid."""
    spec = copy.deepcopy(spec)
    spec.pop("selector", None)
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        for key in JOB_TEMPLATE_LABELS:
            labels.pop(key, None)
    return spec


def controller_job_status(status: dict[str, Any], served: dict[str, Any]) -> dict[str, Any]:
    """A story's Job status as the Job controller writes it, so the API server's status
    validation (kubernetes pkg/apis/batch/validation, JobStatus) takes it: `startTime`
    as first written (immutable; metav1.Time has whole seconds), `FailureTarget` before
    `Failed` and `SuccessCriteriaMet` before `Complete`, with `completionTime` for a
    complete Job, and no active or ready pod once it finished."""
    status = copy.deepcopy(status)
    if served.get("startTime"):
        status["startTime"] = served["startTime"]
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    true = {c.get("type") for c in conditions if c.get("status") == "True"}
    for final, first in (("Failed", "FailureTarget"), ("Complete", "SuccessCriteriaMet")):
        if final in true and first not in true:
            done = next(c for c in conditions if c.get("type") == final and c.get("status") == "True")
            conditions.insert(conditions.index(done), {**done, "type": first})
    if conditions:
        status["conditions"] = conditions
    if true & {"Failed", "Complete"}:
        status["active"], status["ready"] = 0, 0
    if "Complete" in true and not status.get("completionTime"):
        done = next(c for c in conditions if c.get("type") == "Complete")
        status["completionTime"] = done.get("lastTransitionTime")
    return status


class StoryPlayer:
    """Plays story records in namespace `ns`. The server assigns every uid, so each uid of
    the story is replaced by the one its object got, wherever it is referred to (an
    Event's involvedObject, a Workload's job-uid label, an ownerReference)."""

    def __init__(self, kube: Any, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.uids: dict[str, str] = {}  # story uid -> real uid
        self.current: dict[tuple[str, str], dict[str, Any]] = {}  # (plural, name) -> the object as last served
        self.changes = 0  # writes that changed an object (each is one watch event)
        self.specs: dict[tuple[str, str], Any] = {}  # (plural, name) -> the story's last spec

    def play(self, records: list[dict[str, Any]]) -> int:
        """Returns how many changes the watches see."""
        return self.play_operations(story_operations(records))

    def play_operations(self, operations: list[Operation]) -> int:
        """Some of a story's operations (`story_operations`), in order; returns how many
        changes the watches see, counted from this player's first call."""
        for o in operations:
            obj = self._mapped(o.obj)
            if o.op == "create":
                self._create(o.plural, obj)
            elif o.op == "delete":
                self._delete(o.plural, o.name)
            else:
                self._update(o.plural, o.name, obj)
        return self.changes

    def _mapped(self, obj: dict[str, Any]) -> dict[str, Any]:
        def walk(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: walk(v) for k, v in value.items()}
            if isinstance(value, list):
                return [walk(v) for v in value]
            if isinstance(value, str):
                return self.uids.get(value, value)
            return value

        mapped = walk(copy.deepcopy(obj))
        mapped["metadata"]["namespace"] = self.ns
        if isinstance(mapped.get("involvedObject"), dict):
            mapped["involvedObject"]["namespace"] = self.ns
        return mapped

    def _path(self, obj: dict[str, Any], plural: str, name: str | None = None, status: bool = False) -> str:
        path = collection_path(obj["apiVersion"], plural, self.ns)
        return path + (f"/{name}" if name else "") + ("/status" if status else "")

    def _write(self, method: str, path: str, body: Any, plural: str, name: str) -> dict[str, Any]:
        before = self.current.get((plural, name), {}).get("metadata", {}).get("resourceVersion")
        served = self.kube.call(method, path, body)
        if served["metadata"]["resourceVersion"] != before:
            self.changes += 1
        self.current[(plural, name)] = served
        return served

    def _create(self, plural: str, obj: dict[str, Any]) -> None:
        story_uid = obj["metadata"]["uid"]
        body = {k: v for k, v in obj.items() if k != "status"}
        body["metadata"] = {k: v for k, v in obj["metadata"].items() if k in CREATE_METADATA}
        self.specs[(plural, obj["metadata"]["name"])] = obj.get("spec")
        if plural == "jobs":
            body["spec"] = submitted_job_spec(body.get("spec") or {})
        served = self._write("POST", self._path(obj, plural), body, plural, obj["metadata"]["name"])
        self.uids[story_uid] = served["metadata"]["uid"]

    def _update(self, plural: str, name: str, obj: dict[str, Any]) -> None:
        current = self.current[(plural, name)]
        if plural == "events":  # an Event has no status: the whole object, as a recorder writes it
            body = {**obj, "metadata": current["metadata"]}
            self._write("PUT", self._path(obj, plural, name), body, plural, name)
            return
        meta = {**current["metadata"], **{k: v for k, v in obj["metadata"].items() if k in ("labels", "annotations")}}
        spec, before = obj.get("spec", {}), self.specs.get((plural, name))
        self.specs[(plural, name)] = spec
        if plural == "jobs" and spec != before:  # the server's spec (selector, template labels) with what the story changed
            changed = {k: v for k, v in spec.items() if (before or {}).get(k) != v and k not in ("selector", "template")}
            current = self._write("PUT", self._path(obj, plural, name), {**current, "metadata": meta, "spec": {**current["spec"], **changed}}, plural, name)
        elif plural == "jobs" and meta != current["metadata"]:
            current = self._write("PUT", self._path(obj, plural, name), {**current, "metadata": meta}, plural, name)
        elif plural not in ("pods", "jobs"):  # a pod's spec is immutable (nodeName included)
            current = self._write("PUT", self._path(obj, plural, name), {**current, "metadata": meta, "spec": spec}, plural, name)
        elif meta != current["metadata"]:
            current = self._write("PUT", self._path(obj, plural, name), {**current, "metadata": meta}, plural, name)
        if "status" in obj:
            status = controller_job_status(obj["status"], current.get("status") or {}) if plural == "jobs" else obj["status"]
            self._write("PUT", self._path(obj, plural, name, status=True), {**current, "status": status}, plural, name)

    def _delete(self, plural: str, name: str) -> None:
        current = self.current.pop((plural, name))
        body = {"gracePeriodSeconds": 0} if plural == "pods" else None
        self.kube.call("DELETE", self._path(current, plural, name), body)
        self.changes += 2 if plural == "pods" else 1  # a pod: deletionTimestamp, then gone


class LiveKueue:
    """A Kueue story (tests/unit/gang_builders.py GangWorld) played on the real API server
    as it happens: `live.preempt(...).suspend()` calls the world's methods, each change is
    written the moment the world makes it, and every time it carries (Kueue's condition
    times, the JobSet's `Suspended` condition) is read from the real clock, in whole
    seconds as metav1.Time has them. So the objects' times are what a cluster's
    controllers write: never before the API server created the object (its
    `creationTimestamp`, which no client can set) and never after the write. A story
    stamped at another time would date Kueue's conditions before the Workload's creation,
    which no cluster does, and the gang stage reads both (SPEC R12.7).

    Time in the cluster passes with `sleep` (the world's `pause` would date changes ahead
    of the clock)."""

    def __init__(self, kube: Any, ns: str, world: Any) -> None:
        self.world, self.player, self.played = world, StoryPlayer(kube, ns), 0
        world.step = timedelta(0)
        world.published = self._write

    def __getattr__(self, name: str) -> Any:
        if name == "pause":
            raise AttributeError("LiveKueue.pause: use sleep, the story runs on the real clock")
        method = getattr(self.world, name)

        def change(*args: Any, **kwargs: Any) -> LiveKueue:
            self.world.now = datetime.now(timezone.utc)
            method(*args, **kwargs)
            return self

        return change

    def _write(self, world: Any) -> None:
        ops = story_operations(world.records)
        self.player.play_operations(ops[self.played :])
        self.played = len(ops)
        world.now = datetime.now(timezone.utc)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(seconds)

    @property
    def changes(self) -> int:
        """Changes the watches see (StoryPlayer.changes)."""
        return self.player.changes

    def condition_time(self, type_: str, status: str = "True", obj: str = "wl") -> datetime:
        """The lastTransitionTime of the last condition `type_` = `status` the Workload
        (`obj` "wl") or the JobSet ("js") was written with."""
        topic = WORKLOADS if obj == "wl" else JOBS
        found = [c["lastTransitionTime"] for line in self.world.records if line["topic"] == topic
                 for c in line["value"]["object"]["status"].get("conditions", []) if c["type"] == type_ and c["status"] == status]  # fmt: skip
        assert found, f"no {type_}={status} condition written"
        return datetime.fromisoformat(found[-1].replace("Z", "+00:00"))

    def kueues_wait(self) -> float:
        """Kueue's wait for a readmission: from the Workload's last Evicted=True condition
        to its last Admitted=True one, as written (SPEC R9.9)."""
        return (self.condition_time("Admitted") - self.condition_time("Evicted")).total_seconds()
