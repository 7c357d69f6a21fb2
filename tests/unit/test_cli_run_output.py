"""What `faultline run` prints as verdicts and gang transitions come (app/cli/live_output.py):
one header, every column headed, each line saying what it is, a revision saying what it
replaces, and columns aligned although the lines are printed one at a time."""

from __future__ import annotations

import io
import re
from pathlib import Path

import msgspec

from app.cli import render
from app.cli.live_output import HEADER, LivePrinter
from app.core.base.emit import Emit
from app.model.records import CLASSIFIED_FAILURES, GANG_TRANSITIONS
from app.embedded.pipeline import Pipeline
from app.replay.trace import encode_output, read_lines, replay

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "examples" / "traces"


def emits_of(*traces: str) -> list[Emit]:
    out: list[Emit] = []
    for name in traces:
        out += list(replay(read_lines(TRACES / name), Pipeline()))
    return out


def printed(emits: list[Emit], kept: int = 0) -> tuple[list[str], bytes]:
    """What a run prints and writes to --out; the first `kept` outputs were printed by an
    earlier run (the replayed log)."""
    stdout, out = io.StringIO(), io.BytesIO()
    printer = LivePrinter(stdout, out, encode_output)
    for i, emit in enumerate(emits):
        (printer.keep if i < kept else printer.show)(emit)
    return stdout.getvalue().splitlines(), out.getvalue()


def starts(line: str) -> list[int]:
    return [m.start() for m in re.finditer(r"\S+", line)]


def test_one_header_every_column_headed_and_each_line_says_what_it_is():
    emits = emits_of("mixed.jsonl", "jobset-preempt-readmit.jsonl")
    lines, _ = printed(emits)
    assert all(cell.strip() for cell in HEADER)
    assert [line for line in lines if line.startswith("WHAT ")] == [lines[0]]
    rows = [line for line in lines[1:] if not line.startswith(" ")]  # reasons are indented beneath their verdict
    assert {row.split()[0] for row in rows} == {"verdict", "revised", "gang"}
    assert sum(row.startswith("gang ") for row in rows) == sum(e.topic == GANG_TRANSITIONS for e in emits)
    assert sum(row.startswith(("verdict ", "revised ")) for row in rows) == sum(e.topic == CLASSIFIED_FAILURES for e in emits)
    first = {e.key for e in emits if e.topic == CLASSIFIED_FAILURES and e.value.revision == 0}
    assert sum(row.startswith("verdict ") for row in rows) == len(first)
    # a transition is never a verdict: "Running -> WaitingForReadmission" under GPU FAULT / TRANSITION
    header = lines[0]
    wait = next(row for row in rows if "Running -> WaitingForReadmission" in row)
    assert wait.index("Running -> WaitingForReadmission") == header.index("GPU FAULT / TRANSITION")
    readmitted = [row for row in rows if "WaitingForReadmission -> Running" in row]
    assert any("waited 905s" in row[header.index("NOTE") :] for row in readmitted)


def test_columns_are_aligned_under_the_header():
    lines, _ = printed(emits_of("mixed.jsonl"))
    header = lines[0]
    columns = [header.index(name) for name in ("ATTEMPT / JOBSET", "CODE", "KIND", "GPU FAULT / TRANSITION")]
    for row in (line for line in lines[1:] if not line.startswith(" ")):
        assert starts(row)[:2] == [0, columns[0]], row
        assert row[columns[1] - 2 : columns[1]] == "  " and row[columns[1]] != " ", row  # CODE starts under CODE
        assert row[columns[2] - 2 : columns[2]] == "  " and row[columns[2]] != " ", row


def revised(emit: Emit, **changes: object) -> Emit:
    return Emit(emit.topic, emit.key, msgspec.structs.replace(emit.value, revision=emit.value.revision + 1, **changes))


def test_a_revision_is_marked_revised_with_the_verdict_it_replaces():
    first = next(e for e in emits_of("mixed.jsonl") if e.topic == CLASSIFIED_FAILURES and e.value.code == "Error")
    later = revised(first, code="GpuXidError", kind="SYSTEM")
    unshown = revised(later, gpu_seconds=(later.value.gpu_seconds or 0) + 1)  # nothing the table shows
    again = revised(unshown, reasons=[*later.value.reasons, "a later record"])
    lines, out = printed([first, later, unshown, again])
    rows = [line for line in lines[1:] if not line.startswith(" ")]
    assert rows[0].startswith("verdict ") and "was" not in rows[0]
    assert rows[1].startswith("revised ") and rows[1].endswith("was Error USER")
    assert rows[1].split()[2:4] == ["GpuXidError", "SYSTEM"]
    assert len(rows) == 3  # the revision that changes nothing shown is not printed
    assert rows[2].startswith("revised ") and rows[2].endswith("same verdict, new evidence")
    assert len(out.splitlines()) == 4  # --out has every record


