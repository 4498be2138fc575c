"""Run storage: where a run's checkpoints and metrics live (``s3://bucket/prefix`` or a local folder), as a ``Store``
(list it, read small files, download files, keep rtjob's own small files), and the safe file opens every store
and the pull use.

Independent of the backend and of Ray: the commands turn a run id into its storage URI (runs/history/sources.py), then
everything here works on the URI alone. ``LocalStore`` is here; ``S3Store`` (s3store.py) is imported only when an
S3 location is opened (opening.open_store picks the store), and botocore only when it is needed (the `s3` extra).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import BadInput, RtjobError
from ..core.files import write_atomically
from .location import Location

# rtjob pull's own bookkeeping in a destination folder (never taken from storage): one hidden folder that keeps the
# resumable manifest, and the lock while a pull runs (removed when it ends); partial files beside the real names.
PARTIAL_SUFFIX = ".rtjob-partial"
PULL_DIR = ".rtjob"
MANIFEST = f"{PULL_DIR}/pull.jsonl"
LOCK = f"{PULL_DIR}/pull.lock"
LEGACY_MANIFEST = ".rtjob-pull.jsonl"  # where pulls before the hidden folder kept it: read once, then removed
LEGACY_NAMES = (LEGACY_MANIFEST, ".rtjob-pull.lock")


def is_bookkeeping(name: str) -> bool:
    """One of rtjob pull's own names, a path segment (case-insensitively: on macOS ``.RTJOB`` is the folder)."""
    name = name.casefold()
    return name == PULL_DIR or name in LEGACY_NAMES or PARTIAL_SUFFIX in name


def create_file(path: Path | str, append: bool = False) -> BinaryIO:
    """Open a file rtjob writes in a destination, never through a symbolic link planted under its name
    (O_NOFOLLOW: the open fails with ELOOP instead of writing wherever the link points)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o666), "ab" if append else "wb")


def open_below(root: str, rel: str, flags: int = os.O_RDONLY) -> int:
    """A file descriptor of ``rel`` ('/'-separated) inside the folder ``root``, through no symbolic link inside
    ``root``: each folder is opened from the one above it with O_NOFOLLOW, so a linked folder (``samples/linkdir ->
    /etc``) stops the walk as a linked file does (OSError ENOTDIR or ELOOP), wherever the link points. ``root``
    itself is the caller's own path (a run's folder, as the user named it)."""
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise OSError(errno.EINVAL, "not a plain relative name", rel)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)


def open_regular(path: Path | str, follow: bool = False, root: str | None = None) -> BinaryIO:
    """Open a file to read it only if it is a regular file: O_NONBLOCK so that a FIFO cannot block the open
    (a FIFO swapped in after the listing would hang the pull), O_NOFOLLOW unless links are welcome. With ``root``:
    ``path`` is a '/'-separated name inside that folder, opened through no link at all (``open_below``)."""
    flags = os.O_RDONLY | os.O_NONBLOCK
    fd = open_below(root, str(path), flags) if root is not None else os.open(path, flags | (0 if follow else os.O_NOFOLLOW))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_capped(stream: Any, limit: int, where: str) -> bytes:
    """At most ``limit`` bytes of a stream; more is bad input (a hostile file must not fill memory)."""
    data = bytes(stream.read(limit + 1))
    if len(data) > limit:
        raise too_large(where, limit)
    return data


class TooLarge(BadInput):
    """A file larger than rtjob reads (the caller says what it was for)."""


def too_large(where: str, limit: int) -> TooLarge:
    return TooLarge(f"{where}: larger than {limit // (1024 * 1024)} MiB")


# What a special file in local storage is, for the report (it is never opened).
_SPECIAL_KINDS = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                  (stat.S_ISBLK, "block device"))


def special_kind(mode: int) -> str:
    return next((kind for test, kind in _SPECIAL_KINDS if test(mode)), "special file")


# ---------------------------------------------------------------------------------------------
# Listing and reading


@dataclass(frozen=True)
class RemoteFile:
    key: str  # the S3 key, or the source file's absolute path
    rel: str  # the path under the location, '/'-separated (exactly as stored: may be hostile)
    size: int
    etag: str  # the S3 ETag (quoted, as listed); local: "<size>-<mtime_ns>"


ProgressFn = Callable[[int], None]
DoneFn = Callable[["RemoteFile", Path, "BaseException | None"], None]


class Store(ABC):
    """One storage location: list it, read small files, download files to temporary paths."""

    location: Location
    refused: list[tuple[str, str]]  # (key, reason) found while listing (e.g. symlinks)
    special: list[tuple[str, str]]  # (key, kind) of FIFOs, sockets, devices in local storage: skipped, never opened
    engine = "copy"  # what moved the bytes: "copy" (local), "obstore", "crt" or "botocore" (S3)
    endpoint: str | None = None  # an S3-compatible server's URL (None: AWS, or not S3)

    def describe(self) -> str:
        return self.location.uri

    @abstractmethod
    def list_files(self) -> list[RemoteFile]: ...

    @abstractmethod
    def read(self, item: RemoteFile, limit: int) -> bytes:
        """A small file's bytes; more than ``limit`` is bad input."""

    @abstractmethod
    def download(self, jobs: list[tuple[RemoteFile, Path]], on_progress: ProgressFn | None,
                 on_done: DoneFn) -> None:
        """Write each file to its path (a temporary name); ``on_done`` once per file, from any thread;
        ``on_progress`` (if any) with each number of bytes written."""

    @abstractmethod
    def same_content(self, item: RemoteFile, path: Path) -> bool:
        """Whether the local file at ``path`` (of the listed size) holds what ``item`` holds: a file a pull finds
        in its destination without a manifest entry is trusted only then."""

    def translate_error(self, exc: Exception) -> RtjobError | None:
        """An error that escaped ``download``, as one line for the user (None: not this store's to word)."""
        return None

    # Small files rtjob itself keeps in a run's folder (its record, archived logs), by '/'-separated path.

    @abstractmethod
    def put_bytes(self, rel: str, data: bytes) -> None:
        """Write (or replace) the file at ``rel`` whole: a reader sees the old file or the new one, never half."""

    @abstractmethod
    def get_bytes(self, rel: str, limit: int) -> bytes | None:
        """The file at ``rel`` (None: there is none); more than ``limit`` bytes is bad input."""

    @abstractmethod
    def list_dirs(self, rel: str = "") -> list[str]:
        """The names of the folders directly under ``rel`` (S3: one delimiter listing, never every key below)."""

    def close(self) -> None:
        return None


