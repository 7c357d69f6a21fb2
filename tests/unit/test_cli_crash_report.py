"""A `faultline` process killed by a native fault writes every thread's Python stack to
stderr (app/cli/crash_report.py): a worker that died of SIGSEGV in CI left a log that ended
mid-stop, naming nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

# The process takes its settings as the `faultline` command does, then dies of a native fault.
_CRASH = "import faulthandler, sys; {setup}; faulthandler._sigsegv()"
_AS_FAULTLINE = "from app.cli import main; sys.argv = ['faultline', 'rules', 'show']; main()"


def _crash(setup: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    return subprocess.run([sys.executable, "-c", _CRASH.format(setup=setup)], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_the_faultline_process_names_its_threads_stacks_when_it_dies_of_a_native_fault() -> None:
    result = _crash(_AS_FAULTLINE)
    assert result.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in result.stderr
    assert "Current thread" in result.stderr and '"<string>", line 1' in result.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_without_it_a_native_fault_says_nothing() -> None:
    result = _crash("pass")
    assert result.returncode == -signal.SIGSEGV and "Fatal Python error" not in result.stderr


@pytest.mark.parametrize("stderr", ["closed", "no descriptor"])
def test_a_process_without_a_stderr_file_runs_the_command_all_the_same(stderr: str) -> None:
    # `faultline ... 2>&-` leaves sys.stderr None; a wrapper may put an object with no fileno there.
    setup = "sys.stderr = None" if stderr == "closed" else "import io; sys.stderr = io.StringIO()"
    code = f"import sys; {setup}; from app.cli import main; sys.argv = ['faultline', 'rules', 'show']; sys.exit(main())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "rules_version" in result.stdout
