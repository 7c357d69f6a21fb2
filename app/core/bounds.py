"""What keeps one key's state bounded (SPEC R11.5), by rule settings: the length of free
text, the faults kept per pod, the generations kept per attempt. What is left out is
counted (`emit.dropped`); the byte bound on a whole value is `topology.apply`'s.

docs/rules.md (*Bounded state*) explains which faults are kept and why.
"""

from __future__ import annotations

from datetime import datetime

from app.core.emit import Emit, dropped
from app.core.fault_events import FaultEvent
from app.core.fault_message import ParsedMessage
from app.core.rules import Rules
from app.core.xid import SEVERITY_RANK

TRUNCATED = "truncated_texts"
DROPPED_FAULTS = "dropped_faults"
DROPPED_GENERATIONS = "dropped_generations"


class Trim:
    """Cuts free text (messages, reasons, a fault's tokens) to the rule set's lengths,
    for one fold, counting every cut."""

    __slots__ = ("_tokens", "_messages", "cut")

    def __init__(self, rules: Rules) -> None:
        self._tokens, self._messages = rules.max_token_chars, rules.max_message_chars
        self.cut = 0

    def token(self, text: str) -> str:
        return text if len(text) <= self._tokens else self._shorten(text, self._tokens)

    def message(self, text: str) -> str:
        return text if len(text) <= self._messages else self._shorten(text, self._messages)

    def _shorten(self, text: str, limit: int) -> str:
        self.cut += 1
        return text[: limit - 1] + "…"

    def parsed(self, parsed: ParsedMessage) -> ParsedMessage:
        """A fault's tokens: the reporter's words, the one part of an Event kept as text."""
        limit = self._tokens
        if max(len(parsed.gpu_uuid), len(parsed.pci_bus_id), len(parsed.node), len(parsed.process)) <= limit:
            return parsed
        return ParsedMessage(
            kind=parsed.kind,
            code=parsed.code,
            severity=parsed.severity,
            gpu_uuid=self.token(parsed.gpu_uuid),
            gpu_index=parsed.gpu_index,
            pci_bus_id=self.token(parsed.pci_bus_id),
            node=self.token(parsed.node),
            pid=parsed.pid,
            process=self.token(parsed.process),
        )

    def dropped(self) -> list[Emit]:
        return dropped(TRUNCATED, self.cut)


def _earliest(faults: list[FaultEvent]) -> FaultEvent:
    return min(faults, key=lambda f: (f.first_seen, f.event_uid))


def kept_faults(faults: dict[str, FaultEvent], rules: Rules) -> tuple[dict[str, FaultEvent], int]:
    """At most `max_faults_per_pod` of a pod's faults, and how many were dropped.

    R6.3 takes, among the faults relevant to an anchor, the earliest of the worst
    severity. So for each severity the earliest fault is kept, and the earliest one still
    inside R5's window before the pod's latest fault (where the next anchor most likely
    falls); then the latest faults fill what is left. Below the limit nothing changes."""
    limit = rules.max_faults_per_pod
    if len(faults) <= limit:
        return faults, 0
    values = list(faults.values())
    recent = max(f.last_seen for f in values) - rules.window
    keep: set[str] = set()
    for severity in sorted(SEVERITY_RANK, key=SEVERITY_RANK.__getitem__, reverse=True):  # worst first
        same = [f for f in values if f.parsed.severity == severity]
        if same:
            keep.add(_earliest(same).event_uid)
            window = [f for f in same if f.last_seen >= recent]
            if window:
                keep.add(_earliest(window).event_uid)
    for fault in sorted(values, key=lambda f: (f.last_seen, f.first_seen, f.event_uid), reverse=True):
        if len(keep) >= limit:
            break
        keep.add(fault.event_uid)
    return {uid: fault for uid, fault in faults.items() if uid in keep}, len(faults) - len(keep)


def restarts_seen(seen: dict[int, datetime], last: int, restarts: int, at: datetime, rules: Rules) -> tuple[dict[int, datetime], int]:
    """R8.1 under R11.5: `seen` (generation -> when restarts first passed it) with the
    generations from `last` to `restarts` (exclusive) seen at `at`, keeping the latest
    `max_generations`; and how many older generations are dropped."""
    first = max(last, restarts - rules.max_generations)
    seen = {g: at for g in range(first, restarts)} | seen
    lost = first - last
    if len(seen) > rules.max_generations:
        oldest = sorted(seen)[-rules.max_generations]
        lost += sum(1 for g in seen if g < oldest)
        seen = {g: t for g, t in seen.items() if g >= oldest}
    return seen, lost
