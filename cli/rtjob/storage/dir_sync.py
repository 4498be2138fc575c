"""RTJOB_RUN_DIR → RTJOB_RUN_URI: the script's local run folder, copied to the run's storage while the run goes.

With remote storage RTJOB_RUN_DIR is a local folder on the driver's node that the script can ``open()``; the
companion calls ``DirSync.scan`` every few seconds and once more (``final=True``) when the script has ended.

- A file is uploaded once it is *settled*: its (size, mtime_ns) unchanged for ``settle_s`` and no process (of
  those this user can read in /proc) holding it open for writing. After the upload its (size, mtime_ns) is read
  again: a file that changed meanwhile is uploaded again at a later scan.
- A live text file that keeps changing (a ``metrics.jsonl`` appended to every few seconds, a ``metrics.json``
  rewritten each epoch, a log the script keeps open; LIVE_SUFFIXES, at most LIVE_MAX bytes) never settles: once it
  has differed from its uploaded copy for ``max_wait_s`` it is uploaded as it is at that moment, settled or not, open
  or not, and again ``max_wait_s`` after it changes again. Such a copy is a snapshot: a JSON Lines reader skips a last
  line that is not whole yet. Other files (checkpoints, weights) still wait until they are settled and closed.
- An object is overwritten only if an attempt of this run wrote it (storage/run_files.py: the rule lives in the
  run's storage): ``adopt`` takes the node folder as it was seeded from the run's storage, the files earlier
  attempts synced (replaced ``if_match`` on the version an attempt wrote); any other name is uploaded ``if_absent`` (an object that appeared meanwhile, written by someone else,
  is left alone: one line, once), a later one ``if_match`` on the version this DirSync wrote (a lost condition:
  someone else wrote it since; left alone, one line). After a pass that uploaded something, the attempt's
  manifest (``rtjob-sync/<attempt id>.json``) names every version the run holds as its own.
- Nothing is ever deleted; symbolic links are not followed (neither files nor folders); names ending in
  objects.PARTIAL_SUFFIX (rtjob's own temporary names) are skipped.
- Cheap: a scan of an unchanged tree is one stat per file, no file is read; /proc is read only when some file
  looks settled and is not synced yet, once per scan.
- A failing upload is one line through ``say`` (again only when its wording changes) and is retried at the next
  scan, however often it failed: ``scan`` never raises, except KeyboardInterrupt and SystemExit.
- A write whose answer was lost (a connection cut after S3 stored it; a client's own retry then meets its own
  object) is not mistaken for someone else's: when a condition fails, the object holding exactly this file's bytes
  (its ETag is the file's MD5, as S3 gives a single PUT) is this sync's, and is taken as synced.
- ``not_stored`` counts what the run's storage lacks; ``adopt_stored`` lets a later process (`rtjob sync`, a retry
  that finds a kept node folder) carry on where the companion stopped.

Importable on the cluster: the stdlib and rtjob's storage and core modules at module level.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import rtjob_contract as contract

from ..core.errors import one_line
from .objects import PARTIAL_SUFFIX, Objects, PreconditionFailed
from .run_files import Seeded, bare, write_manifest, written_by_run

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR  # an fd open for writing (fdinfo's flags: octal; 01 and 02)

State = tuple[int, int]  # (size, mtime_ns)
LIVE_SUFFIXES = (".jsonl", ".json", ".csv", ".txt", ".log")  # text a script appends to or rewrites while it runs
LIVE_MAX = 16 * 1024 * 1024
MANIFEST_KEY = contract.RUN_SYNC_DIR  # what a failure of the manifest's write is kept under


def open_for_writing(proc: str = "/proc") -> set[tuple[int, int]]:
    """The (st_dev, st_ino) of every file that a process this user can read holds open for writing: each
    /proc/<pid>/fd/<fd> link to a path whose /proc/<pid>/fdinfo/<fd> ``flags:`` has O_WRONLY or O_RDWR.
    Processes that cannot be read (another user's, gone meanwhile) are skipped."""
    held: set[tuple[int, int]] = set()
    try:
        pids = [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return held
    for pid in pids:
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # another user's process, or gone
            continue
        for fd in fds:
            try:
                if not os.readlink(f"{fd_dir}/{fd}").startswith("/"):
                    continue  # a pipe, a socket, an anonymous inode
                with open(f"{proc}/{pid}/fdinfo/{fd}", encoding="ascii") as f:
                    flags = next((int(line.split()[1], 8) for line in f if line.startswith("flags:")), 0)
                if flags & _WRITE_FLAGS:
                    st = os.stat(f"{fd_dir}/{fd}")  # the open file itself (the link's target)
                    held.add((st.st_dev, st.st_ino))
            except (OSError, ValueError, IndexError):
                continue  # closed meanwhile, or unreadable
    return held


def held_for_writing(path: str) -> bool:
    """Whether some process this user can read holds the file at ``path`` open for writing."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino) in open_for_writing()


@dataclass
class _Seen:
    state: State
    since: float  # monotonic time the file was first seen in this state


@dataclass
class _Synced:
    state: State | None  # what was uploaded (None: the file changed during the upload)
    etag: str  # the version of the run's it overwrites: one this or an earlier attempt wrote


class DirSync:
    """Copies the files of ``local_dir`` to ``objects`` (the run's folder), by relative name, one scan at a time."""

    def __init__(self, local_dir: str, objects: Objects, *, settle_s: float = 2.0, max_wait_s: float = 4.0,
                 say: Callable[[str], None], attempt_id: str | None = None) -> None:
        self.local_dir = os.path.abspath(local_dir)
        self.objects = objects
        self.settle_s = settle_s
        self.max_wait_s = max_wait_s
        self._pending: dict[str, float] = {}  # rel → monotonic time it was first seen differing from its upload
        self.say = say
        self.attempt_id = attempt_id  # names this attempt's manifest (None: none is written)
        self._seen: dict[str, _Seen] = {}
        self._synced: dict[str, _Synced] = {}
        self._left: set[str] = set()  # objects someone else wrote: never written, said once
        self._failing: dict[str, str] = {}  # rel → the last failure said
        self._manifest_due = False
        self.notes: list[str] = []  # the lines said about objects left as they are (the record keeps them)
        self.fault: Exception | None = None  # the last upload's failure (None: the last upload went through)

    def adopt(self, seeded: Seeded) -> None:
        """The folder as ``run_files.seed`` filled it: the run's files are synced at their versions (a change
        replaces them). The folder's other objects were not copied: a file of that name is uploaded only if absent."""
        for rel, (state, etag) in seeded.ours.items():
            self._synced[rel] = _Synced(state, etag)

    def adopt_stored(self) -> None:
        """The run's files as its storage holds them now (every attempt's manifest): a local file whose object is
        one the run wrote is replaced ``if_match`` (or taken as synced when it holds the same bytes), any other name
        uploaded only if absent. For a process that takes over a node folder the companion left."""
        ours = written_by_run(self.objects)
        for listed in self.objects.list():
            if listed.rel in ours and listed.etag and bare(listed.etag) in {bare(e) for e in ours[listed.rel]}:
                self._synced[listed.rel] = _Synced(None, listed.etag)

    @property
    def complete(self) -> bool:
        """Everything seen is in storage (or left there on purpose) and the manifest says so: the node's copy is
        no longer needed."""
        return not self._failing and not self._manifest_due

    def not_stored(self) -> list[str]:
        """The objects (relative names) the run's storage lacks: files whose latest content is not there yet, and
        this attempt's manifest when it is due, so that a sync that is not ``complete`` never counts nothing."""
        waiting = [rel for rel, _path, st in self._files() if rel not in self._left
                   and (rel not in self._synced or self._synced[rel].state != (st.st_size, st.st_mtime_ns))]
        if self._manifest_due and self.attempt_id is not None:
            waiting.append(contract.sync_manifest_name(self.attempt_id))
        return sorted(waiting)

    def scan(self, final: bool = False) -> int:
        """One pass; returns the number of files uploaded. ``final``: the script has ended, so every file not
        yet synced or changed since is uploaded now, settled or not."""
        now = time.monotonic()
        held: set[tuple[int, int]] | None = None  # read from /proc once, when first needed
        uploaded = 0
        present: set[str] = set()
        for rel, path, st in self._files():
            present.add(rel)
            if rel in self._left:
                continue
            state = (st.st_size, st.st_mtime_ns)
            synced = self._synced.get(rel)
            if synced is not None and synced.state == state:
                continue
            seen = self._seen.get(rel)
            if seen is None or seen.state != state:
                self._seen[rel] = seen = _Seen(state, now)
            waited = now - self._pending.setdefault(rel, now)
            live = rel.endswith(LIVE_SUFFIXES) and st.st_size <= LIVE_MAX
            if not final and not (live and waited >= self.max_wait_s):
                if now - seen.since < self.settle_s:
                    continue
                if held is None:
                    held = open_for_writing()
                if (st.st_dev, st.st_ino) in held:
                    continue
            if self._upload(rel, path, state):
                uploaded += 1
                del self._pending[rel]
        for gone in set(self._seen) - present:  # removed locally: forgotten here, never deleted there
            del self._seen[gone]
            self._pending.pop(gone, None)
        self._manifest_due = self._manifest_due or uploaded > 0
        if self._manifest_due and self.attempt_id is not None:
            self._write_manifest()
        return uploaded

    def _write_manifest(self) -> None:
        assert self.attempt_id is not None
        written = {rel: synced.etag for rel, synced in self._synced.items() if synced.etag is not None}
        try:
            write_manifest(self.objects, self.attempt_id, written)
        except Exception as exc:  # noqa: BLE001 - one line, written again after the next pass
            self._fail(MANIFEST_KEY, f"the sync manifest was not written ({one_line(exc)})")
            return
        self._failing.pop(MANIFEST_KEY, None)
        self._manifest_due = False

    def _files(self) -> Iterator[tuple[str, str, os.stat_result]]:
        """(relative name, path, lstat) of every regular file below the folder; links are not followed."""
        stack = [self.local_dir]
        while stack:
            folder = stack.pop()
            try:
                with os.scandir(folder) as entries:
                    items = list(entries)
            except FileNotFoundError:
                continue
            except OSError as exc:
                self._fail(os.path.relpath(folder, self.local_dir), f"cannot read the folder ({exc.strerror})")
                continue
            for entry in items:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # removed meanwhile
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                elif stat.S_ISREG(st.st_mode) and not entry.name.endswith(PARTIAL_SUFFIX):
                    rel = os.path.relpath(entry.path, self.local_dir).replace(os.sep, "/")
                    yield rel, entry.path, st

    def _upload(self, rel: str, path: str, state: State) -> bool:
        synced = self._synced.get(rel)
        try:
            if synced is None:
                etag = self.objects.put_file(rel, path, if_absent=True)
            else:
                etag = self.objects.put_file(rel, path, if_match=synced.etag)
        except PreconditionFailed:
            held = self._holds_this_file(rel, path, state)
            if held is None:
                self._leave(rel, "is already there, not written by any attempt of this run" if synced is None else
                            "was changed by someone else since this run's sync wrote it")
                return False
            etag = held
        except Exception as exc:  # an S3 or file error: one line, tried again at the next scan
            if not os.path.lexists(path):
                return False  # removed before it could be read: nothing to say
            self.fault = exc
            self._fail(rel, one_line(exc))
            return False
        self.fault = None
        self._failing.pop(rel, None)
        try:
            st = os.stat(path, follow_symlinks=False)
            after: State | None = (st.st_size, st.st_mtime_ns)
        except OSError:
            after = None
        self._synced[rel] = _Synced(state if after == state else None, etag)
        return True

    def _holds_this_file(self, rel: str, path: str, state: State) -> str | None:
        """The object's version when it holds exactly this file's bytes (a write of ours whose answer was lost),
        else None. S3 gives a single PUT the MD5 of its bytes as its ETag; local storage's versions are no hash, and
        there no answer is lost."""
        try:
            current = self.objects.head(rel)
            if current is None or "-" in bare(current):
                return None
            digest = hashlib.md5(usedforsecurity=False)
            with open(path, "rb") as f:
                while block := f.read(1 << 20):
                    digest.update(block)
            st = os.stat(path, follow_symlinks=False)
        except Exception:  # noqa: BLE001 - unknown: the object is left as it is (the safe answer)
            return None
        if (st.st_size, st.st_mtime_ns) != state or digest.hexdigest() != bare(current):
            return None
        return current

    def _leave(self, rel: str, why: str) -> None:
        self._left.add(rel)
        line = f"{self._where(rel)} {why}: left as it is (not overwritten)"
        self.notes.append(line)
        self.say(line)

    def _fail(self, rel: str, message: str) -> None:
        if self._failing.get(rel) != message:
            self._failing[rel] = message
            self.say(f"{self._where(rel)}: not copied yet ({message}); tried again")

    def _where(self, rel: str) -> str:
        return f"{self.objects.uri.rstrip('/')}/{rel}"
