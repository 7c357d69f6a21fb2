"""The fleet page in a real browser: headless Chromium (Debian's `chromium` package)
against `faultline serve --trace examples/traces/mixed.jsonl`. A screenshot must be the
right size and show the page's colours; the DOM after the page's JavaScript ran must hold
the example's nodes, codes and quarantine candidate."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleet import png

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "traces" / "mixed.jsonl"
CHROMIUM = Path("/usr/bin/chromium")
WIDTH, HEIGHT = 1400, 1000

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install -y chromium): the browser test needs it"
)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """`faultline serve` on a free port."""
    server = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--trace", str(MIXED), "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # printed once the trace is replayed and the port is open
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, f"faultline serve did not start: {line}{server.stdout.read() if server.poll() is not None else ''}"
        yield found.group(0)
    finally:
        server.terminate()
        server.wait(timeout=10)


def chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=5000", *extra, url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_page_renders_the_replayed_example(url: str, tmp_path: Path) -> None:
    shot = tmp_path / "fleet.png"
    run = chromium(url, tmp_path / "profile", f"--screenshot={shot}")
    assert shot.is_file(), f"chromium wrote no screenshot (exit {run.returncode}): {run.stderr[-2000:]}"
    if os.environ.get("FAULTLINE_SCREENSHOT"):  # keep it to look at: FAULTLINE_SCREENSHOT=/tmp/fleet.png
        shutil.copy(shot, os.environ["FAULTLINE_SCREENSHOT"])
    width, height, rows = png.read(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    colours = Counter(row[x : x + 3] for row in rows[::4] for x in range(0, len(row), 12))
    assert len(colours) > 100, f"only {len(colours)} colours: the page looks blank"
    assert colours.most_common(1)[0][1] < 0.8 * sum(colours.values()), "one colour covers most of the page"

    def share(rgb: tuple[int, int, int], within: int = 6) -> int:
        return sum(n for c, n in colours.items() if all(abs(a - b) <= within for a, b in zip(c, rgb)))

    # Drawn only from data: the critical red (chart bars, node bars, candidate cards) and
    # the header's navy.
    assert share((0xE5, 0x48, 0x4D)) > 200, "no critical-red pixels: the charts did not render the example's faults"
    assert share((0x11, 0x1A, 0x2E)) > 1000, "no header"


def test_the_page_script_fills_in_the_example(url: str, tmp_path: Path) -> None:
    run = chromium(url, tmp_path / "profile", "--dump-dom")
    dom = run.stdout
    assert "<html" in dom, f"chromium printed no DOM (exit {run.returncode}): {run.stderr[-2000:]}"
    for text in (
        "stream time 2026-08-25 13:39 UTC",  # the header, from /api/fleet
        "live · updated",
        "gpu-17 / GPU-1234",  # a quarantine candidate card
        "Xid 79",
        "GpuNvlinkError",  # recent verdicts
        "prod-a/ml/llm-pretrain-42/pretrain/1",
        "GpuEccUncorrectable",
        "gpu-31",  # top nodes
        "79.0 GPU-h in the history kept: 51.9 system, 27.1 user",  # what failures cost (issue 30)
        "prod-a/gpu-17",  # GPU-hours lost by node
    ):
        assert text in dom, f"{text!r} is not on the rendered page"
    assert re.search(r'<div id="error"[^>]*></div>', dom), "the page shows an error instead of data"
    assert dom.count("<rect") >= 6  # bars of the faults-per-hour chart
