"""`faultline`: the command line. Each submodule registers its own subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.cli import offline

_MODULES = [offline]
try:  # the streaming commands need Faust and kafka-python; the offline ones never do
    from app.cli import streaming

    _MODULES.append(streaming)
except ImportError as exc:  # pragma: no cover - only on an install without them
    _STREAMING_MISSING = str(exc)
else:
    _STREAMING_MISSING = ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="faultline",
        description="Classify failed GPU training attempts: the hardware or the code?",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
