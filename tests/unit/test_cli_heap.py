"""The `faultline` process's collector settings (app/cli/heap.py): a process of its own
freezes its start-up objects and collects fully a tenth as often; a caller of `main` with
its own arguments (a test, an embedding program) keeps its own settings."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from app.cli import main
from app.cli.heap import FULL_COLLECTION_EVERY, settle_heap


@pytest.fixture
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_settle_heap_freezes_what_exists_and_runs_a_full_collection_a_tenth_as_often(restored: None) -> None:
    young, middle, full = gc.get_threshold()
    settle_heap()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (young, middle, FULL_COLLECTION_EVERY) and FULL_COLLECTION_EVERY == 10 * full


def test_main_called_with_arguments_leaves_the_callers_collector_alone(restored: None, tmp_path) -> None:
    before = gc.get_threshold()
    trace = tmp_path / "empty.jsonl"
    trace.write_text("")
    main(["classify", str(trace)])
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_faultline_process_settles_its_heap() -> None:
    probe = "import gc, sys; from app.cli import main; sys.argv = ['faultline', 'rules', 'show']; main(); print(gc.get_threshold()[2], gc.get_freeze_count() > 0, file=sys.stderr)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stderr.split()[-2:] == [str(FULL_COLLECTION_EVERY), "True"]
