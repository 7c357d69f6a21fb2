"""The README's `make demo` sample is what `make demo` prints (its first lines, up to the
`...`): a change to the example trace or to the table shows here first."""

from __future__ import annotations

import re
from pathlib import Path

from app.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_demo_sample_is_the_start_of_the_real_output(capsys):
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    [command] = re.findall(r"^demo:.*\n\t\$\(BIN\)/faultline (classify \S+)$", makefile, re.MULTILINE)
    sample = readme.split("`make demo` prints", 1)[1].split("```\n", 2)[1]
    shown = sample.splitlines()
    assert shown[-1] == "..."
    action, trace = command.split()
    assert main([action, str(ROOT / trace)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert shown[:-1] == printed[: len(shown) - 1]
