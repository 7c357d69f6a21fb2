"""`faultline mark` and `run --mark` before they reach a server (SPEC R18): a wrong setting
is said with its fix and exit 2; a faults-topic value that is no fault record is refused
by its reader (and counted by the loop, tests/integration/test_mark_restart.py); a v1
fault record still reads."""

from __future__ import annotations

import msgspec
import pytest

from app.cli import main
from app.mark.consumer import decode_fault
from app.model import records_v1
from app.model.records import Fault
from tests.unit.builders import T0, minutes, pod, record, event, running
from tests.unit.scenario import faults


def test_r18_1_mark_needs_the_cluster_it_marks(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAULTLINE_CLUSTER", raising=False)
    assert main(["mark", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "setting cluster is required" in err and "--cluster" in err and "Traceback" not in err


def test_r18_1_a_condition_type_the_api_server_would_refuse_is_refused_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mark", "--cluster", "a", "--mark-condition-type", "not a type"]) == 2
    err = capsys.readouterr().err
    assert "mark_condition_type" in err and "FAULTLINE_MARK_CONDITION_TYPE" in err
    assert main(["run", "--cluster", "a", "--mark", "--mark-remembered", "-1"]) == 2
    assert "mark_remembered" in capsys.readouterr().err


def test_r18_2_the_faults_topic_reader_takes_v2_and_v1_records_and_refuses_anything_else() -> None:
    p = pod("trainer", containers={"main": running(T0 - minutes(30))})
    [fault] = faults([record(p, T0 - minutes(30), "ADDED"), record(event(p), T0 - minutes(1))])
    assert decode_fault(msgspec.json.encode(fault)) == fault
    fields = msgspec.to_builtins(fault)
    fields["fault"] = {k: v for k, v in fields["fault"].items() if k not in ("action", "resource", "message")}
    v1 = msgspec.convert({k: v for k, v in fields.items() if k != "schema"}, records_v1.Fault)
    read = decode_fault(msgspec.json.encode(v1))
    assert isinstance(read, Fault) and read.fault.pod == fault.fault.pod and read.fault.action == "UNKNOWN"
    for bad in (None, b"", b"{", b'{"schema": "faultline.Fault/v2", "key": 7}', b'{"schema": "faultline.ClassifiedFailure/v2"}', b"[" * 10_000):
        with pytest.raises((msgspec.DecodeError, msgspec.ValidationError, RecursionError)):
            decode_fault(bad)
