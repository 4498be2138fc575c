"""The folder a pull writes into: where it is by default, what earlier pulls left there (the manifest of finished
files, leftovers of a killed pull), and the lock that lets one pull at a time write into it. rtjob's own files
there are never written through a symbolic link."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.errors import BadInput
from ..jobspec.project import PULLED_RUNS_DIR
from .pull_plan import PullItem
from .stores import LEGACY_MANIFEST, LOCK, MANIFEST, PARTIAL_SUFFIX, PULL_DIR, create_file


def default_destination(name: str) -> Path:
    """Where a pull lands without --to: ./rtjob-runs/NAME, a folder no working dir upload includes
    (spec.project.PULLED_RUNS_DIR), so pulled checkpoints never ride along with the next submit."""
    return Path.cwd() / PULLED_RUNS_DIR / name


class Manifest:
    """What earlier pulls wrote into DIR: rel → {key, size, etag, mtime_ns}. Appended as files finish."""

    def __init__(self, dest: Path) -> None:
        self.path = dest / MANIFEST
        self.legacy = dest / LEGACY_MANIFEST  # an older pull's, in DIR itself: taken over, removed at close
        self.entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._fh: Any = None
        for path in (self.legacy, self.path):  # the current one wins
            try:
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        try:
                            entry = json.loads(line)
                        except ValueError:
                            continue  # a line cut by a killed pull
                        if isinstance(entry, dict) and isinstance(entry.get("rel"), str):
                            self.entries[entry["rel"]] = entry
            except FileNotFoundError:
                pass

    def matches(self, item: PullItem, st: os.stat_result) -> bool:
        entry = self.entries.get(item.rel)
        return bool(
            entry
            and entry.get("key") == item.file.key
            and entry.get("etag") == item.file.etag
            and entry.get("size") == item.file.size
            and entry.get("mtime_ns") == st.st_mtime_ns
        )

    def record(self, item: PullItem, st: os.stat_result) -> None:
        entry = {"rel": item.rel, "key": item.file.key, "size": item.file.size, "etag": item.file.etag,
                 "mtime_ns": st.st_mtime_ns}
        with self._lock:
            self.entries[item.rel] = entry
            if self._fh is None:
                self._fh = create_file(self.path, append=True)
            self._fh.write((json.dumps(entry) + "\n").encode())
            self._fh.flush()

    def close(self, dest: Path) -> None:
        """Rewrite the manifest with one line per file that is still as recorded."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
            keep = []
            for rel, entry in sorted(self.entries.items()):
                try:
                    st = os.stat(dest / rel)
                except OSError:
                    continue
                if st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns"):
                    keep.append(entry)
            if keep or self.path.exists():
                tmp = self.path.with_name(self.path.name + PARTIAL_SUFFIX)
                with create_file(tmp) as f:
                    f.writelines((json.dumps(entry) + "\n").encode() for entry in keep)
                os.replace(tmp, self.path)
            if self.legacy.is_file() and not self.legacy.is_symlink():
                self.legacy.unlink()


def remove_partials(dest: Path) -> int:
    """Delete leftovers of an interrupted pull (ours: NAME.rtjob-partial, s3transfer's: NAME.rtjob-partial.XXXX);
    a link under such a name is refused (see refuse_link). Call it holding the destination's lock: another
    pull's partial files are not leftovers."""
    removed = 0
    for dirpath, dirnames, filenames in os.walk(dest):
        for name in filenames + dirnames:  # a link to a folder is listed among the folders
            if PARTIAL_SUFFIX not in name:
                continue
            path = Path(dirpath, name)
            refuse_link(path)
            if name in filenames:  # a real folder of that name is not a leftover of ours
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
    return removed


def refuse_link(path: Path) -> None:
    """rtjob writes its own names in DIR (manifest, lock, partial files): a symbolic link planted under one is
    refused with one clear line (the writes themselves use O_NOFOLLOW, so a link planted later fails them)."""
    if path.is_symlink():
        raise BadInput(f"{path} is a symbolic link where rtjob keeps its own file; remove it and pull again "
                       "(rtjob never writes through a link)")


@contextlib.contextmanager
def destination_lock(dest: Path) -> Iterator[None]:
    """One pull at a time per destination: a second one fails at once (and leaves the first one's partial
    files alone) instead of waiting behind it or racing it for the same files. The lock file lives in DIR/.rtjob/
    only while the pull runs: it is removed (still held) when the pull ends, so a pull that waited on the removed
    file finds it is no longer the lock and takes the new one."""
    import fcntl

    folder = dest / PULL_DIR
    refuse_link(folder)
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise BadInput(f"{dest}: cannot make {PULL_DIR}/ for the pull's own files: {exc.strerror or exc}") from None
    path = dest / LOCK
    refuse_link(path)
    for _ in range(3):  # a lock file removed by the pull that held it: open the next one
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise BadInput(f"{dest}: cannot lock the folder for the pull: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BadInput(f"{dest}: another rtjob pull is writing into this folder; wait for it to finish "
                           "or pull somewhere else") from None
        try:
            current = os.stat(path, follow_symlinks=False).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)
    else:
        raise BadInput(f"{dest}: another rtjob pull keeps taking this folder's lock; pull again")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty: no manifest (nothing was pulled)
