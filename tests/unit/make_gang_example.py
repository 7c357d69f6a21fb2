"""Regenerate examples/traces/jobset-preempt-readmit.jsonl.

    .venv/bin/python -m tests.unit.make_gang_example

A JobSet under Kueue with resume-after-preemption on (annotation): admitted and running,
preempted after an hour (reclamation within the cohort), waits 15 minutes, is re-admitted
in the same attempt, and completes half an hour later. One JSON line per source record,
in the order the bridge observed them, with the bridge's progress (SPEC R12.1) every 15 minutes
on every source topic, as a bridge watching the cluster writes it (its pods' too: idle quota
waits for the pods' progress, R17.3).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import msgspec

from tests.unit.builders import with_progress
from tests.unit.gang_builders import GangWorld

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "jobset-preempt-readmit.jsonl"


def example_world() -> GangWorld:
    world = GangWorld(policy="true").start().pause(3600)
    world.preempt("InCohortReclamation").suspend().jobs_stopped().release_quota().pause(900)
    world.readmit().unsuspend().workers_ready().pods_ready().pause(1800)
    return world.complete().finish()


def render(world: GangWorld) -> str:
    lines = with_progress(world.records, every=timedelta(minutes=15))
    return "".join(msgspec.json.encode(line).decode() + "\n" for line in lines)


def main() -> None:
    EXAMPLE.parent.mkdir(parents=True, exist_ok=True)
    EXAMPLE.write_text(render(example_world()))
    print(f"wrote {EXAMPLE}")


if __name__ == "__main__":
    main()
