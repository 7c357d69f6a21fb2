"""An install without the extras: every command is there, and one whose extra is missing
says which to install, exits 2 and prints no traceback (issue: `make demo` installs the
core only).

The installs are real interpreters (venvs) that see the core's dependencies and this
checkout, and nothing else."""

from __future__ import annotations

import importlib.util
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "traces" / "mixed.jsonl"


def _install(path: Path, packages: list[str]) -> Path:
    """A venv whose site-packages holds the checkout and `packages` (linked from this one)."""
    venv.create(path, with_pip=False, symlinks=True)
    site = next(path.glob("lib/python3*/site-packages"))
    linked = path / "linked"
    linked.mkdir()
    for name in packages:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        source = Path(spec.origin).parent
        (linked / source.name).symlink_to(source)
        for extra in source.parent.glob(f"{name}.libs"):  # compiled wheels' vendored libraries
            (linked / extra.name).symlink_to(extra)
    (site / "faultline.pth").write_text(f"{ROOT}\n{linked}\n")
    return path / "bin" / "python"


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _install(tmp_path_factory.mktemp("core"), ["msgspec", "orjson"])


@pytest.fixture(scope="module")
def kafka_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As after `pip install faultline[bridge]` but for the kubernetes client: kafka-python, no Faust."""
    return _install(tmp_path_factory.mktemp("kafka"), ["msgspec", "orjson", "kafka"])


def faultline(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "app", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"}, cwd=ROOT)


STREAM = [
    ["worker"],
    ["topics", "create"],
    ["publish", str(MIXED)],
    ["tail", "faultline.faults"],
    ["replay", "--from-kafka", "--out", "-"],
    ["diff", "--base", "kafka:a", "--candidate", "kafka:b"],
    ["serve", "--trace", str(MIXED)],
]
BRIDGE = [["bridge", "--cluster", "a"], ["record", "--cluster", "a", "--out", "-"], ["run", "--cluster", "a"]]


@pytest.mark.parametrize("command", STREAM + BRIDGE, ids=lambda c: " ".join(c[:2]))
def test_a_command_missing_its_extra_names_it_and_exits_2(core: Path, command: list[str]) -> None:
    res = faultline(core, *command)
    extra = "faultline[bridge]" if command in BRIDGE else "faultline[stream"
    assert res.returncode == 2, res.stderr
    assert extra in res.stderr and "pip install -e '.[all]'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_the_worker_without_faust_names_the_stream_extra(kafka_only: Path) -> None:
    res = faultline(kafka_only, "worker")
    assert res.returncode == 2 and "faultline[stream]" in res.stderr and "faust" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_the_core_install_lists_every_command_and_classifies(core: Path) -> None:
    listed = faultline(core, "--help").stdout
    for command in ("classify", "replay", "fleet", "serve", "diff", "rules", "run", "record", "bridge", "topics", "worker", "publish", "tail"):
        assert command in listed
    res = faultline(core, "classify", str(MIXED))
    assert res.returncode == 0 and "GpuNvlinkError" in res.stdout, res.stderr
