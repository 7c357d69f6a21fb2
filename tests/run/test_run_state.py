"""The state folder of `faultline run` (app/run/run_state.py) and what `run` does with it
on start, against the protocol double: the lock, the cluster it belongs to, positions,
and printing on a restart only what an earlier run had not printed."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from app.bridge.records import BridgePosition
from app.cli import main as cli_main
from app.run.event_log import EventLog
from app.run.run_state import RunState, StateError, default_state_dir
from app.core.base.rules import DEFAULT_RULES
from tests.bridge.helpers import CLUSTER, wait_for
from tests.bridge.realkube import faultline_env
from tests.unit import builders, stories

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_run_on_the_same_state_folder_is_refused_while_the_first_holds_it(tmp_path):
    first = RunState(tmp_path / "state", CLUSTER)
    with pytest.raises(StateError) as refused:
        RunState(tmp_path / "state", CLUSTER)
    assert str(refused.value) == (
        f"the state folder {tmp_path / 'state'} is in use by another `faultline run` (pid {os.getpid()}): "
        "stop that one first, or give this one another --state"
    )
    first.close()
    RunState(tmp_path / "state", CLUSTER).close()  # the lock goes with its holder


def test_a_second_run_command_on_one_state_folder_exits_1_naming_the_first(kube, tmp_path, capsys):
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    state = tmp_path / "state"
    args = ["run", "--kubeconfig", str(kubeconfig), "--cluster", CLUSTER, "--state", str(state), "--kinds", "Pod"]
    first = subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=faultline_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: kube.watches, timeout=30, what="the first run's watch")
        assert cli_main(args) == 1
        assert f"is in use by another `faultline run` (pid {first.pid})" in capsys.readouterr().err
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=30)
    assert first.returncode == 0, err.decode()


def test_a_state_folder_of_another_cluster_is_refused(tmp_path):
    RunState(tmp_path, "prod-a").close()
    with pytest.raises(StateError, match="holds the state of cluster 'prod-a', not 'prod-b': give --state another folder"):
        RunState(tmp_path, "prod-b")


def test_positions_are_saved_atomically_and_read_back(tmp_path):
    state = RunState(tmp_path, CLUSTER)
    assert state.fresh and state.positions.load(CLUSTER) == {}
    position = BridgePosition(cluster=CLUSTER, kind="Pod", resource_versions={"*": "42"}, observed_at="2026-09-15T10:00:00.000000Z")
    state.positions.save([position])
    state.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["delivered", "lock", "positions.json"]
    state = RunState(tmp_path, CLUSTER)
    assert not state.fresh and state.positions.load(CLUSTER) == {"Pod": position}
    state.close()


def test_the_default_state_folder_is_under_the_users_data_folder():
    assert default_state_dir("prod-a", {"XDG_DATA_HOME": "/data", "HOME": "/home/u"}) == Path("/data/faultline/run/prod-a")
    assert default_state_dir("prod-a", {"HOME": "/home/u"}) == Path("/home/u/.local/share/faultline/run/prod-a")
    with pytest.raises(StateError, match="give --state DIR"):
        default_state_dir("..", {"HOME": "/home/u"})


def earlier_run(state: Path, delivered: int | None) -> list[int]:
    """A state folder as a run that fed the pod-task story left it; `delivered`: the index
    of the last line whose outputs it printed. Returns each line's index."""
    builders.reset_ids()
    records = stories.pod_task_nvlink()
    run_state = RunState(state, builders.CLUSTER)
    log = EventLog(run_state.log_folder, DEFAULT_RULES.retention)
    list(log.lines())
    for revision, record in enumerate(records, start=1):
        record["value"]["object"]["metadata"]["resourceVersion"] = str(revision)  # as a server stamps changes
        assert log.append(record["topic"], record["key"], orjson.dumps(record["value"]))
    if delivered is not None:
        run_state.delivered.mark(delivered)
    log.close()
    run_state.close()
    return list(range(len(records)))


@pytest.mark.parametrize("printed_before", ["everything", "all but the failure"])
def test_a_restart_prints_only_what_the_earlier_run_had_not_printed_and_out_gets_everything(kube, tmp_path, capsys, caplog, printed_before):
    """The story's verdict comes with its pod's failure (line 4). A run killed after it
    wrote that line and before it printed the verdict prints it when started again;
    after it printed it, never again. --out holds the replayed outputs either way."""
    caplog.set_level(logging.INFO, logger="faultline.bridge")
    lines = earlier_run(tmp_path / "state", 4 if printed_before == "everything" else 3)
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    out = tmp_path / "out.jsonl"
    code = cli_main(["run", "--kubeconfig", str(kubeconfig), "--cluster", builders.CLUSTER, "--state", str(tmp_path / "state"),
                     "--out", str(out), "--duration", "0.5"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    verdict = "prod-a/ml/nightly-7f3a/train/1"
    assert captured.out.count(verdict) == (0 if printed_before == "everything" else 1)
    assert f"replayed {len(lines)} record(s) from the event log in {tmp_path / 'state'}" in caplog.text
    written = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [w["key"] for w in written if w["topic"] == "faultline.classified-failures"] == [verdict]
    assert (tmp_path / "state" / "delivered").read_text().strip() == "4".zfill(20)
