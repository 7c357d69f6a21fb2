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


def test_r12_5_the_workers_stats_give_the_stream_time_expiry_runs_on(tmp_path: Path) -> None:
    """GET /faultline/ (R12.6): a stage partition that has heard the jobs' progress but not
    yet the pods' has no stream time (R12.5), though it folded records; the waiting
    topics are named too."""
    from datetime import datetime, timezone

    from app.core.engine.runner import Scope
    from app.model.facts import Progress

    at = datetime(2026, 8, 25, 12, tzinfo=timezone.utc)
    _, stages, _ = build_app(Settings(topic_prefix="u.", partitions=2, store="memory", web_port=0, data_dir=str(tmp_path)))
    scope = Scope(whole=False, latest={"prod-a": at})
    scope.marks = (scope.marks.observe(Progress("prod-a", "k8s.jobs", 0, 1, at)) or scope.marks).expect("prod-a", "k8s.pods")
    stages.scopes["attempts"][0] = scope
    assert stages.stats()["stream_time"]["attempts"] == {"0": {"prod-a": None}}
    assert stages.waiting_rows() == [("prod-a", "k8s.pods")]
    scope.marks = scope.marks.observe(Progress("prod-a", "k8s.pods", 0, 1, at)) or scope.marks
    assert stages.stats()["stream_time"]["attempts"] == {"0": {"prod-a": at.isoformat()}}
