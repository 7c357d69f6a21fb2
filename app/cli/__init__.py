"""`faultline`: the command line. Each submodule registers its own subcommands.

Every command is registered on every install; one whose extra is missing says which to
install (`app.cli.common.need`), so the parser itself imports no optional library.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from app.cli import bridge, fleet, goodput, mark, offline, streaming
from app.cli.common import CommandError, fail
from app.cli.crash_report import report_native_crashes
from app.cli.heap import settle_heap

_MODULES = [offline, fleet, goodput, streaming, bridge, mark]


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
    if argv is None:  # a process of its own (the `faultline` command), not a caller's
        report_native_crashes()
        settle_heap()
    try:
        return int(args.run(args) or 0)
    except CommandError as exc:
        return fail(str(exc), exc.code)
    except BrokenPipeError:  # `faultline classify T | head`: the reader stopped reading, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit must not fail either
        return 0


if __name__ == "__main__":
    sys.exit(main())
