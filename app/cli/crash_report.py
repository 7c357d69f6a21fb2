"""A `faultline` process killed by a native fault says where it was."""

from __future__ import annotations

import faulthandler
import sys


def report_native_crashes() -> None:
    """A segmentation fault or abort inside a C extension (RocksDB, msgspec, the Kafka
    client's codecs) ends the process with no Python traceback: a worker's log stops
    mid-stop and nothing names the frame. faulthandler writes every thread's Python stack
    to stderr (a worker's log) before the process dies. A process with no stderr file (closed,
    or replaced by an object with no descriptor) has nowhere to write it: it runs without."""
    stream = sys.stderr
    try:
        stream.fileno()
    except (AttributeError, ValueError, OSError):  # None; io.UnsupportedOperation is both of the others
        return
    faulthandler.enable(file=stream, all_threads=True)
