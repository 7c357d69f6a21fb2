"""The state folder of `faultline run --state DIR`, one per cluster:

    DIR/lock            held (flock) while a run uses the folder; holds its pid
    DIR/positions.json  the cluster's name and each watch's position (app/bridge/positions.py)
    DIR/delivered       the index of the last log line whose outputs were all printed
    DIR/log/            the event log (app/run/event_log.py)

Positions are replaced atomically (a new file, fsynced, renamed), and only after the log
was synced past them (the bridge flushes its sink first): a position never runs ahead of
the log. `delivered` is rewritten in place without fsync after each line whose outputs
were printed: a restart prints again the outputs of the lines after it (at most the last
one, cut short by a kill), never those before.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

from app.bridge.positions import position_key
from app.bridge.records import BridgePosition
from app.run.event_log import LogError, sync_folder

log = logging.getLogger("faultline.run")

POSITIONS = "positions.json"
DELIVERED = "delivered"
LOCK = "lock"
LOG = "log"


class StateError(Exception):
    """The state folder cannot be used (the message says why and what to do)."""


class SavedPositions(msgspec.Struct, kw_only=True):
    schema: str = "faultline.RunPositions/v1"
    cluster: str
    positions: dict[str, BridgePosition] = {}  # position_key -> position


_decoder = msgspec.json.Decoder(SavedPositions)
_encoder = msgspec.json.Encoder()


def default_state_dir(cluster: str, env: Mapping[str, str] = os.environ) -> Path:
    """$XDG_DATA_HOME/faultline/run/<cluster>, else ~/.local/share/faultline/run/<cluster>."""
    if cluster in (".", ".."):
        raise StateError(f"the cluster name {cluster!r} cannot name a state folder: give --state DIR")
    data = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "share")
    return Path(data) / "faultline" / "run" / cluster


class FilePositions:
    """The bridge's PositionStore in DIR/positions.json."""

    def __init__(self, folder: Path, saved: SavedPositions) -> None:
        self.where: str | None = str(folder)
        self._path = folder / POSITIONS
        self._saved = saved

    def load(self, cluster: str) -> dict[str, BridgePosition]:
        return {p.kind: p for p in self._saved.positions.values() if p.cluster == cluster}

    def save(self, positions: Iterable[BridgePosition]) -> None:
        for position in positions:
            self._saved.positions[position_key(position.cluster, position.kind)] = position
        try:
            write_atomically(self._path, _encoder.encode(self._saved))
        except OSError as exc:
            raise LogError(f"cannot save the watch positions in {self._path}: {exc}") from None


class Delivered:
    """DIR/delivered: the index of the last log line whose outputs were all printed."""

    def __init__(self, folder: Path) -> None:
        self._fd = os.open(folder / DELIVERED, os.O_RDWR | os.O_CREAT, 0o644)
        text = os.pread(self._fd, 32, 0).decode("ascii", "replace").strip()
        self.index = int(text) if text.isdigit() else -1

    def mark(self, index: int) -> None:
        try:
            os.pwrite(self._fd, b"%020d\n" % index, 0)  # fixed width: rewritten in place
        except OSError as exc:
            raise LogError(f"cannot write {DELIVERED} in the state folder: {exc}") from None
        self.index = index

    def close(self) -> None:
        os.close(self._fd)


class RunState:
    """The folder, locked for this process until `close()`."""

    def __init__(self, folder: Path, cluster: str) -> None:
        self.folder = folder
        self.log_folder = folder / LOG
        taken = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        if taken is not None:
            # The example is beside the file, never under it (or under any other file).
            beside = taken.with_name(taken.name + ".state")
            example = beside if taken == folder else beside / folder.relative_to(taken)
            raise StateError(
                f"the state folder {folder} cannot be created: {taken} is a file, not a folder. Give --state a folder "
                f"(it is created if missing), e.g. {example}" + ("" if taken == folder else f", or move {taken} away")
            )
        try:
            # Private: the log holds objects as the API server served them (pod specs, with
            # any environment values written into them).
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create the state folder {folder}: {exc}; give --state a folder you may write") from None
        self._lock = _lock(folder)
        try:
            self.fresh = not (folder / POSITIONS).exists() and not any(self.log_folder.glob("*.jsonl"))
            saved = self._read_positions(cluster)
            self.positions = FilePositions(folder, saved)
            if self.fresh:  # the folder now says whose it is
                self.positions.save([])
            self.delivered = Delivered(folder)
        except BaseException:
            os.close(self._lock)
            raise

    def _read_positions(self, cluster: str) -> SavedPositions:
        path = self.folder / POSITIONS
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return SavedPositions(cluster=cluster)
        except OSError as exc:
            raise StateError(f"cannot read {path}: {exc}") from None
        try:
            saved = _decoder.decode(data)
        except msgspec.DecodeError as exc:
            log.warning("%s is unreadable (%s): every kind is listed from the start (changes already in the log are not fed twice)", path, exc)
            return SavedPositions(cluster=cluster)
        if saved.cluster != cluster:
            raise StateError(
                f"the state folder {self.folder} holds the state of cluster {saved.cluster!r}, not {cluster!r}: "
                "give --state another folder (the default is one per cluster)"
            )
        return saved

    def close(self) -> None:
        self.delivered.close()
        os.close(self._lock)  # releases the lock


def _lock(folder: Path) -> int:
    path = folder / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StateError(f"cannot open {path}: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise StateError(
            f"the state folder {folder} is in use by another `faultline run` (pid {holder}): stop that one first, "
            "or give this one another --state"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: a reader (or a restart after a crash) sees the old
    content or the new, never a mix."""
    temporary = path.with_name(path.name + ".new")
    with temporary.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    sync_folder(path.parent)
