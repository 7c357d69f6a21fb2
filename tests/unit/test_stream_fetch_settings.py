"""The fetch settings (fetch_wait_ms, fetch_min_bytes) apply between rebalances only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("faust")

from app.stream.faust_fixes import FAUST_FETCH_MIN_BYTES, FAUST_FETCH_WAIT_MS, short_fetch_wait_between_rebalances  # noqa: E402


def test_fetches_wait_for_the_settings_bytes_between_rebalances_and_for_nothing_during_them() -> None:
    fetcher = SimpleNamespace(_fetch_max_wait_ms=FAUST_FETCH_WAIT_MS, _fetch_min_bytes=FAUST_FETCH_MIN_BYTES)
    calls: list[str] = []
    app = SimpleNamespace(
        consumer=SimpleNamespace(_thread=SimpleNamespace(_consumer=SimpleNamespace(_fetcher=fetcher))),
        on_rebalance_start=lambda: calls.append("start"),
        on_rebalance_end=lambda: calls.append("end"),
    )
    short_fetch_wait_between_rebalances(app, 20, 16384)
    app.on_rebalance_start()
    assert (fetcher._fetch_max_wait_ms, fetcher._fetch_min_bytes) == (FAUST_FETCH_WAIT_MS, 1)  # recovery reads at once
    app.on_rebalance_end()
    assert (fetcher._fetch_max_wait_ms, fetcher._fetch_min_bytes) == (20, 16384)
    assert calls == ["start", "end"]  # Faust's own handlers still run


def test_the_fetcher_attributes_set_are_the_ones_aiokafka_reads_for_each_request() -> None:
    """The settings are set on aiokafka's fetcher by name; a renamed attribute would make
    them do nothing without an error."""
    import inspect

    from aiokafka.consumer.fetcher import Fetcher

    source = inspect.getsource(Fetcher)
    for name in ("_fetch_max_wait_ms", "_fetch_min_bytes"):
        assert f"self.{name} = " in source and source.count(f"self.{name}") >= 2, name  # set, then read


def test_fetch_min_bytes_is_a_worker_setting_with_limits() -> None:
    from app.settings import Settings, SettingsError, load

    assert Settings().fetch_min_bytes == 64 * 1024  # a quiet stream is fetched once per fetch_wait_ms (issue 28)
    assert load({"fetch_min_bytes": "16384"}).fetch_min_bytes == 16384
    with pytest.raises(SettingsError, match="fetch_min_bytes"):
        load({"fetch_min_bytes": 0})
