"""`faultline`: the command line. Each submodule registers its own subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.cli import fleet, offline

_MODULES = [offline, fleet]
try:  # the streaming and bridge commands need Faust, kafka-python and kubernetes
    from app.cli import bridge, streaming

    _MODULES += [streaming, bridge]
except ImportError as exc:  # pragma: no cover - only on an install without the extras
    _MISSING_EXTRAS = f"{exc}: install faultline[stream,bridge] for the streaming and bridge commands"
else:
    _MISSING_EXTRAS = ""


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
