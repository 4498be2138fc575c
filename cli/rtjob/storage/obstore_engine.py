"""``rtjob pull``'s first S3 engine: obstore (Python bindings of Rust's object_store; HTTP, signing and retries in
tokio threads), driven by a pool of threads that each fetch one file or part and write what arrives.

Why: it imports in ~6 ms (awscrt ~80-200 ms, botocore + its client ~0.4 s) and its per-GET cost is in Rust, so a
checkpoint of thousands of small shards is bound by the server, not by this process (benchmarks/pull_bench.py
compares it with the CRT engine, s5cmd and the AWS CLI).

What stays in rtjob (pull.py), as for every engine: the listing, key checks, ``NAME.rtjob-partial`` + rename,
the size check, the manifest. What this engine keeps:
- every GET, and every ranged GET of a large file, carries the listed ETag in If-Match: a file rewritten
  mid-pull fails with 412 instead of landing half-old;
- the partial file is opened with O_NOFOLLOW: a link planted under its name fails that file (ELOOP);
- at most ``REQUESTS_IN_FLIGHT`` GETs at a time, and about as many files open; memory is bounded by the requests
  in flight times ``CHUNK`` (each body is written as it arrives, never held whole);
- a body that breaks mid-stream is fetched again (``ATTEMPTS``), its progress taken back; object_store itself
  retries failed requests.
Keys go to object_store as they are (its ``Path::parse`` keeps them byte for byte; the keys it refuses, '.'
and '..' and empty segments, are keys the pull refuses anyway: keys.py).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core import clock
from .engines import AWS_S3, STATUS_CODES, TransferError, allowed, proxy_reason, s3_error_in

MiB = 1024 * 1024
PART_SIZE = 16 * MiB  # a file larger than this is fetched as concurrent ranged GETs of this size
CHUNK = 256 * 1024  # each write: small enough to stay in the CPU's cache between the socket and the page cache
REQUESTS_IN_FLIGHT = 64  # threads, each with one GET (a whole file or a part) at a time
ATTEMPTS = 3
MMAP_THRESHOLD = 32 * MiB  # keep_buffers(): allocations below this come from the heap
TRIM_THRESHOLD = 256 * MiB  # ... and this much freed heap is kept for the next chunks
CREDENTIALS_TTL = datetime.timedelta(minutes=5)  # botocore-resolved credentials are asked for again this often


def serves(endpoint: str | None) -> bool:
    """Whether this engine may move (and s3light list) this endpoint's bytes: RTJOB_S3_ENGINE allows it, no proxy
    is set for the endpoint (object_store does not go through HTTP(S)_PROXY), and obstore is installed."""
    return allowed("obstore") and not proxy_reason(endpoint or AWS_S3) and _installed()


def _installed() -> bool:
    try:
        import obstore  # noqa: F401
    except ImportError:
        return False
    return True


class ObstoreDownloader:
    """Reads keys of one bucket: ``endpoint`` None is AWS (virtual-hosted where the bucket name allows);
    credentials are static (access, secret, token) or a callable returning them with their expiry."""

    def __init__(self, bucket: str, *, endpoint: str | None, region: str, virtual_host: bool,
                 static: tuple[str, str, str | None] | None = None,
                 provider: Callable[[], tuple[str, str, str | None]] | None = None,
                 ca_bundle: str | None = None) -> None:
        from obstore.store import S3Store

        config: dict[str, Any] = {"region": region, "virtual_hosted_style_request": virtual_host}
        if endpoint:
            config["endpoint"] = endpoint
        if static is not None:
            config.update(access_key_id=static[0], secret_access_key=static[1])
            if static[2]:
                config["token"] = static[2]
        client: dict[str, Any] = {"connect_timeout": "5s", "timeout": "30m", "read_timeout": "60s",
                                  "allow_http": bool(endpoint and endpoint.startswith("http:")),
                                  "user_agent": "rtjob"}
        if ca_bundle:
            with open(ca_bundle, "rb") as f:
                client["root_certificate"] = f.read()
        retry = {"max_retries": 3, "retry_timeout": datetime.timedelta(seconds=20),
                 "backoff": {"init_backoff": datetime.timedelta(milliseconds=100),
                             "max_backoff": datetime.timedelta(seconds=2), "base": 2}}
        credential_provider = None
        if provider is not None:
            def credential_provider() -> dict[str, Any]:
                access, secret, token = provider()
                expires = clock.now() + CREDENTIALS_TTL
                return {"access_key_id": access, "secret_access_key": secret, "token": token,
                        "expires_at": expires}
        self.store = S3Store(bucket, config=config, client_options=client, retry_config=retry,  # type: ignore[arg-type]
                             credential_provider=credential_provider)  # type: ignore[arg-type]

    def read(self, key: str, limit: int) -> bytes:
        """A small object's bytes (the caller checked its listed size against ``limit``)."""
        import obstore

        try:
            data = bytes(obstore.get(self.store, key).bytes())
        except Exception as exc:
            raise transfer_error(exc) from None
        return data[: limit + 1]

    def download(self, jobs: list[tuple[Any, Path]], on_progress: Callable[[int], None] | None,
                 on_done: Callable[[Any, Path, BaseException | None], None]) -> None:
        """Fetch each (RemoteFile, temporary path); ``on_done`` once per file, from the thread that finished it.
        Ctrl-C stops every transfer at its next chunk, and waits for them, before it propagates."""
        keep_buffers()
        transfer = _Transfer(self.store, on_progress or _ignore, on_done)
        files = [_File(item, target) for item, target in jobs]
        # Taken in order, so a file's parts run together and few files are open at once (about one per thread).
        work: queue.SimpleQueue[tuple[_File, tuple[int, int] | None]] = queue.SimpleQueue()
        for file in files:
            for span in file.spans:
                work.put((file, span))
        threads: list[threading.Thread] = []
        try:
            # Ctrl-C waits until every thread is started (a thread interrupted half-way through its start could
            # not be waited for, and would write after its file was closed); the threads never take SIGINT.
            with _sigint_held():
                for _ in range(min(REQUESTS_IN_FLIGHT, work.qsize())):
                    thread = threading.Thread(target=transfer.run, args=(work,), name="rtjob-get", daemon=True)
                    thread.start()
                    threads.append(thread)
            for thread in threads:
                thread.join()
        except BaseException:
            transfer.stopped.set()
            raise
        finally:
            for thread in threads:
                thread.join()
            for file in files:  # a file whose parts never all ran (Ctrl-C) is still open
                file.close()
        if transfer.crashed is not None:
            raise transfer.crashed


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT held back in this thread inside the block (and so in the threads it starts), delivered after it."""
    hold = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hold else None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _File:
    """One file of a download: its parts (None = one GET of the whole file), its descriptor while parts write into
    it, and the first error any of its parts met."""

    def __init__(self, item: Any, target: Path) -> None:
        self.item, self.target = item, target
        self.spans: list[tuple[int, int] | None] = (
            [None] if item.size <= PART_SIZE else
            [(start, min(start + PART_SIZE, item.size)) for start in range(0, item.size, PART_SIZE)])
        self.left = len(self.spans)
        self.fd: int | None = None  # opened by the first part to run, closed once
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)  # no flush: the rename makes the name appear only once every write is done


class _Stopped(Exception):
    """Ctrl-C, or another part of the same file failed: this part gives up at its next chunk."""


class _Transfer:
    """What every worker thread shares. Each thread runs one part at a time with obstore's blocking calls (the GIL
    released while Rust waits) and writes each chunk itself: no hand-over between threads per chunk, which in the
    asyncio version cost about half of the engine's user CPU (two cross-thread wake-ups per 256 KiB)."""

    def __init__(self, store: Any, on_progress: Callable[[int], None],
                 on_done: Callable[[Any, Path, BaseException | None], None]) -> None:
        self.store, self.on_progress, self.on_done = store, on_progress, on_done
        self.stopped = threading.Event()
        self.crashed: BaseException | None = None  # an error of rtjob's own (on_done's, say): re-raised after

    def run(self, work: queue.SimpleQueue[tuple[_File, tuple[int, int] | None]]) -> None:
        """One thread: parts from ``work`` until it is empty or the download stops."""
        while not self.stopped.is_set():
            try:
                file, span = work.get_nowait()
            except queue.Empty:
                return
            try:
                self.part(file, span)
            except BaseException as exc:
                self.crashed = self.crashed or exc
                self.stopped.set()

    def part(self, file: _File, span: tuple[int, int] | None) -> None:
        error: BaseException | None = None
        with file.lock:
            if file.fd is None and file.error is None:  # this file's first part (a failed open set the error)
                try:
                    file.fd = _open(file.target)
                except _LocalError as failed:
                    file.error = failed.error
            fd = file.fd
        if fd is not None and file.error is None:
            try:
                self._get(fd, file, span)
            except _Stopped:
                pass
            except _LocalError as failed:  # writing the partial file
                error = failed.error
            except Exception as exc:  # obstore's (its "not found" is a FileNotFoundError too)
                error = transfer_error(exc)
        with file.lock:
            if error is not None and file.error is None:
                file.error = error
            file.left -= 1
            last = file.left == 0
        if last and not self.stopped.is_set():
            file.close()
            self.on_done(file.item, file.target, file.error)

    def _get(self, fd: int, file: _File, span: tuple[int, int] | None) -> None:
        import obstore
        from obstore.exceptions import GenericError

        item = file.item
        options: dict[str, Any] = {"if_match": item.etag} if item.etag else {}
        if span is not None:
            options["range"] = span
        for attempt in range(ATTEMPTS):
            written = 0
            try:
                result = obstore.get(self.store, item.key, options=options)  # type: ignore[arg-type]
                offset = span[0] if span else 0
                for chunk in result.stream(min_chunk_size=CHUNK):
                    if self.stopped.is_set() or file.error is not None:
                        self.on_progress(-written)
                        raise _Stopped
                    _write(fd, chunk, offset)
                    offset += len(chunk)
                    written += len(chunk)
                    self.on_progress(len(chunk))
                return
            except GenericError:  # the body broke mid-stream (object_store has retried the request itself)
                self.on_progress(-written)
                if attempt + 1 == ATTEMPTS:
                    raise


