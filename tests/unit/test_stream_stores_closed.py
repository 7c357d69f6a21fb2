"""faust_fixes patch 16: a RocksDB store that has stopped opens no database again, and
every database still open is closed before the worker's process ends.

A worker stopped during a rebalance (tests/integration/test_stream_ownership.py, once in a
whole CI run) exited on SIGSEGV after its tables had stopped: the rebalance that completed
during the stop, and changelog writes acknowledged during it, open a stopped store's
databases again, and nothing closed them before the process exited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import Settings

pytest.importorskip("faust")
rocksdict = pytest.importorskip("rocksdict")

from faust.types import TP  # noqa: E402

from app.stream.app import build_app  # noqa: E402
from app.stream.faust_fixes import as_current_event, close_stores, partition_event  # noqa: E402


def _app(tmp_path: Path):  # type: ignore[no-untyped-def]
    app, stages, _ = build_app(Settings(topic_prefix="u.", partitions=2, store="rocksdb", web_port=0, data_dir=str(tmp_path)))
    return app, stages.tables["pods"].table


def _write(table, partition: int) -> None:  # type: ignore[no-untyped-def]
    with as_current_event(partition_event(partition)):
        table.data[b"k%d" % partition] = b"state"


def test_a_stopped_store_opens_no_database_for_a_rebalance_or_an_acknowledged_changelog_write(tmp_path: Path) -> None:
    app, table = _app(tmp_path)
    store = table.data
    changelog = TP(table.changelog_topic.get_topic_name(), 1)
    store.set_persisted_offset(changelog, 7)  # a running store keeps the offset, opening what it needs
    assert store.persisted_offset(changelog) == 7 and set(store._dbs) == {1}
    app.loop.run_until_complete(store.stop())
    assert store._dbs == {}  # Faust's stop drops them
    store.set_persisted_offset(changelog, 9)
    app.loop.run_until_complete(store.on_rebalance({changelog}, set(), {changelog}, 3))
    assert store._dbs == {}  # nothing opened again: nothing left open at exit


def test_close_stores_closes_every_open_database_so_it_can_be_opened_again(tmp_path: Path) -> None:
    app, table = _app(tmp_path)
    _write(table, 0)
    _write(table, 1)
    paths = {p: table.data.partition_path(p) for p in (0, 1)}
    assert close_stores(app) == 2 and table.data._dbs == {}
    # A database still open in this process would refuse a second opening (RocksDB's LOCK).
    for partition, path in paths.items():
        opened = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))
        assert opened[b"k%d" % partition] == b"state"  # flushed as it closed
        opened.close()
    assert close_stores(app) == 0  # nothing left: a second call does nothing


def test_close_stores_leaves_a_table_whose_store_was_never_made(tmp_path: Path) -> None:
    app, table = _app(tmp_path)
    assert close_stores(app) == 0
    assert table._data is None  # not made just to be closed


def test_the_worker_closes_its_stores_when_it_ends() -> None:
    """run_worker closes the stores after mode's worker has ended the loop, however it ends."""
    probe = (
        "import app.stream.app as a, sys\n"
        "closed = []\n"
        "a.close_stores = lambda app: closed.append(app)\n"
        "class W:\n"
        "    def __init__(self, *args, **kwargs): self._schedule_shutdown = lambda s: None\n"
        "    def execute_from_commandline(self): raise SystemExit(3)\n"
        "a.faust.Worker = W\n"
        "class S: delivery = type('D', (), {'stop': None})\n"
        "class App: crash = None\n"
        "try:\n"
        "    a.run_worker(App(), S(), a.Settings())\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, len(closed))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["3", "1"]
