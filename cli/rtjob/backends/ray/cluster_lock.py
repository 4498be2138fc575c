"""The embedded cluster's lock, and the marker `local down` holds while it stops the cluster.

The lock guards what changes the cluster: starting, growing, stopping. Reusing a cluster that already runs as
asked takes no lock (N submits at once would otherwise ask Ray one after another). What keeps that safe against
`local down`: down marks ``stopping`` under the lock before it touches a process and clears it after, and a
reuse without the lock gives up (and waits on the lock) when the marker is there before or after it asked Ray.
A marker left by a crashed down is cleared by the next holder of the lock; until then every reuse takes the
lock, which is slower, never wrong.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from ...core.errors import Unreachable
from ...jobspec.project import rtjob_home

LOCK_WAIT_S = 900.0  # a busy 16-node `up` (~7 s a node) fits well inside; a holder stuck longer is reported


def state_dir() -> Path:
    return rtjob_home() / "local"


def make_state_dir() -> None:
    state_dir().mkdir(parents=True, exist_ok=True, mode=0o700)


@contextlib.contextmanager
def locked(say: Callable[[str], None]) -> Iterator[None]:
    """Hold the embedded cluster's lock: a second rtjob waits here while a first one starts, grows or
    stops the cluster, then sees the finished result instead of racing it."""
    from filelock import FileLock, Timeout

    make_state_dir()
    lock = FileLock(str(state_dir() / "cluster.lock"), mode=0o600)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say("another rtjob is starting or stopping the embedded cluster; waiting for it")
        try:
            lock.acquire(timeout=LOCK_WAIT_S)
        except Timeout:
            raise Unreachable(f"another rtjob has held {lock.lock_file} for over {LOCK_WAIT_S:.0f}s; "
                              f"is it stuck?") from None
    try:
        yield
    finally:
        lock.release()


class _Stopping:
    """`local down`'s marker (an empty file beside the lock), set and cleared only by a holder of the lock."""

    @staticmethod
    def _path() -> Path:
        return state_dir() / "stopping"

    def under_way(self) -> bool:
        return self._path().exists()

    @contextlib.contextmanager
    def marked(self) -> Iterator[None]:
        self._path().touch(mode=0o600)
        try:
            yield
        finally:
            self._path().unlink(missing_ok=True)

    def clear_stale(self) -> None:
        self._path().unlink(missing_ok=True)


stopping = _Stopping()
