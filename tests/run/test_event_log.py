"""The event log of `faultline run --state DIR` (app/run/event_log.py): order, each change
once, a torn tail, retention in stream time, a compaction cut short; and that it is a
trace any rule set replays."""

from __future__ import annotations

import logging
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.run.event_log import EventLog
from app.core.base.rules import DEFAULT_RULES
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER
from app.embedded.pipeline import Pipeline
from app.replay.trace import read_lines, replay
from app.rulefile import load_rules
from tests.unit import builders, stories

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 9, 15, 10, 0, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)
Line = tuple[str, str, bytes]  # topic, key, envelope


def change(kind: str, name: str, uid: str, rv: int, at: float, type_: str = "MODIFIED", about: str | None = None) -> Line:
    """A change of an object `at` minutes after T0."""
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "ml", "uid": uid, "resourceVersion": str(rv)}}
    topic = {"Pod": "k8s.pods", "Event": "k8s.events"}.get(kind, "k8s.jobs")
    if kind == "Event":
        obj["involvedObject"] = {"kind": "Pod", "uid": about, "namespace": "ml"}
    envelope = {"type": type_, "observed_at": builders.ts(T0 + timedelta(minutes=at)), "cluster": "c", "object": obj}
    return topic, about or uid, orjson.dumps(envelope)


def progress(topic: str, at: float) -> Line:
    return topic, "Pod", orjson.dumps(builders.progress(topic, T0 + timedelta(minutes=at), cluster="c")["value"])


def opened(folder: Path, retention: timedelta = 6 * HOUR, **kwargs: Any) -> tuple[EventLog, list[tuple[int, bytes]]]:
    log = EventLog(folder, retention, **kwargs)
    return log, list(log.lines())


def names(lines: list[tuple[int, bytes]]) -> list[str]:
    """Each line as `<type> <name>@<rv>` (progress: `BOOKMARK <topic>`)."""
    out = []
    for _, raw in lines:
        line = orjson.loads(raw)
        value = line["value"]
        meta = value["object"]["metadata"]
        out.append(f"BOOKMARK {line['topic']}" if value["type"] == "BOOKMARK" else f"{value['type']} {meta['name']}@{meta['resourceVersion']}")
    return out


def test_appended_records_replay_in_order_after_a_restart(tmp_path):
    log, lines = opened(tmp_path)
    assert lines == [] and log.empty
    written = [change("Pod", "a", "u-a", 1, 0, "ADDED"), change("Event", "e", "u-e", 2, 1, "ADDED", about="u-a"), progress("k8s.pods", 1),
               change("Pod", "a", "u-a", 3, 2), progress("k8s.pods", 2)]
    for line in written:
        assert log.append(*line)
    log.close()
    log, lines = opened(tmp_path)
    assert [i for i, _ in lines] == [0, 1, 2, 3, 4] and log.last_index == 4
    assert [orjson.loads(raw) for _, raw in lines] == [{"topic": t, "key": k, "value": orjson.loads(v)} for t, k, v in written]
    assert log.append(*change("Pod", "a", "u-a", 4, 3)) and log.last_index == 5
    log.close()


def test_a_change_already_in_the_log_is_not_appended_again(tmp_path):
    """After a restart the watches replay what changed since their saved position; the
    log holds the part of it written before the stop."""
    log, _ = opened(tmp_path)
    assert log.append(*change("Pod", "a", "u-a", 5, 0, "ADDED"))
    assert log.append(*change("Pod", "a", "u-a", 7, 1))
    assert not log.append(*change("Pod", "a", "u-a", 5, 2, "ADDED"))  # replayed by the watch: older
    assert not log.append(*change("Pod", "a", "u-a", 7, 2))  # the same change, observed again
    assert log.append(*change("Pod", "a", "u-a", 7, 2, "DELETED"))  # a relist's deletion at the last version known
    assert not log.append(*change("Pod", "a", "u-a", 7, 2, "DELETED"))
    assert log.append(*change("Pod", "b", "u-b", 6, 2, "ADDED"))  # another object, an older revision
    assert log.append(*progress("k8s.pods", 2)) and log.append(*progress("k8s.pods", 2))  # progress is never a duplicate
    assert log.skipped == 3
    log.close()
    _, lines = opened(tmp_path)
    assert names(lines) == ["ADDED a@5", "MODIFIED a@7", "DELETED a@7", "ADDED b@6", "BOOKMARK k8s.pods", "BOOKMARK k8s.pods"]


