"""The fleet page in a real browser: headless Chromium (Debian's `chromium` package)
against `faultline serve --trace examples/traces/mixed.jsonl`. A screenshot must be the
right size and show the page's colours; the DOM after the page's JavaScript ran must hold
the example's nodes, codes and quarantine candidate, and where its GPU-hours went (SPEC
R17). With two clusters whose stream times are far apart (issue 38), each chart keeps bars
one can read, every failure row is listed, and nothing spills past the page's edge."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
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
    yield from serve(MIXED)


@pytest.fixture(scope="module")
def far_apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The example in prod-a and again, ten days later, in prod-b."""
    trace = tmp_path_factory.mktemp("clusters") / "two.jsonl"
    lines = MIXED.read_bytes().splitlines()
    later = [_shifted(json.loads(line), timedelta(days=10), "prod-b") for line in lines]
    trace.write_bytes(b"\n".join([*lines, *(json.dumps(line).encode() for line in later)]) + b"\n")
    yield from serve(trace)


_TIME = re.compile(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)"')


def _shifted(line: dict, by: timedelta, cluster: str) -> dict:
    """A trace line of another cluster, every time in it moved by `by`."""

    def move(match: re.Match[str]) -> str:
        at = datetime.fromisoformat(match.group(1).replace("Z", "+00:00")) + by
        return '"' + at.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if "." in match.group(1) else "%Y-%m-%dT%H:%M:%SZ") + '"'

    value = json.loads(_TIME.sub(move, json.dumps(line["value"])))
    value["cluster"] = cluster
    return {**line, "value": value}


def serve(trace: Path) -> Iterator[str]:
    """`faultline serve` on a free port."""
    server = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--trace", str(trace), "--port", "0"],
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


def chromium(url: str, profile: Path, *extra: str, height: int = HEIGHT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}", "--virtual-time-budget=5000", *extra, url,
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


# --- where the GPU-hours went (SPEC R17), and two clusters far apart (issue 38) -------------

FULL = 3400  # tall enough for every section of the page


def screenshot(url: str, tmp_path: Path, name: str) -> tuple[int, int, list[bytes], int]:
    shot = tmp_path / name
    run = chromium(url, tmp_path / f"profile-{name}", f"--screenshot={shot}", height=FULL)
    assert shot.is_file(), f"chromium wrote no screenshot (exit {run.returncode}): {run.stderr[-2000:]}"
    if os.environ.get("FAULTLINE_SCREENSHOT"):
        shutil.copy(shot, Path(os.environ["FAULTLINE_SCREENSHOT"]).with_name(name))
    width, height, rows = png.read(shot.read_bytes())
    return width, height, rows, len(rows[0]) // width


def pixels(rows: list[bytes], step: int, rgb: tuple[int, int, int], within: int = 6) -> int:
    return sum(
        1
        for row in rows[::2]
        for x in range(0, len(row), step * 2)
        if all(abs(a - b) <= within for a, b in zip(row[x : x + 3], rgb))
    )


def test_r17_the_page_shows_where_the_gpu_hours_went(url: str, tmp_path: Path) -> None:
    dom = chromium(url, tmp_path / "profile", "--dump-dom").stdout
    for text in ("Where the GPU-hours went", "goodput (useful ÷ reserved)", "GPU-h reserved", "team-a", "30%", "85%"):
        assert text in dom, f"{text!r} is not on the rendered page"
    _, _, rows, step = screenshot(url, tmp_path, "goodput.png")
    assert pixels(rows, step, (0x30, 0xA4, 0x6C)) > 300, "no useful-green bars: the goodput chart did not render"


def test_issue38_two_clusters_far_apart_keep_readable_charts_and_every_row(far_apart: str, tmp_path: Path) -> None:
    dom = chromium(far_apart, tmp_path / "profile", "--dump-dom").stdout
    assert "per cluster, each on its own stream time" in dom
    chart = dom.split('id="chart"', 1)[1].split("</section>", 1)[0]
    assert chart.count("stream time") == 2  # a chart each: prod-a's and prod-b's
    widths = [float(w) for w in re.findall(r'<rect [^>]*width="([0-9.]+)"', chart)]
    assert len(widths) >= 12 and min(widths) >= 4, f"bars of {min(widths, default=0):.1f} px do not read"
    failures = dom.split('id="failures"', 1)[1].split("</section>", 1)[0]
    [count] = re.findall(r'id="failures-note">(\d+) rows<', dom)
    assert failures.count('class="row"') == int(count) >= 12  # every row, none silently left out
    assert "prod-b/ml" in failures and "prod-a/ml" in failures  # each row names its cluster
    assert len(set(re.findall(r'<div id="gp-chart-(\d+)"', dom))) == 2  # where the GPU-hours went, per cluster
    width, _, rows, step = screenshot(far_apart, tmp_path, "two-clusters.png")
    # Nothing spills past the cards into the page's right margin (the columns cut off at 1,400 px).
    # (The page's background there, give or take the closed evidence drawer's shadow.)
    margin = [row[(width - 12) * step : width * step] for row in rows[60:]]
    background = (0xF4, 0xF6, 0xFA)
    spilled = sum(1 for row in margin for x in range(0, len(row), step) if any(abs(a - b) > 8 for a, b in zip(row[x : x + 3], background)))
    assert spilled == 0, f"{spilled} pixels past the right edge of the cards"
