"""Faust fenced (docs/streaming.md, *Upgrading Faust*): every internal name a patch of
app/stream/faust_fixes.py relies on still exists with the shape it expects, one test per
patch, so an upgrade that renames one fails here instead of leaving the patch silently
doing nothing; and a scratch copy of Faust with a renamed attribute shows that it does."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("faust")

from app.stream import faust_fixes  # noqa: E402
from app.stream.faust_fixes import TARGETS, target_problem  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Every function of faust_fixes that patches, wraps or reads Faust, mode or aiokafka.
PATCHES = (
    "seek_uncommitted_partitions_to_beginning",  # 1
    "as_current_event",  # 2
    "forget_unacked",  # 3
    "short_fetch_wait_between_rebalances",  # 4
    "take_assignment_made_for_an_earlier_url",  # 5
    "rewind",  # 6
    "hold_read_offsets_on_rewind",  # 6
    "bounded_rocksdb_memory",  # 7
    "on_stop_signal",  # 8
    "deliver_records_without_tasks_when_nothing_can_wait",  # 9
    "without_per_event_monitor",  # 10
    "read_offsets",  # 11
    "in_partition",  # 12
    "hand_fetches_to_stages",  # 13
    "track",  # 13
    "ack_offsets",  # 13
    "back_off_reconnects",  # 14
    "leave_the_group_when_stopping",  # 15
    "rocksdb_closed_before_exit",  # 16
)


@pytest.mark.parametrize("patch", PATCHES)
def test_each_patch_target_still_exists_with_the_expected_shape(patch: str) -> None:
    targets = [t for t in TARGETS if t.patch == patch]
    assert targets, f"{patch} declares no target in faust_fixes.TARGETS"
    assert [problem for t in targets if (problem := target_problem(t))] == []


def test_every_declared_target_names_a_patch_of_faust_fixes() -> None:
    functions = {name for name, value in inspect.getmembers(faust_fixes, inspect.isfunction) if value.__module__ == faust_fixes.__name__}
    assert {t.patch for t in TARGETS} == set(PATCHES) and set(PATCHES) <= functions


def test_a_worker_refuses_to_start_on_a_faust_its_patches_do_not_fit() -> None:
    faust_fixes.require_targets()  # the installed versions: nothing to say
    fake = faust_fixes.Target("rewind", "faust.transport.consumer", "Consumer._read_offsets", "assigned")
    assert faust_fixes.target_problems([fake]) == ["rewind: faust.transport.consumer:Consumer._read_offsets: no longer set and read as self._read_offsets"]


def _faust_copy(tmp_path: Path) -> Path:
    """A scratch copy of the installed Faust package, first on the path of a subprocess."""
    import faust

    scratch = tmp_path / "site"
    shutil.copytree(Path(faust.__file__).parent, scratch / "faust", ignore=shutil.ignore_patterns("__pycache__"))
    return scratch


def _rename(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} is not in {path}: the scratch rename is out of date"
    path.write_text(text.replace(old, new))


def test_the_suite_fails_when_a_patched_attribute_is_renamed(tmp_path: Path) -> None:
    scratch = _faust_copy(tmp_path)
    # An upgrade renames a method patch 1 replaces and an attribute patches 6, 11 and 13 read.
    _rename(scratch / "faust/transport/drivers/aiokafka.py", "async def seek_to_committed(self)", "async def seek_to_committed_offsets(self)")
    _rename(scratch / "faust/transport/consumer.py", "self._read_offset", "self._read_offsets")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(scratch), str(ROOT)])}
    which = subprocess.run([sys.executable, "-c", "import faust; print(faust.__file__)"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert which.stdout.startswith(str(scratch)), which.stdout + which.stderr  # the scratch copy is the one imported

    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{Path(__file__).relative_to(ROOT)}",
         "-k", "test_each_patch_target_still_exists"],
        env=env, capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    failed = {line.split("[", 1)[1].split("]", 1)[0] for line in run.stdout.splitlines() if line.startswith("FAILED")}
    assert failed == {"seek_uncommitted_partitions_to_beginning", "rewind", "hold_read_offsets_on_rewind", "read_offsets", "hand_fetches_to_stages"}, run.stdout
    assert "seek_to_committed is missing" in run.stdout and "no longer set and read as self._read_offset" in run.stdout

    # A worker would not start on it either.
    start = subprocess.run([sys.executable, "-c", "from app.stream.faust_fixes import require_targets; require_targets()"],
                           env=env, capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert start.returncode == 1 and "AIOKafkaConsumerThread.seek_to_committed is missing" in start.stderr
    assert "constraints.txt" in start.stderr