@pytest.mark.parametrize("torn", [b'{"topic":"k8s.pods","key":"u-c","val', b"\0" * 5000], ids=["half-a-line", "zeros"])
def test_a_torn_tail_is_cut_with_a_warning_and_the_log_goes_on(tmp_path, caplog, torn):
    """A kill mid-write leaves half a line; a power loss may leave zeros."""
    log, _ = opened(tmp_path)
    for rv in (1, 2, 3):
        log.append(*change("Pod", "a", "u-a", rv, rv))
    log.close()
    [segment] = tmp_path.glob("*.jsonl")
    with segment.open("ab") as out:
        out.write(torn)
    caplog.set_level(logging.WARNING, logger="faultline.run")
    log, lines = opened(tmp_path)
    assert names(lines) == ["MODIFIED a@1", "MODIFIED a@2", "MODIFIED a@3"] and log.cut == len(torn)
    assert [r.getMessage() for r in caplog.records] == [f"event log {segment} ended in a torn line ({len(torn)} byte(s) after the last newline: a stop mid-write); cut"]
    assert log.append(*change("Pod", "a", "u-a", 4, 4))
    log.close()
    caplog.clear()
    log, lines = opened(tmp_path)
    assert names(lines)[-1] == "MODIFIED a@4" and log.cut == 0 and not caplog.records


def test_a_line_that_is_not_a_trace_line_is_skipped_with_a_warning_and_the_rest_replays(tmp_path, caplog):
    log, _ = opened(tmp_path)
    for rv in (1, 2):
        log.append(*change("Pod", "a", "u-a", rv, rv))
    log.close()
    [segment] = tmp_path.glob("*.jsonl")
    first, second = segment.read_bytes().splitlines(keepends=True)
    segment.write_bytes(first + b"\x00garbage\n" + second)
    caplog.set_level(logging.WARNING, logger="faultline.run")
    log, lines = opened(tmp_path)
    assert names(lines) == ["MODIFIED a@1", "MODIFIED a@2"] and [i for i, _ in lines] == [0, 2]
    assert log.unreadable == 1 and "line 2 is not a trace line; skipped" in caplog.text


def story_world(log: EventLog) -> None:
    """Stream time 0-5 min: pod `live` and pod `gone`, an Event about each, progress;
    `gone` is deleted, both Events expire (TTL). At 20 min pod `late`."""
    for line in [
        change("Pod", "live", "u-live", 1, 0, "ADDED"),
        change("Pod", "gone", "u-gone", 2, 0, "ADDED"),
        change("Event", "fault-live", "u-e1", 3, 1, "ADDED", about="u-live"),
        change("Event", "fault-gone", "u-e2", 4, 1, "ADDED", about="u-gone"),
        progress("k8s.pods", 1),
        change("Pod", "live", "u-live", 5, 5),
        change("Pod", "gone", "u-gone", 6, 5, "DELETED"),
        change("Event", "fault-gone", "u-e2", 7, 5, "DELETED", about="u-gone"),
        change("Event", "fault-live", "u-e1", 8, 5, "DELETED", about="u-live"),
        progress("k8s.pods", 5),
        change("Pod", "late", "u-late", 9, 20, "ADDED"),
    ]:
        assert log.append(*line)


def test_r7_4_segments_past_the_retention_keep_only_the_latest_state_of_what_still_exists(tmp_path):
    """Retention 1 h (segments span 15 min of stream time). At 79 min everything of the
    first segment is past it: the deleted pod and its Event go; the live pod keeps its
    latest line and so does the Event about it (its fault is in the pod's state, R4.5);
    the latest progress record stays; all in their order. The segment from 20 min stays
    whole. Once the live pod is deleted too, its lines and its Event's go."""
    log, _ = opened(tmp_path, HOUR)
    story_world(log)
    assert len(list(tmp_path.glob("*.jsonl"))) == 2  # 20 min is past the first segment's 15
    assert log.append(*change("Pod", "later", "u-later", 10, 79, "ADDED"))
    log.close()
    assert len(list(tmp_path.glob("*.jsonl"))) == 3
    log, lines = opened(tmp_path, HOUR)
    assert names(lines) == ["MODIFIED live@5", "DELETED fault-live@8", "BOOKMARK k8s.pods", "ADDED late@9", "ADDED later@10"]
    assert [orjson.loads(raw)["value"]["observed_at"] for _, raw in lines if b"BOOKMARK" in raw] == [builders.ts(T0 + timedelta(minutes=5))]
    assert log.append(*change("Pod", "live", "u-live", 11, 90, "DELETED"))
    assert log.append(*change("Pod", "last", "u-last", 12, 160, "ADDED"))
    log.close()
    _, lines = opened(tmp_path, HOUR)
    assert names(lines) == ["BOOKMARK k8s.pods", "ADDED late@9", "ADDED later@10", "ADDED last@12"]
    assert len(list(tmp_path.glob("*.jsonl"))) == 2


