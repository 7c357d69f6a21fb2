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


def test_an_io_or_settings_import_in_the_core_breaks_a_contract(tmp_path):
    """The contracts catch what they exist for: a scratch copy of the package whose core
    reads the environment (os), the settings or a rule file fails lint-imports."""
    import shutil

    lint = Path(sys.executable).with_name("lint-imports")
    shutil.copytree(ROOT / "app", tmp_path / "app", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    core = tmp_path / "app" / "core" / "base" / "emit.py"
    original = core.read_text()
    io = "The core reads no clock, file, network, process or randomness of its own: time comes from records"
    pure = "The core is pure: it imports nothing that does I/O"
    for line, contract in (
        ("import os", io),
        ("import time", io),
        ("import app.settings", pure),
        ("from app.rulefile import load_rules", pure),
        ("from app import schemas", pure),
    ):
        core.write_text(f"{original}\n{line}\n")
        result = subprocess.run([str(lint)], cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode != 0, f"{line}: every contract kept\n{result.stdout}"
        broken = " ".join(result.stdout.split())
        assert f"{contract} BROKEN" in broken and "app.core.base.emit ->" in broken, (line, result.stdout)