def check_rel(rel: str) -> str:
    """A path rtjob names inside a location: '/'-separated plain segments (no '', '.', '..', backslash)."""
    parts = rel.split("/")
    if any(part in ("", ".", "..") or "\\" in part or "\0" in part for part in parts):
        raise BadInput(f"{rel!r}: not a plain relative path in storage")
    return rel


class LocalStore(Store):
    def __init__(self, location: Location, concurrency: int = 8) -> None:
        self.location = location
        self.concurrency = max(1, min(concurrency, 16))
        self.refused = []
        self.special = []

    def list_files(self) -> list[RemoteFile]:
        root = self.location.path
        if not os.path.isdir(root):
            raise BadInput(f"{root}: no such folder" if not os.path.exists(root) else f"{root}: not a folder")
        files: list[RemoteFile] = []
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            for name in list(dirnames):
                if is_bookkeeping(name):
                    dirnames.remove(name)  # a folder rtjob pulled into: its bookkeeping is not part of the run
                elif os.path.islink(os.path.join(dirpath, name)):
                    dirnames.remove(name)  # never follow a link out of the run's folder
                    self.refused.append((_join(rel_dir, name) + "/", "symbolic link"))
            for name in filenames:
                if is_bookkeeping(name):
                    continue  # a folder rtjob pulled into: its bookkeeping is not part of the run
                path = os.path.join(dirpath, name)
                rel = _join(rel_dir, name)
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    self.refused.append((rel, "symbolic link"))
                elif not stat.S_ISREG(st.st_mode):
                    self.special.append((rel, special_kind(st.st_mode)))  # opening a FIFO would block
                else:
                    files.append(RemoteFile(path, rel, st.st_size, f"{st.st_size}-{st.st_mtime_ns}"))
        return files

    def read(self, item: RemoteFile, limit: int) -> bytes:
        with open_regular(item.rel, root=self.location.path) as f:
            return read_capped(f, limit, item.key)

    def download(self, jobs: list[tuple[RemoteFile, Path]], on_progress: ProgressFn | None,
                 on_done: DoneFn) -> None:
        from concurrent.futures import ThreadPoolExecutor

        progress = on_progress or _ignore

        def copy(item: RemoteFile, target: Path) -> None:
            error: BaseException | None = None
            try:
                with open_regular(item.rel, root=self.location.path) as src, create_file(target) as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                        progress(len(chunk))
            except OSError as exc:
                error = exc
            on_done(item, target, error)

        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="rtjob-copy") as pool:
            for future in [pool.submit(copy, item, target) for item, target in jobs]:
                future.result()

    def same_content(self, item: RemoteFile, path: Path) -> bool:
        import filecmp

        return filecmp.cmp(item.key, path, shallow=False)

    def _path(self, rel: str) -> str:
        return os.path.join(self.location.path, *check_rel(rel).split("/")) if rel else self.location.path

    def put_bytes(self, rel: str, data: bytes) -> None:
        target = self._path(rel)
        folder = self.location.path
        try:
            os.makedirs(folder, exist_ok=True)
            for part in rel.split("/")[:-1]:  # folders below the location: made here, never a link followed
                folder = os.path.join(folder, part)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(folder)
                if not stat.S_ISDIR(os.lstat(folder).st_mode):
                    raise BadInput(f"{folder}: not a folder (a symbolic link is not followed)")
            # A temporary name pull and listings skip (PARTIAL_SUFFIX), renamed over the target: a link planted
            # under the target's name is replaced, never written through.
            write_atomically(Path(target), data, mode=None, suffix=PARTIAL_SUFFIX)
        except OSError as exc:
            raise BadInput(f"{target}: cannot write ({exc.strerror or exc})") from None

    def get_bytes(self, rel: str, limit: int) -> bytes | None:
        path = self._path(rel)
        try:
            with open_regular(check_rel(rel), root=self.location.path) as f:
                return read_capped(f, limit, path)
        except (FileNotFoundError, NotADirectoryError):  # a linked folder on the way too: not followed, absent
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise BadInput(f"{path}: a symbolic link (not followed)") from None
            raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None

    def list_dirs(self, rel: str = "") -> list[str]:
        path = self._path(rel)
        try:
            with os.scandir(path) as entries:
                return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise BadInput(f"{path}: cannot list ({exc.strerror or exc})") from None


def _join(rel_dir: str, name: str) -> str:
    return name if rel_dir in (".", "") else f"{rel_dir.replace(os.sep, '/')}/{name}"


def _ignore(_: int) -> None:
    return None
