"""Regenerate examples/traces/ from the attempt stories: `python -m tests.unit.make_examples`."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.unit import builders
from tests.unit.stories import STORIES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"

# file name -> the stories it holds, in order
TRACES = {
    "mpijob-xid63.jsonl": ["mpijob-row-remap"],
    "pod-task-xid74.jsonl": ["pod-task-nvlink"],
    "jobset-restart-xid94.jsonl": ["jobset-restart-complete"],
    "mixed.jsonl": list(STORIES),
}


def trace(stories: list[str]) -> bytes:
    builders.reset_ids()
    records = []
    for i, name in enumerate(stories):
        records += STORIES[name](t0=builders.T0 + timedelta(minutes=11 * i))
    # The bridge publishes in observation order, with its progress (SPEC R12.1).
    records.sort(key=lambda r: r["value"]["observed_at"])
    return builders.trace_bytes(builders.with_progress(records, every=timedelta(minutes=15)))


def main() -> None:
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    for name, stories in TRACES.items():
        (EXAMPLES / name).write_bytes(trace(stories))
        print(EXAMPLES / name)


if __name__ == "__main__":
    main()