def test_r7_4_the_log_stays_bounded_over_many_retentions(tmp_path):
    """Two days of churn at a 1 h retention: a pod a minute, deleted ten minutes later,
    progress every minute; one pod lives throughout. The log keeps at most the retention
    and two segment spans (a half) of lines, plus the live pod."""
    log, _ = opened(tmp_path, HOUR)
    rv = 0
    log.append(*change("Pod", "forever", "u-forever", rv, 0, "ADDED"))
    for minute in range(48 * 60):
        rv += 1
        log.append(*change("Pod", f"p{minute}", f"u-{minute}", rv, minute, "ADDED"))
        if minute >= 10:
            rv += 1
            log.append(*change("Pod", f"p{minute - 10}", f"u-{minute - 10}", rv, minute, "DELETED"))
        log.append(*progress("k8s.pods", minute))
        if minute % 240 == 0:
            assert sum(1 for _ in tmp_path.glob("*.jsonl")) <= 7
    log.close()
    log, lines = opened(tmp_path, HOUR)
    assert names(lines)[0] == "ADDED forever@0"
    assert len(lines) <= 3 * 90 + 10, len(lines)  # 3 lines a minute, at most 90 minutes of them
    assert sum(1 for _ in tmp_path.glob("*.jsonl")) <= 7


def test_a_compaction_cut_short_leaves_a_log_that_replays_each_change_once(tmp_path):
    """Killed after the base segment replaced the first expired one, before the others
    were removed, with a half-written base left beside: each change still replays once."""
    log, _ = opened(tmp_path, HOUR, segment_bytes=600)  # a few lines a segment
    for minute in range(10):
        log.append(*change("Pod", f"p{minute}", f"u-{minute}", minute + 1, minute, "ADDED"))
    saved = tmp_path / "saved"
    saved.mkdir()
    for segment in tmp_path.glob("*.jsonl"):
        shutil.copy(segment, saved / segment.name)
    assert log.append(*change("Pod", "p0", "u-0", 100, 80))  # compacts the first ten
    log.close()
    for segment in saved.iterdir():  # the expired segments were not removed yet
        if not (tmp_path / segment.name).exists():
            shutil.copy(segment, tmp_path / segment.name)
    (tmp_path / "00000000000000000003.compacting").write_bytes(b'{"topic":"k8s.po')
    _, lines = opened(tmp_path, HOUR)
    # The compaction kept p0's first line (its latest then): p0 is fed twice, in order.
    assert names(lines) == [f"ADDED p{m}@{m + 1}" for m in range(10)] + ["MODIFIED p0@100"]
    assert not list(tmp_path.glob("*.compacting"))


def test_a_log_written_under_one_rule_set_replays_under_another(tmp_path):
    """The log holds source records, not verdicts: a segment is a trace, and another
    rule set classifies it again (here Xid 143 made critical)."""
    builders.reset_ids()
    log, _ = opened(tmp_path)
    for record in stories.pod_task_xid143():
        log.append(record["topic"], record["key"], orjson.dumps(record["value"]))
    log.close()
    [segment] = tmp_path.glob("*.jsonl")
    verdicts = {}
    for rules in (DEFAULT_RULES, load_rules(ROOT / "examples" / "rules" / "xid-143-critical.toml")):
        emits = list(replay(read_lines(segment), Pipeline(rules)))
        assert not [e for e in emits if e.topic == DEAD_LETTER]
        [verdict] = [e.value for e in emits if e.topic == CLASSIFIED_FAILURES]
        verdicts[rules.version] = (verdict.code, verdict.kind)
    assert sorted(verdicts.values()) == [("Error", "USER"), ("GpuXidError", "SYSTEM")]
