"""A run's folder as objects that several writers share: conditional writes, from the client or from the cluster.

A run's record, its log parts, its markers and the script's synced files have several writers (the submitting
client, the run-side companion, a supervisor, a client that completes a run it saw end). Each write that must not
lose another's is conditional: ``if_absent`` (create only: S3's ``If-None-Match: *``) or ``if_match`` (replace
only the version read: S3's ``If-Match: <etag>``); a lost race is ``PreconditionFailed``, and the writer reads
again. Local storage gets the same semantics from a lock on the object's folder and an atomic rename.

Importable on the cluster: the stdlib, rtjob_contract and requests at module level only. ``opening.objects_for``
gives a location's objects: ``LocalObjects`` here, or S3's (objects_s3.py, imported only for an s3:// location).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BadInput, StorageError
from ..core.files import write_atomically
from .location import Location
from .stores import open_below

PARTIAL_SUFFIX = ".rtjob-partial"  # a temporary name that listings skip (as pull's partial files)


class PreconditionFailed(Exception):
    """A conditional write lost: the object exists (``if_absent``) or changed since it was read (``if_match``)."""


@dataclass(frozen=True)
class Obj:
    data: bytes
    etag: str


@dataclass(frozen=True)
class Listed:
    rel: str  # relative to the folder, '/'-separated
    size: int
    etag: str | None = None


class Objects(ABC):
    """The objects below one folder (a run's folder), addressed by relative '/'-separated names."""

    location: Location

    @property
    def uri(self) -> str:
        return self.location.uri

    @abstractmethod
    def get(self, rel: str, limit: int) -> Obj | None:
        """The object and its version (None: absent); over ``limit`` bytes is bad input."""

    @abstractmethod
    def put(self, rel: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False) -> str:
        """Write ``data`` whole; returns the new version. Raises PreconditionFailed when the condition fails."""

    @abstractmethod
    def put_file(self, rel: str, path: str, *, if_match: str | None = None, if_absent: bool = False) -> str:
        """Upload a local file (streamed: never read whole into memory); conditions as ``put``."""

    @abstractmethod
    def head(self, rel: str) -> str | None:
        """The object's version, None when absent."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[Listed]:
        """Every object below ``prefix`` (a folder's relative name, '' for all), sorted by name."""

    @abstractmethod
    def stream(self, rel: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        """The object's bytes in chunks (a log part, a whole log): never read whole."""

    def delete(self, rel: str) -> None:
        """Remove one object rtjob itself wrote (a marker a test resets); absent is fine."""
        raise NotImplementedError

    def close(self) -> None:
        return None

    def __enter__(self) -> Objects:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_key(rel: str) -> str:
    """A relative name that cannot leave the folder: no empty, '.' or '..' segment, no leading '/'."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in rel or "\x00" in rel:
        raise BadInput(f"{rel!r}: not a plain relative name inside a run's folder")
    return rel


# ---------------------------------------------------------------------------------------------
# Local storage: the same conditions through a lock on the folder and an atomic rename.


def _version(st: os.stat_result) -> str:
    # The inode changes on every atomic replace, the size and time on any write in place: a version, not a hash.
    return hashlib.sha256(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:32]


def _etag_of(path: str) -> str | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(st.st_mode):
        return None  # a link planted under an object's name is no object: never followed, replaced on a write
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{path}: not a regular file")
    return _version(st)


_ABSENT_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)  # none there, or a link on the way (never followed)
_PERMANENT_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.ELOOP, errno.EEXIST, errno.EISDIR)


class LocalObjects(Objects):
    """A folder's files as objects. Reads go through no symbolic link inside the folder, to a file or a folder,
    wherever it points (``stores.open_below``): a link is no object rtjob or a run wrote, so it reads as absent and
    is listed nowhere."""

    def __init__(self, location: Location) -> None:
        self.location = location

    def _open(self, rel: str, flags: int = os.O_RDONLY) -> int | None:
        """``rel``'s descriptor (None: absent, or a link on the way)."""
        try:
            return open_below(self.location.path, check_key(rel), flags)
        except OSError as exc:
            if exc.errno in _ABSENT_ERRNOS:
                return None
            raise BadInput(f"{self._path(rel)}: cannot read ({exc.strerror or exc})") from None

    def _path(self, rel: str) -> str:
        return os.path.join(self.location.path, *check_key(rel).split("/"))

    def _folders(self, rel: str) -> None:
        folder = self.location.path
        os.makedirs(folder, exist_ok=True)
        for part in rel.split("/")[:-1]:  # made here, never a link followed
            folder = os.path.join(folder, part)
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder)
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                raise BadInput(f"{folder}: not a folder (a symbolic link is not followed)")

    @contextlib.contextmanager
    def _locked(self, rel: str) -> Iterator[str]:
        """The object's path, held under its folder's lock (every conditional writer there takes the same lock)."""
        path = self._path(rel)
        self._folders(rel)
        # The folder that holds it is the lock (flock on a directory): no lock file is left among the run's files.
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield path
        finally:
            os.close(fd)

    def get(self, rel: str, limit: int) -> Obj | None:
        fd = self._open(rel, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO's open must not block
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise BadInput(f"{self._path(rel)}: not a regular file")
            os.set_blocking(fd, True)
            data = f.read(limit + 1)
        if len(data) > limit:
            raise BadInput(f"{self._path(rel)}: larger than {limit} bytes")
        return Obj(data, _version(st))

    def _conditional(self, rel: str, write: object, if_match: str | None, if_absent: bool) -> str:
        try:
            if if_match is None and not if_absent:
                path = self._path(rel)
                self._folders(rel)
                write(path)  # type: ignore[operator]
                return _etag_of(path) or ""
            with self._locked(rel) as path:
                current = _etag_of(path)
                if if_absent and current is not None:
                    raise PreconditionFailed(rel)
                if if_match is not None and current != if_match:
                    raise PreconditionFailed(rel)
                write(path)  # type: ignore[operator]
                return _etag_of(path) or ""
        except OSError as exc:  # a full or failing disk may pass; a folder this user may not write will not
            raise StorageError(f"{self._path(rel)}: cannot write ({exc.strerror or exc})",
                               transient=exc.errno not in _PERMANENT_ERRNOS) from None

    def put(self, rel: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False) -> str:
        def write(path: str) -> None:
            write_atomically(Path(path), data, mode=None, suffix=PARTIAL_SUFFIX)

        return self._conditional(rel, write, if_match, if_absent)

    def put_file(self, rel: str, path: str, *, if_match: str | None = None, if_absent: bool = False) -> str:
        def write(target: str) -> None:
            tmp = f"{target}.{os.urandom(6).hex()}{PARTIAL_SUFFIX}"
            try:
                with open(path, "rb") as src, open(tmp, "xb") as out:
                    while block := src.read(1 << 20):
                        out.write(block)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

        return self._conditional(rel, write, if_match, if_absent)

    def head(self, rel: str) -> str | None:
        fd = self._open(rel, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO's open must not block
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{self._path(rel)}: not a regular file")
        return _version(st)

    def list(self, prefix: str = "") -> list[Listed]:
        """Regular files only: a linked file or folder is not listed, and a linked folder is not entered
        (os.fwalk by descriptors: a folder swapped for a link while it is read is not entered either)."""
        try:
            top = (self._open(prefix, os.O_RDONLY | os.O_DIRECTORY) if prefix
                   else os.open(self.location.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        except (FileNotFoundError, NotADirectoryError):
            return []
        if top is None:
            return []
        out: list[Listed] = []
        try:
            for folder, _dirs, files, dir_fd in os.fwalk(".", dir_fd=top):
                inside = "/".join(p for p in (prefix, *folder.split(os.sep)[1:]) if p)
                for name in files:
                    if name.endswith(PARTIAL_SUFFIX):
                        continue
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        out.append(Listed(f"{inside}/{name}" if inside else name, st.st_size))
        finally:
            os.close(top)
        return sorted(out, key=lambda item: item.rel)

    def stream(self, rel: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        fd = self._open(rel)
        if fd is None:
            raise BadInput(f"{self._path(rel)}: no such object (a symbolic link is not followed)")
        with os.fdopen(fd, "rb") as f:
            while block := f.read(chunk):
                yield block

    def delete(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(rel))
