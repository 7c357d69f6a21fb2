"""How the command line shows records to people: verdicts, faults, gang transitions, fleet
tables and replay diffs. Every command prints through here, so a thing is shown one way.

Columns are aligned; `Columns` also aligns rows printed one at a time (`faultline run`):
there its widths are fixed from the start (`fixed`), a longer cell cut in the middle
(`…`) so every row stays under its header.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from datetime import datetime

from app.core.identity.attempt import attempt_name as _attempt_name
from app.core.kinds.base import WorkloadKind
from app.core.kinds.registry import kind_named
from app.core.fleet.states import fault_label
from app.core.fleet.costs import CostRow
from app.core.fleet.goodput_rows import ClusterGoodput, GoodputRow
from app.core.fleet.summary import FleetSummary, SourceRow
from app.model.records import ClassifiedFailure, GangTransition, GpuFault, IdleQuota
from app.replay.diff import Cost, Diff, moved_gpu_seconds

REASON_WIDTH = 100


class Columns:
    """Left-aligned columns two spaces apart; `numeric` ones right-aligned. `fixed`: the
    widths never change (rows printed one at a time, under a header printed once): a cell
    longer than its column, the last one aside, is cut in the middle."""

    def __init__(
        self, header: Sequence[str], minimum: Sequence[int] | None = None, numeric: Sequence[bool] | None = None, *, fixed: bool = False
    ) -> None:
        self.header = tuple(header)
        self.widths = [max(len(h), m) for h, m in zip(self.header, minimum or [0] * len(self.header))]
        self.numeric = list(numeric or [False] * len(self.header))
        self.fixed = fixed

    def fit(self, rows: Iterable[Sequence[str]]) -> None:
        if self.fixed:
            return
        for row in rows:
            self.widths = [max(w, len(c)) for w, c in zip(self.widths, row)]

    def line(self, cells: Sequence[str]) -> str:
        self.fit([cells])
        if self.fixed:
            last = len(cells) - 1
            cells = [c if i == last or len(c) <= w else _cut(c, w) for i, (c, w) in enumerate(zip(cells, self.widths))]
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, self.widths, self.numeric)).rstrip()

    def head(self) -> str:
        return self.line(self.header)


def _cut(text: str, width: int) -> str:
    """`text` in `width` characters, its middle left out (both ends say most: a key's
    cluster and its uid, a pod's Job and its suffix)."""
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def table(header: tuple[str, ...], rows: Iterable[tuple[object, ...]]) -> list[str]:
    """A whole table: numbers right-aligned, empty cells as '-'."""
    cells = [tuple("-" if c is None or c == "" else str(c) for c in row) for row in rows]
    numeric = [bool(cells) and all(row[i].replace(".", "", 1).isdigit() or row[i] == "-" for row in cells) for i in range(len(header))]
    columns = Columns(header, numeric=numeric)
    columns.fit(cells)
    return [columns.head(), *(columns.line(row) for row in cells)]


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC") if at is not None else "-"


def _window(seconds: int) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def gpu_hours(seconds: int | None) -> str:
    """GPU-seconds as GPU-hours, one decimal (issue 30); '-' when unknown."""
    return "-" if seconds is None else f"{seconds / 3600:.1f}"


def reasons(lines: Iterable[str], indent: int = 4) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    for line in lines:
        out += textwrap.wrap(line, REASON_WIDTH, initial_indent=pad, subsequent_indent=pad + "  ", break_on_hyphens=False) or [pad]
    return out


# --- faults and verdicts ----------------------------------------------------------------------


def fault_text(fault: GpuFault | None) -> str:
    """`Xid 74 CRITICAL gpu-17/gpu0`, or '-'."""
    if fault is None:
        return "-"
    gpu = f"/gpu{fault.gpu_index}" if fault.gpu_index is not None else ""
    return f"{fault_label(fault.kind, fault.code)} {fault.severity} {fault.node or '?'}{gpu}"


def attempt_name(record: ClassifiedFailure | GangTransition) -> str:
    """The ATTEMPT (or JOBSET) cell: the attempt key under the orchestrator's labels, a
    workload attempt by kind and name with its uid shortened, e.g.
    `prod-a/ml/TrainJob/llama-ft (cdc524c6)` (SPEC R13.3). Every table names attempts so."""
    return _attempt_name(record)


VERDICT_HEADER = ("ATTEMPT", "CODE", "KIND", "GPU-H", "GPU FAULT", "POD", "RESTARTED")
# Wide enough for the usual attempt keys and codes, so rows printed as they come line up.
VERDICT_MINIMUM = (40, 20, 6, 5, 28, 20, 0)


def restart_cell(v: ClassifiedFailure) -> str:
    """The RESTARTED cell: how the attempt went on after an interim verdict (`terminal:
    false`), in its kind's words; empty for a final one."""
    if v.terminal:
        return ""
    kind = kind_named(v.tracked.kind)
    restarted = kind.restarted if kind is not None else WorkloadKind.restarted  # a pod task's (R8.2)
    return restarted.format(generation=v.generation)


def interim_note(v: ClassifiedFailure) -> str:
    """The same words in `run`'s live lines, which have no header."""
    return f"restarted {restart_cell(v)}" if not v.terminal else ""


def _verdict_cells(v: ClassifiedFailure) -> tuple[str, ...]:
    state = restart_cell(v)
    pod = v.faulted_pod.name if v.faulted_pod else "-"
    return (attempt_name(v), v.code, v.kind, gpu_hours(v.gpu_seconds), fault_text(v.gpu_fault), pod, state)


def verdict_lines(v: ClassifiedFailure, columns: Columns) -> list[str]:
    """One aligned row, then the verdict's reasons indented beneath it."""
    return [columns.line(_verdict_cells(v)), *reasons(v.reasons)]


def verdict_table(verdicts: list[ClassifiedFailure]) -> list[str]:
    columns = Columns(VERDICT_HEADER, numeric=[h == "GPU-H" for h in VERDICT_HEADER])
    columns.fit(_verdict_cells(v) for v in verdicts)
    lines = [columns.head()]
    for v in verdicts:
        lines += verdict_lines(v, columns)
    return lines


TRANSITION_HEADER = ("JOBSET", "TRANSITION", "CODE", "RETRY", "WAITED", "REASON")
TRANSITION_MINIMUM = (40, 32, 12, 6, 6, 0)


def _transition_cells(t: GangTransition) -> tuple[str, ...]:
    waited = f"{t.waited_seconds:g}s" if t.waited_seconds is not None else "-"
    return (attempt_name(t), f"{t.from_} -> {t.to}", t.code or "-", t.retry or "-", waited, t.reason)


def transition_line(t: GangTransition, columns: Columns) -> str:
    return columns.line(_transition_cells(t))


def transition_table(transitions: list[GangTransition]) -> list[str]:
    columns = Columns(TRANSITION_HEADER)
    columns.fit(_transition_cells(t) for t in transitions)
    return [columns.head(), *(transition_line(t, columns) for t in transitions)]


# --- fleet health -----------------------------------------------------------------------------


def _source_rows(rows: list[SourceRow], gpu: bool) -> list[tuple[object, ...]]:
    return [
        (r.node + (" *" if r.candidate else ""), *((r.gpu,) if gpu else ()), r.faults, r.critical, r.user, r.warn, r.occurrences, r.top,
         *(() if gpu else (r.gpus,)), _when(r.last_fault_at))
        for r in rows
    ]  # fmt: skip


def fleet_lines(summary: FleetSummary) -> list[str]:
    """The fleet-health summary as terminal tables."""
    t = summary.totals
    lines = [
        f"FLEET HEALTH  stream time {_when(summary.stream_time)}  (history {summary.history_hours}h; "
        f"quarantine: >= {summary.threshold} critical faults in {_window(summary.window_seconds)})",
        f"faults {t.faults} (critical {t.severity.critical}, user {t.severity.user}, warn {t.severity.warn}; {t.occurrences} occurrences) "
        f"on {t.nodes} node(s), {t.gpus} GPU(s); failures {t.failures} (system {t.system_failures}, user {t.user_failures}; "
        f"{t.gpu_failures} with a GPU fault; {gpu_hours(t.gpu_seconds)} GPU-hours lost); dead letters {t.dead_letters}",
    ]
    lines += ["", "QUARANTINE CANDIDATES"]
    if summary.quarantine:
        lines += table(
            ("SCOPE", "NODE", "GPU", "FAULTS", "SINCE", "ACTION", "CODES"),
            ((c.scope, c.node, c.gpu, c.faults, _when(c.since), c.action, ", ".join(c.codes)) for c in summary.quarantine),
        )
    else:
        lines.append("none")
    lines += ["", "TOP NODES (* quarantine candidate)"]
    lines += table(("NODE", "FAULTS", "CRITICAL", "USER", "WARN", "OCCURRENCES", "TOP", "GPUS", "LAST FAULT"), _source_rows(summary.nodes, False)) if summary.nodes else ["none"]
    lines += ["", "TOP GPUS"]
    lines += table(("NODE", "GPU", "FAULTS", "CRITICAL", "USER", "WARN", "OCCURRENCES", "TOP", "LAST FAULT"), _source_rows(summary.gpus, True)) if summary.gpus else ["none"]
    lines += ["", "FAILURES BY CODE AND KIND"]
    lines += table(
        ("CLUSTER", "NAMESPACE", "CODE", "KIND", "FAILURES", "WITH GPU FAULT", "GPU-HOURS"),
        ((r.cluster, r.namespace, r.code, r.kind, r.failures, r.gpu_faults, gpu_hours(r.gpu_seconds)) for r in summary.failures),
    ) if summary.failures else ["none"]  # fmt: skip
    lines += ["", *cost_lines(summary)]
    lines += ["", *goodput_lines(summary.goodput)]
    if summary.queues:
        lines += ["", "GANG PREEMPTIONS (queue = namespace until transitions carry the queue name)"]
        lines += table(
            ("CLUSTER", "QUEUE", "PREEMPTIONS", "EVICTIONS", "READMITTED", "WAITING", "AVG WAIT", "MAX WAIT"),
            (
                (q.cluster, q.queue, q.preemptions, q.evictions, q.readmissions, q.waiting,
                 f"{q.wait_seconds_avg:.0f}s" if q.wait_seconds_avg is not None else "-",
                 f"{q.wait_seconds_max:.0f}s" if q.wait_seconds_max is not None else "-")
                for q in summary.queues
            ),
        )  # fmt: skip
    return lines


def _cost_table(what: str, rows: list[CostRow]) -> list[str]:
    return table(
        (what, "FAILURES", "SYSTEM", "GPU-HOURS", "SYSTEM GPU-H", "USER GPU-H"),
        ((r.key, r.failures, r.system_failures, gpu_hours(r.gpu_seconds), gpu_hours(r.system_gpu_seconds), gpu_hours(r.user_gpu_seconds))
         for r in rows),
    )  # fmt: skip


def cost_lines(summary: FleetSummary) -> list[str]:
    """GPU-hours failures burned (issue 30): in all by kind, then by code, node and namespace."""
    t, cost = summary.totals, summary.cost
    unknown = f"; {t.gpu_seconds_unknown} failure(s) whose pods' start is unknown" if t.gpu_seconds_unknown else ""
    lines = [
        f"GPU-HOURS LOST BY CODE  ({gpu_hours(t.gpu_seconds)} in all: system {gpu_hours(t.system_gpu_seconds)}, "
        f"user {gpu_hours(t.user_gpu_seconds)}{unknown})"
    ]
    if not cost.by_code:
        return [*lines, "none"]
    lines += _cost_table("CODE", cost.by_code)
    if cost.by_node:
        lines += ["", "GPU-HOURS LOST BY NODE (the nodes the failed pods ran on)", *_cost_table("NODE", cost.by_node)]
    lines += ["", "GPU-HOURS LOST BY NAMESPACE", *_cost_table("NAMESPACE", cost.by_namespace)]
    return lines


# --- where the GPU-hours went (SPEC R17) -------------------------------------------------------


def percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _waited(seconds: int) -> str:
    return "-" if not seconds else f"{seconds / 60:.0f}m" if seconds < 5400 else f"{seconds / 3600:.1f}h"


def goodput_sentence(row: GoodputRow) -> str:
    """`reserved 12.0 GPU-h, running 10.0, useful 8.0 (goodput 67%), lost 2.0 (system 2.0, user 0.0), idle 2.0; 1 wait (15m)`."""
    share = f"goodput {percent(row.goodput)}" + ("" if row.reserved_gpu_seconds or row.goodput is None else " of running: no quota reserved")
    waits = f"; {row.waits} wait{'' if row.waits == 1 else 's'} ({_waited(row.wait_seconds)})" if row.waits else ""
    return (
        f"reserved {gpu_hours(row.reserved_gpu_seconds)} GPU-h, running {gpu_hours(row.running_gpu_seconds)}, "
        f"useful {gpu_hours(row.useful_gpu_seconds)} ({share}), lost {gpu_hours(row.lost_gpu_seconds)} "
        f"(system {gpu_hours(row.lost_system_gpu_seconds)}, user {gpu_hours(row.lost_user_gpu_seconds)}), "
        f"idle {gpu_hours(row.idle_gpu_seconds)}{waits}"
    )


GOODPUT_HEADER = ("NAMESPACE", "QUEUE", "RESERVED", "RUNNING", "USEFUL", "LOST SYSTEM", "LOST USER", "IDLE", "WAITED", "GOODPUT")


def goodput_lines(clusters: list[ClusterGoodput]) -> list[str]:
    """R17.4 per cluster, each on its own stream time: a sentence, then its namespaces and queues (GPU-hours)."""
    if not clusters:
        return ["WHERE THE GPU-HOURS WENT", "none"]
    lines: list[str] = []
    for c in clusters:
        lines += [f"WHERE THE GPU-HOURS WENT  {c.cluster} (stream time {_when(c.stream_time)}): {goodput_sentence(c.totals)}"]
        lines += table(
            GOODPUT_HEADER,
            ((r.namespace, r.queue or "-", gpu_hours(r.reserved_gpu_seconds), gpu_hours(r.running_gpu_seconds), gpu_hours(r.useful_gpu_seconds),
              gpu_hours(r.lost_system_gpu_seconds), gpu_hours(r.lost_user_gpu_seconds), gpu_hours(r.idle_gpu_seconds),
              _waited(r.wait_seconds), percent(r.goodput)) for r in c.rows),
        )  # fmt: skip
    return lines


def goodput_hour_lines(clusters: list[ClusterGoodput]) -> list[str]:
    """R17.4 by hour, per cluster (GPU-hours; hours with nothing reserved or running left out)."""
    rows = [
        (c.cluster, h.hour.strftime("%Y-%m-%d %H:00"), gpu_hours(h.reserved_gpu_seconds), gpu_hours(h.running_gpu_seconds),
         gpu_hours(h.useful_gpu_seconds), gpu_hours(h.lost_system_gpu_seconds + h.lost_user_gpu_seconds), gpu_hours(h.idle_gpu_seconds), percent(h.goodput))
        for c in clusters for h in c.hours if h.reserved_gpu_seconds or h.running_gpu_seconds
    ]  # fmt: skip
    return table(("CLUSTER", "HOUR (UTC)", "RESERVED", "RUNNING", "USEFUL", "LOST", "IDLE", "GOODPUT"), rows) if rows else ["none"]


def attempt_goodput_lines(verdicts: list[ClassifiedFailure]) -> list[str]:
    """R17.4 on the terminal verdicts: each failed attempt's figures up to its failure."""
    rows = [
        (attempt_name(v), gpu_hours(g.reserved_gpu_seconds), gpu_hours(g.running_gpu_seconds), gpu_hours(g.useful_gpu_seconds),
         gpu_hours(g.lost_gpu_seconds), gpu_hours(g.idle_gpu_seconds), _waited(g.wait_seconds))
        for v in verdicts if (g := v.goodput) is not None
    ]  # fmt: skip
    return table(("ATTEMPT", "RESERVED", "RUNNING", "USEFUL", "LOST", "IDLE", "WAITED"), rows) if rows else ["none"]


def idle_quota_lines(records: list[IdleQuota]) -> list[str]:
    """R17.3: each stretch of idle quota reported, with when it ended (or `-`: idle still)."""
    ended = {(r.key, r.since, r.why): r.at for r in records if not r.idle}
    rows = []
    for r in records:
        if not r.idle:
            continue
        until = ended.get((r.key, r.since, r.why))
        name = f"{r.cluster}/{r.namespace}/{r.tracked.kind}/{r.tracked.name}" if r.identity == "workload" else r.key
        queue = f"{r.namespace}/{r.queue}" if r.queue else r.namespace
        rows.append((name, queue, r.gpus, _when(r.since), _when(until) if until is not None else "idle still", r.why))
    return table(("ATTEMPT", "QUEUE", "GPUS", "SINCE", "UNTIL", "WHY"), rows) if rows else ["none"]


# --- replay diffs -----------------------------------------------------------------------------


def diff_lines(result: Diff) -> list[str]:
    lines = [
        f"base rules: {', '.join(result.base_rules) or '-'}    candidate rules: {', '.join(result.candidate_rules) or '-'}",
        f"{len(result.changes)} of {result.attempts_compared} attempts changed",
    ]
    if result.cost is not None:
        lines += ["", *cost_diff_lines(result.cost)]
    elif result.transitions:
        lines.append("")
        lines += table(("VERDICT CHANGE", "COUNT"), result.transitions.items())
    for change in result.changes:
        lines.append("")
        lines.append(change.name or change.key)
        for side, v in (("base", change.base), ("candidate", change.candidate)):
            # What decided it (R14: a disruption, a device's health, a GPU fault), else the fault as data.
            said = (v.evidence or v.fault or "no GPU fault, no disruption") if v is not None else ""
            text = "(no verdict)" if v is None else f"{v.code} {v.kind}  {said}" + (f"  pod {v.faulted_pod}" if v.faulted_pod else "")
            lines.append(f"  {side:<9}  {text}")
        lines.append(f"  because    {change.because}")
        if result.cost is not None:
            lines.append(f"  cost       {gpu_hours(moved_gpu_seconds(change))} GPU-hours")
    return lines


def cost_diff_lines(cost: Cost) -> list[str]:
    """`faultline diff --cost` (issue 30): the GPU-hours that move, by kind and by verdict change, and the top attempts."""
    base, candidate = cost.base_totals, cost.candidate_totals
    unknown = f"; {cost.unknown} changed attempt(s) with no known GPU time" if cost.unknown else ""
    lines = [
        f"GPU-HOURS MOVED  USER -> SYSTEM {gpu_hours(cost.user_to_system)}, SYSTEM -> USER {gpu_hours(cost.system_to_user)}{unknown}",
        f"all final verdicts: SYSTEM {gpu_hours(base.get('SYSTEM', 0))} -> {gpu_hours(candidate.get('SYSTEM', 0))}, "
        f"USER {gpu_hours(base.get('USER', 0))} -> {gpu_hours(candidate.get('USER', 0))} GPU-hours",
        "",
    ]
    lines += table(("VERDICT CHANGE", "COUNT", "GPU-HOURS"), ((m.change, m.attempts, gpu_hours(m.gpu_seconds)) for m in cost.moves))
    if cost.top:
        lines += ["", *table(("TOP ATTEMPTS", "VERDICT CHANGE", "GPU-HOURS"), ((a.name, a.change, gpu_hours(a.gpu_seconds)) for a in cost.top))]
    if cost.base_goodput is not None or cost.candidate_goodput is not None:
        lines += ["", "WHERE THE GPU-HOURS WENT (faultline.goodput of each replay)"]
        lines += table(
            ("REPLAY", "RESERVED", "RUNNING", "USEFUL", "LOST SYSTEM", "LOST USER", "IDLE", "GOODPUT"),
            ((side, gpu_hours(g.reserved_gpu_seconds), gpu_hours(g.running_gpu_seconds), gpu_hours(g.useful_gpu_seconds),
              gpu_hours(g.lost_system_gpu_seconds), gpu_hours(g.lost_user_gpu_seconds), gpu_hours(g.idle_gpu_seconds), percent(g.goodput))
             for side, g in (("base", cost.base_goodput), ("candidate", cost.candidate_goodput)) if g is not None),
        )  # fmt: skip
    return lines