def test_a_revision_after_a_restart_names_the_verdict_the_earlier_run_printed():
    """The replayed log's outputs are not printed again, but a revision after them still
    says what it replaces: a restarted run prints what an uninterrupted one prints."""
    first = next(e for e in emits_of("mixed.jsonl") if e.topic == CLASSIFIED_FAILURES and e.value.code == "Error")
    later = revised(first, code="GpuXidError", kind="SYSTEM")
    restarted, out = printed([first, later], kept=1)
    uninterrupted, _ = printed([first, later])
    assert restarted[1:] == uninterrupted[2:] and restarted[1].endswith("was Error USER")
    assert len(out.splitlines()) == 2


def test_a_workload_attempt_is_named_as_classify_names_it():
    """SPEC R13.3: by kind and name with its uid shortened (render.attempt_name), as every table."""
    from app.cli import render

    emits = emits_of("workloads.jsonl")
    lines, _ = printed(emits)
    named = {render.attempt_name(e.value) for e in emits if e.topic in (CLASSIFIED_FAILURES, GANG_TRANSITIONS)}
    assert any("/TrainJob/" in name for name in named)
    column = lines[0].index("ATTEMPT / JOBSET")
    shown = {re.sub(r"\s{2,}.*", "", row[column:]) for row in lines[1:] if not row.startswith(" ")}
    assert named <= shown, shown


def test_gpu_hours_are_shown_as_classify_shows_them_and_a_revision_that_moves_them_is_printed():
    """Issue 30's cost on the live table: GPU-H as `classify` prints it, right-aligned under
    its header; a revision that moves the tenth of an hour shown says what it was."""
    from app.cli import render

    emits = emits_of("mixed.jsonl")
    lines, _ = printed(emits)
    header = lines[0]
    end = header.index("GPU-H") + len("GPU-H")
    latest = {e.key: e.value for e in emits if e.topic == CLASSIFIED_FAILURES}
    rows = [line for line in lines[1:] if line.startswith(("verdict ", "revised "))]
    shown = {row[:end].split()[-1] for row in rows}
    assert {render.gpu_hours(v.gpu_seconds) for v in latest.values()} <= shown
    assert all(row[end - 1] != " " and row[end : end + 2] == "  " for row in rows), rows  # right-aligned

    first = next(e for e in emits if e.topic == CLASSIFIED_FAILURES and e.value.code == "Error" and e.value.gpu_seconds)
    longer = revised(first, gpu_seconds=first.value.gpu_seconds + 1800)
    lines, _ = printed([first, longer])
    revision = [line for line in lines if line.startswith("revised ")]
    assert len(revision) == 1 and revision[0].endswith(f"GPU-H was {render.gpu_hours(first.value.gpu_seconds)}")
    assert render.gpu_hours(first.value.gpu_seconds + 1800) in revision[0].split()


def test_columns_never_widen_mid_stream_a_long_cell_is_cut_in_the_middle():
    """Issue 38: a row wider than the columns came after the header was printed and every
    later row moved right of it. The widths are fixed; a longer cell keeps both ends."""
    emits = [e for e in emits_of("mixed.jsonl") if e.topic == CLASSIFIED_FAILURES]
    long_key = "prod-a/" + "very-long-namespace-of-a-research-team/" + "sweep-2026-08-25-lr-0.0003-bs-4096/train/1"
    first = emits[0]
    longer = Emit(first.topic, long_key, msgspec.structs.replace(first.value, key=long_key, code="SomeOperatorsVeryLongFailureReason"))
    lines, out = printed([emits[1], longer, *emits[2:4]])
    header = lines[0]
    rows = [line for line in lines[1:] if not line.startswith(" ")]
    for name in ("CODE", "KIND", "GPU FAULT / TRANSITION", "POD"):
        at = header.index(name)
        assert all(row[at - 2 : at] == "  " and row[at] != " " for row in rows), name
    cut = rows[1]
    assert cut.split()[1].startswith("prod-a/very") and cut.split()[1].endswith("train/1") and "…" in cut.split()[1]
    assert long_key.encode() in out  # --out keeps the whole record


def test_classify_heads_every_column():
    lines = render.verdict_table([e.value for e in emits_of("mixed.jsonl") if e.topic == CLASSIFIED_FAILURES])
    assert lines[0].split()[-1] == "RESTARTED"
    restarted = next(line for line in lines if "in place (generation 0)" in line)
    assert restarted.index("in place (generation 0)") == lines[0].index("RESTARTED")
