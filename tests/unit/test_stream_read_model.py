"""The fleet read model (app/stream/read_model.py) runs only where a web surface serves it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import Settings

pytest.importorskip("faust")

from app.stream.app import build_app  # noqa: E402


@pytest.mark.parametrize(("web_port", "fleet_stage", "reads"), [(6066, True, True), (0, True, False), (6066, False, False)])
def test_a_worker_reads_the_fleet_view_only_when_its_web_surface_serves_it(
    tmp_path: Path, web_port: int, fleet_stage: bool, reads: bool
) -> None:
    settings = Settings(topic_prefix="u.", partitions=2, store="memory", web_port=web_port, fleet_stage=fleet_stage, data_dir=str(tmp_path))
    app, _, view = build_app(settings)
    assert (view in app._children) is reads  # mode starts an app's dependencies with it
