"""The worker's event loop (setting event_loop): uvloop by default, asyncio on request, and
a missing uvloop named with its fix instead of a traceback."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterator
from typing import Any

import pytest

from app import settings as settings_mod
from app.cli.common import CommandError
from app.cli.streaming import use_event_loop

uvloop = pytest.importorskip("uvloop")


@pytest.fixture(autouse=True)
def default_policy() -> Iterator[None]:
    yield
    asyncio.set_event_loop_policy(None)  # the next test gets Python's own loop again


def test_the_worker_runs_on_uvloop_by_default() -> None:
    assert settings_mod.load({}).event_loop == "uvloop"
    use_event_loop("uvloop")
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_asyncio_leaves_pythons_loop() -> None:
    use_event_loop("asyncio")
    loop = asyncio.new_event_loop()
    try:
        assert not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_a_missing_uvloop_names_the_extra_and_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def without_uvloop(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "uvloop":
            raise ImportError("No module named 'uvloop'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_uvloop)
    with pytest.raises(CommandError) as raised:
        use_event_loop("uvloop")
    assert ".[stream]" in str(raised.value) and "--event-loop asyncio" in str(raised.value)


def test_an_unknown_event_loop_is_refused_naming_the_choices() -> None:
    with pytest.raises(settings_mod.SettingsError) as raised:
        settings_mod.load({"event_loop": "trio"})
    assert "expected one of 'uvloop', 'asyncio'" in str(raised.value) and "FAULTLINE_EVENT_LOOP" in str(raised.value)
