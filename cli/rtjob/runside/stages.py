"""The run side's stages that carry data to the run's storage while the run goes: the log as parts (logparts.py),
the live rows into RTJOB_RUN_DIR (live_rows.py) and the folder's sync (storage/dir_sync.py). Each is flushed on
its own (one stage's fault never starves another), each keeps what it could not store and tries it again at the
next flush, and together they say whether everything is stored (``stored``) and what is not (``not_stored``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..storage.dir_sync import DirSync
    from .live_rows import LiveRows
    from .logparts import LogParts
    from .tracking.mirrors import Mirrors

Guard = Callable[[str, Callable[[], object]], None]


@dataclass
class Stages:
    parts: LogParts | None = None
    rows: LiveRows | None = None
    sync: DirSync | None = None
    tracker: Mirrors | None = None  # the run mirrored to MLflow, W&B (tracking/): never part of `stored`

    def due(self, moment: float) -> bool:
        """New log output worth a part now, before the regular flush."""
        return self.parts is not None and self.parts.due(moment)

    def flush_log(self, guard: Guard) -> None:
        if self.parts is not None:
            guard("the log", self.parts.flush)

    def flush(self, guard: Guard, final: bool = False) -> None:
        """One pass of every stage (``final``: the script has ended, so everything goes, settled or not)."""
        parts, rows, sync = self.parts, self.rows, self.sync
        if parts is not None:
            guard("the log", lambda: parts.flush(final=final))
            if final and parts.unread() == 0:
                guard("the attempt's whole log", parts.write_whole)
        if rows is not None:
            guard("the live rows", lambda: rows.tick(final=final))
        if sync is not None:
            guard("the run's folder", lambda: sync.scan(final=final))
        for name, tracker in self.tracker.each() if self.tracker is not None else []:  # after the rows: theirs too
            guard(name, lambda one=tracker: one.tick(final=final))  # type: ignore[misc]

    @property
    def files_pending(self) -> bool:
        """Whether the folder's sync holds files the run's storage lacks (the node folder is then kept)."""
        return self.sync is not None and not self.sync.complete

    @property
    def stored(self) -> bool:
        """Everything the stages carry is in the run's storage (after a final flush)."""
        return (self.parts is None or self.parts.stored) and (self.sync is None or self.sync.complete)

    def refused(self) -> str | None:
        """A stage's last fault when it is one that will not pass (no bucket, denied, a folder that cannot be
        written): waiting for storage is then pointless. None: none, or they may pass."""
        from ..core.errors import StorageError

        for stage in (self.parts, self.sync):
            fault = stage.fault if stage is not None else None
            if isinstance(fault, StorageError) and not fault.transient:
                return fault.message
        return None

    def not_stored(self) -> list[str]:
        """What the run's storage lacks: the folder's files by name, and the log."""
        missing = list(self.sync.not_stored()) if self.sync is not None else []
        if self.parts is not None and not self.parts.stored:
            missing.append("(the driver log)")
        return missing

    def close(self) -> None:
        if self.parts is not None:
            self.parts.close()


def wait_for(done: Callable[[], bool], deadline: float, stop: Callable[[], bool],
             step: Callable[[], object], delays: Callable[[], float]) -> bool:
    """``step`` then ``done()`` until it is True (True), the ``deadline`` (monotonic) passes or ``stop()`` (False),
    sleeping ``delays()`` between tries."""
    while True:
        step()
        if done():
            return True
        left = deadline - time.monotonic()
        if left <= 0 or stop():
            return False
        end = time.monotonic() + min(delays(), left)
        while time.monotonic() < end and not stop():  # a SIGTERM ends the wait within 0.2 s
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
