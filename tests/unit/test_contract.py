"""The published contract: JSON Schemas match the types; the core stays pure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app import schemas

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_schemas_match_the_record_types():
    stale = schemas.drift(ROOT / "schemas")
    assert stale == [], f"schemas/ is stale for {stale}: run `faultline schemas`"


def test_schema_drift_is_detected(tmp_path):
    schemas.write_schemas(tmp_path)
    assert schemas.drift(tmp_path) == []
    victim = next(tmp_path.glob("faultline.ClassifiedFailure*.json"))
    victim.write_text(victim.read_text().replace('"revision"', '"revisions"'))
    assert schemas.drift(tmp_path) == [victim.name]


def test_core_imports_nothing_that_does_io():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "KEPT" in result.stdout
