"""How `faultline run` shows what it emits, as it comes: one table under one header, a line
per verdict or gang transition, the first column saying which (`verdict`; `revised`, a
verdict that replaces one printed before, with what it replaces; `gang`, a transition of
a JobSet under Kueue), the verdict's reasons indented beneath it. GPU-H is what the
failure cost (as `classify` shows it): a revision that moves it is printed too.

Rows are printed one at a time under a header printed once, so the columns have fixed
widths that fit the usual keys and codes; a longer cell is cut in the middle (render.Columns
`fixed`: the full record is in --out)."""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import IO, NamedTuple

from app.cli import render
from app.core.base.emit import Emit
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, GANG_TRANSITIONS, ClassifiedFailure, GangTransition

HEADER = ("WHAT", "ATTEMPT / JOBSET", "CODE", "KIND", "GPU-H", "GPU FAULT / TRANSITION", "POD", "NOTE")
MINIMUM = (7, 44, 20, 6, 5, 32, 36, 0)
NUMERIC = [name == "GPU-H" for name in HEADER]
VERDICT, REVISED, GANG = "verdict", "revised", "gang"


class Shown(NamedTuple):
    """What a verdict line showed, to say what its revision changes."""

    code: str
    kind: str
    fault: str
    pod: str
    reasons: tuple[str, ...] = ()
    terminal: bool = True
    gpu_hours: str = "-"


# Attempts whose last verdict is remembered to say what a revision replaces; the oldest
# are forgotten first (a revision of one of those says its revision number instead).
REMEMBERED = 100_000


def verdict_cells(v: ClassifiedFailure, previous: Shown | None) -> tuple[str, ...]:
    fault = render.fault_text(v.gpu_fault)
    pod = v.faulted_pod.name if v.faulted_pod else "-"
    gpu_hours = render.gpu_hours(v.gpu_seconds)
    notes = []
    if v.revision:
        if previous is None:  # forgotten (REMEMBERED)
            notes.append(f"revision {v.revision}")
        elif (previous.code, previous.kind) != (v.code, v.kind):
            notes.append(f"was {previous.code} {previous.kind}")
        elif (previous.fault, previous.pod) != (fault, pod):
            was = "without a GPU fault" if previous.fault == "-" else previous.fault
            notes.append(f"was {was}" + (f" on pod {previous.pod}" if previous.pod != "-" else ""))
        elif previous.gpu_hours != gpu_hours:  # a pod's end came later, or a generation's pods
            notes.append(f"GPU-H was {previous.gpu_hours}")
        else:
            notes.append("same verdict, new evidence")
    if not v.terminal:
        notes.append(render.interim_note(v))
    return (REVISED if v.revision else VERDICT, render.attempt_name(v), v.code, v.kind, gpu_hours, fault, pod, "; ".join(notes))


def _shown(v: ClassifiedFailure) -> Shown:
    pod = v.faulted_pod.name if v.faulted_pod else "-"
    return Shown(v.code, v.kind, render.fault_text(v.gpu_fault), pod, tuple(v.reasons), v.terminal, render.gpu_hours(v.gpu_seconds))


def transition_cells(t: GangTransition) -> tuple[str, ...]:
    # KIND: whose retry the transition costs (R9), as a verdict's kind says whose fault it was.
    waited = f"waited {t.waited_seconds:g}s; " if t.waited_seconds is not None else ""
    retry = t.retry.upper() if t.retry else "-"
    return (GANG, render.attempt_name(t), t.code or "-", retry, "-", f"{t.from_} -> {t.to}", "-", waited + t.reason)


class LivePrinter:
    """Prints each verdict and gang transition as it comes; writes every output record to
    `out` when given (the `replay` format)."""

    def __init__(self, stdout: IO[str], out: IO[bytes] | None, encode: Callable[[Emit], bytes]) -> None:
        self._stdout, self._out, self._encode = stdout, out, encode
        self._columns = render.Columns(HEADER, MINIMUM, NUMERIC, fixed=True)
        self._headed = False
        self._last: OrderedDict[str, Shown] = OrderedDict()  # attempt key -> its last verdict
        self.verdicts = 0
        self.transitions = 0

    def __call__(self, emit: Emit) -> None:
        self.show(emit)

    def keep(self, emit: Emit) -> None:
        """An output printed by an earlier run (the replayed log): written to `out` only."""
        if self._out is not None:
            self._out.write(self._encode(emit) + b"\n")
            self._out.flush()  # a reader may follow the file while the run goes on
        if emit.topic == CLASSIFIED_FAILURES:
            self._remember(emit.value)

    def show(self, emit: Emit) -> None:
        if self._out is not None:
            self._out.write(self._encode(emit) + b"\n")
            self._out.flush()
        if emit.topic == CLASSIFIED_FAILURES:
            v: ClassifiedFailure = emit.value
            self.verdicts += 1
            if v.revision and self._last.get(v.key) == _shown(v):
                # Nothing the table shows changed (e.g. the GPU time by less than the
                # tenth of an hour shown): the record is in --out, the row would say nothing.
                self._remember(v)
                return
            self._print([self._columns.line(verdict_cells(v, self._last.get(v.key))), *render.reasons(v.reasons)])
            self._remember(v)
        elif emit.topic == GANG_TRANSITIONS:
            self.transitions += 1
            self._print([self._columns.line(transition_cells(emit.value))])
        elif emit.topic == DEAD_LETTER:
            print(f"faultline: a record could not be read and was skipped ({emit.value.reason})", file=sys.stderr)

    def _remember(self, v: ClassifiedFailure) -> None:
        self._last[v.key] = _shown(v)
        self._last.move_to_end(v.key)
        if len(self._last) > REMEMBERED:
            self._last.popitem(last=False)

    def _print(self, lines: list[str]) -> None:
        if not self._headed:
            self._headed = True
            lines = [self._columns.head(), *lines]
        self._stdout.write("\n".join(lines) + "\n")
        self._stdout.flush()