def keep_buffers() -> None:
    """glibc only: serve the chunk buffers object_store allocates (one per CHUNK that arrives) from the heap and keep
    what is freed, instead of a fresh mmap (page faults on every page) and a munmap per chunk. Measured on a 2 GiB
    pull here: minor page faults 150,000 -> 55,000 and about 0.6 s less system CPU (benchmarks/pull_bench.py,
    7d). Process-wide and permanent: freed memory up to TRIM_THRESHOLD stays with the process until it exits."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    mallopt(m_mmap_threshold, MMAP_THRESHOLD)  # also turns off glibc's dynamic threshold
    mallopt(m_trim_threshold, TRIM_THRESHOLD)


def _open(target: Path) -> int:
    """The partial file, created or emptied, never through a link planted under its name."""
    try:
        return os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise _LocalError(exc) from None


def _write(fd: int, chunk: Any, offset: int) -> None:
    view = memoryview(chunk)
    while view:
        try:
            done = os.pwrite(fd, view, offset)
        except OSError as exc:
            raise _LocalError(exc) from None
        view, offset = view[done:], offset + done


class _LocalError(Exception):
    """A local file could not be opened or written (told apart from obstore's errors, some of them OSErrors)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def transfer_error(exc: BaseException) -> TransferError:
    """S3's code and message where the error quotes S3's body, else what object_store's error kind means."""
    from obstore import exceptions as ox

    text = str(exc)
    code, message = s3_error_in(text)
    status = next((s for kind, s in ((ox.PreconditionError, 412), (ox.NotFoundError, 404),
                                     (ox.PermissionDeniedError, 403), (ox.UnauthenticatedError, 403),
                                     (ox.NotModifiedError, 304), (FileNotFoundError, 404), (PermissionError, 403))
                   if isinstance(exc, kind)), None)
    if not code and status:
        code = STATUS_CODES[status]
    if not code:
        code = type(exc).__name__
    if not message:
        message = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return TransferError(code, message, status)


def _ignore(_: int) -> None:
    return None
