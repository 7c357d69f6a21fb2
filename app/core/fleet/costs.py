"""What failures cost, as the fleet views show it (issue 30): the GPU-seconds failures burned
over the history kept, by code, by namespace and by node, by the kind of their verdicts.
Assembled at read time from the read model (`read_model.FleetState`)."""

from __future__ import annotations

import msgspec

from app.core.fleet.read_model import FleetState


class CostRow(msgspec.Struct, frozen=True):
    """GPU-seconds that failures burned over the history kept (issue 30), for one code, one
    namespace or one node, by the kind of their current verdicts."""

    key: str  # the code, `<cluster>/<namespace>` or `<cluster>/<node>`
    failures: int
    system_failures: int
    gpu_seconds: int
    user_gpu_seconds: int
    system_gpu_seconds: int
    gpu_seconds_unknown: int = 0  # failures whose GPU-seconds are unknown (never on a node: not attributed)


class GpuCost(msgspec.Struct, frozen=True):
    """What failures cost (issue 30): GPU-seconds by code, by namespace and by node, most first."""

    by_code: list[CostRow] = []
    by_namespace: list[CostRow] = []
    by_node: list[CostRow] = []


def _cost_rows(parts: dict[str, list[int]]) -> list[CostRow]:
    """[failures, system failures, user GPU-s, system GPU-s, unknown] per key -> rows, most GPU-seconds first."""
    rows = [CostRow(key, f, sf, us + ss, us, ss, unknown) for key, (f, sf, us, ss, unknown) in parts.items() if f > 0]
    return sorted(rows, key=lambda r: (-r.gpu_seconds, -r.failures, r.key))


def _add_cost(parts: dict[str, list[int]], key: str, failures: int, system: bool, gpu_seconds: int, unknown: int) -> None:
    row = parts.setdefault(key, [0, 0, 0, 0, 0])
    row[0] += failures
    row[1] += failures if system else 0
    row[2 + system] += gpu_seconds
    row[4] += unknown


def cost_by_code(state: FleetState) -> list[CostRow]:
    """GPU-seconds failures burned by their verdicts' code (over every cluster and namespace)."""
    parts: dict[str, list[int]] = {}
    for r in state.failures.values():
        _add_cost(parts, r.code, r.failures, r.kind == "SYSTEM", r.gpu_seconds, r.gpu_seconds_unknown)
    return _cost_rows(parts)


def cost_by_namespace(state: FleetState) -> list[CostRow]:
    parts: dict[str, list[int]] = {}
    for r in state.failures.values():
        _add_cost(parts, f"{r.cluster}/{r.namespace}", r.failures, r.kind == "SYSTEM", r.gpu_seconds, r.gpu_seconds_unknown)
    return _cost_rows(parts)


def cost_by_node(state: FleetState) -> list[CostRow]:
    """GPU-seconds failures burned on each node, by the node their pods ran on."""
    parts: dict[str, list[int]] = {}
    for r in state.gpu_time.values():
        row = parts.setdefault(f"{r.cluster}/{r.node}", [0, 0, 0, 0, 0])
        row[0] += r.failures
        row[1] += r.system_failures
        row[2] += r.user_gpu_seconds
        row[3] += r.system_gpu_seconds
    return _cost_rows(parts)


def gpu_cost(state: FleetState, top: int | None = None) -> GpuCost:
    return GpuCost(cost_by_code(state)[:top], cost_by_namespace(state)[:top], cost_by_node(state)[:top])
