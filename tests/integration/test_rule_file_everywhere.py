"""SPEC R10.1 on the broker: one rule file, the same answers from `replay`, `classify
--fleet`, `serve` and a worker (tests/unit/test_r10_1_one_rule_file.py has the offline
commands' details)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from app.model.fleet_records import DERIVED_TOPICS, QUARANTINE_CANDIDATES
from app.model.records import CLASSIFIED_FAILURES
from tests.integration.conftest import _worker_env, stop_process

MIXED = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed.jsonl"
# A threshold of 1 makes 6 quarantine candidates of the trace (2 with the default's 3),
# and a 2-hour window moves when each stops being one.
RULES = 'name = "site"\n[fleet]\nthreshold = 1\nwindow_seconds = 7200\n'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _faultline(*args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, env=_worker_env())  # fmt: skip
    assert res.returncode == 0, f"faultline {' '.join(args)} exited {res.returncode}:\n{res.stderr}"
    return res


def _comparable(topic: str, value: dict[str, Any]) -> Any:
    """A derived record as any reader order leaves it (tests/integration/test_stream_fleet.py):
    a quarantine record's list of faults depends on the order they arrived in."""
    if topic == QUARANTINE_CANDIDATES:
        return {k: value[k] for k in ("cluster", "scope", "node", "gpu", "state", "threshold", "window_seconds")}
    return value


def _latest(lines: list[tuple[str, str, dict[str, Any]]]) -> dict[tuple[str, str], Any]:
    latest = {(topic, key): _comparable(topic, value) for topic, key, value in lines if topic in DERIVED_TOPICS}
    # Counts back at zero (a count moved by a revision) depend on the interleaving too.
    return {k: v for k, v in latest.items() if v.get("failures") != 0 and (v.get("faults"), v.get("occurrences")) != (0, 0)}


def _candidates(rows: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(row["scope"], row["node"], row["gpu"]) for row in rows}


def test_r10_1_one_rule_file_gives_the_same_answers_in_replay_classify_serve_and_a_worker(stream_stack, tmp_path: Path) -> None:
    rules = tmp_path / "site.toml"
    rules.write_text(RULES)
    version = json.loads(_faultline("rules", "show", "--rules", str(rules)).stdout)["rules_version"]

    # replay: every output record.
    out = tmp_path / "replay.jsonl"
    _faultline("replay", "--trace", str(MIXED), "--rules", str(rules), "--out", str(out))
    lines = [(r["topic"], r["key"], r["value"]) for r in map(json.loads, out.read_text().splitlines())]
    expected = _latest(lines)
    candidates = [v for (topic, _), v in expected.items() if topic == QUARANTINE_CANDIDATES and v["state"] == "candidate"]
    want = {(c["scope"], c["node"], c["gpu"] or "-") for c in candidates}
    assert len(want) == 6
    assert {v["rules_version"] for t, _, v in lines if t == CLASSIFIED_FAILURES} == {version}

    # classify --fleet: the candidates it prints, with the file's threshold and window.
    printed = _faultline("classify", str(MIXED), "--fleet", "--rules", str(rules)).stdout.splitlines()
    assert any("quarantine: >= 1 critical faults in 2h" in line for line in printed)
    rows = printed[printed.index("QUARANTINE CANDIDATES") + 2 : printed.index("TOP NODES (* quarantine candidate)") - 1]
    assert {tuple(row.split()[:3]) for row in rows} == want

    # serve: the page's views.
    serve = subprocess.Popen([sys.executable, "-m", "app", "serve", "--trace", str(MIXED), "--rules", str(rules), "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
                             env=_worker_env())  # fmt: skip
    try:
        assert serve.stdout is not None
        banner = serve.stdout.readline()
        url = re.search(r"(http://\S+/) ", banner)
        assert url, banner
        summary = _get(url.group(1) + "api/fleet")
        assert (summary["threshold"], summary["window_seconds"]) == (1, 7200)
        assert {(s, n, g or "-") for s, n, g in _candidates(_get(url.group(1) + "api/quarantine")["candidates"])} == want
    finally:
        stop_process(serve)

    # A worker on the broker, with the same file and nothing else about the fleet.
    port = _free_port()
    stream_stack.publish(MIXED)
    stream_stack.start_worker(extra=("--rules", str(rules), "--web-port", str(port)))
    stream_stack.wait_settled()
    streamed = [(topic, r.key.decode(), json.loads(r.value)) for topic in DERIVED_TOPICS for r in stream_stack.read(topic)]
    assert _latest(streamed) == expected
    verdicts = [json.loads(r.value) for r in stream_stack.read(CLASSIFIED_FAILURES)]
    assert verdicts and {v["rules_version"] for v in verdicts} == {version}
    page = f"http://127.0.0.1:{port}/fleet/api/"
    deadline = time.monotonic() + 60
    while {(s, n, g or "-") for s, n, g in _candidates(_get(page + "quarantine")["candidates"])} != want:
        assert time.monotonic() < deadline, "the worker's page does not show the replay's candidates"
        time.sleep(0.3)
    assert (_get(page + "fleet")["threshold"], _get(page + "fleet")["window_seconds"]) == (1, 7200)
