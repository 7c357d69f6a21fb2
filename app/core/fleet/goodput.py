"""The fleet stage on goodput (SPEC R17.4): where the GPU-seconds of each UTC hour went, per
cluster, namespace and Kueue LocalQueue, summed over the attempts' own figures (the attempt
stage says what changed for each: `GoodputChange`)."""

from __future__ import annotations

from app.core.base.emit import Emit
from app.core.stages.fleet_inputs import hour_text
from app.core.base.progress import Watermarks
from app.core.base.rules import FleetSettings
from app.core.fleet.states import GoodputStats, horizon
from app.model.facts import GoodputChange
from app.model.fleet_records import GOODPUT, Goodput


def basis(reserved: int, running: int) -> int:
    """R17.2: what goodput is a share of: the reserved GPU-seconds, or the running ones where
    no Workload held quota. A sum over hours, namespaces or queues adds each one's basis."""
    return reserved or running


def share(useful: int, whole: int) -> float | None:
    return round(useful / whole, 4) if whole else None


def goodput_of(useful: int, reserved: int, running: int) -> float | None:
    """R17.2: useful / reserved; useful / running where no Workload held quota; None when
    there is neither."""
    return share(useful, basis(reserved, running))


def on_goodput(state: GoodputStats | None, change: GoodputChange, fleet: FleetSettings, marks: Watermarks) -> tuple[GoodputStats | None, list[Emit]]:
    """One attempt's figures of this hour counted in, changed or out."""
    if state is None:
        now = marks.stream_time(change.cluster)
        if change.attempts < 0 or (now is not None and change.hour < horizon(now, fleet)):
            return None, []  # an hour no longer kept
        state = GoodputStats(change.cluster, change.namespace, change.queue, change.hour)
    # The constructor, not `replace` with ten names: it runs for every change of every attempt.
    state = GoodputStats(
        state.cluster, state.namespace, state.queue, state.hour, max(state.latest, change.observed_at),
        state.attempts + change.attempts, state.reserved + change.reserved, state.running + change.running,
        state.useful + change.useful, state.lost_user + change.lost_user, state.lost_system + change.lost_system,
        state.idle + change.idle, state.wait_seconds + change.wait_seconds, state.waits + change.waits,
    )  # fmt: skip
    key = f"{state.cluster}/{state.namespace}/{state.queue}/{hour_text(state.hour)}"
    useful, reserved, running = state.useful, state.reserved, state.running
    record = Goodput(
        key, state.cluster, state.namespace, state.queue, state.hour, state.attempts, reserved, running, useful,
        state.lost_user, state.lost_system, state.idle, state.wait_seconds, state.waits, goodput_of(useful, reserved, running),
    )  # fmt: skip
    return state, [Emit(GOODPUT, key, record)]
