"""``rtjob pull``'s first S3 engine: obstore (Python bindings of Rust's object_store; HTTP, signing and retries in
tokio threads), one asyncio loop in this thread writing what arrives.

Why: it imports in ~6 ms (awscrt ~80-200 ms, botocore + its client ~0.4 s) and its per-GET cost is in Rust, so a
checkpoint of thousands of small shards is bound by the server, not by this process (benchmarks/pull_bench.py
compares it with the CRT engine, s5cmd and the AWS CLI).

What stays in rtjob (pull.py), as for every engine: the listing, key checks, ``NAME.rtjob-partial`` + rename,
the size check, the manifest. What this engine keeps:
- every GET, and every ranged GET of a large file, carries the listed ETag in If-Match: a file rewritten
  mid-pull fails with 412 instead of landing half-old;
- the partial file is opened with O_NOFOLLOW: a link planted under its name fails that file (ELOOP);
- at most ``FILES_IN_FLIGHT`` files open and ``REQUESTS_IN_FLIGHT`` GETs at a time; memory is bounded by the
  requests in flight times ``CHUNK`` (each body is written as it arrives, never held whole);
- a body that breaks mid-stream is fetched again (``ATTEMPTS``), its progress taken back; object_store itself
  retries failed requests.
Keys go to object_store as they are (its ``Path::parse`` keeps them byte for byte; the keys it refuses, '.'
and '..' and empty segments, are keys pull.py refuses anyway).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .engines import STATUS_CODES, TransferError, s3_error_in

MiB = 1024 * 1024
PART_SIZE = 16 * MiB  # a file larger than this is fetched as concurrent ranged GETs of this size
CHUNK = 256 * 1024  # each write: small enough to stay in the CPU's cache between the socket and the page cache
REQUESTS_IN_FLIGHT = 64
# Threads that open, write and finish files: the kernel's part of a write (page cache) then runs beside the
# event loop that takes the next chunk from Rust, instead of between two of its turns.
WRITE_THREADS = 2
FILES_IN_FLIGHT = 64  # open descriptors (macOS allows 256 by default)
ATTEMPTS = 3
MMAP_THRESHOLD = 32 * MiB  # keep_buffers(): allocations below this come from the heap
TRIM_THRESHOLD = 256 * MiB  # ... and this much freed heap is kept for the next chunks
CREDENTIALS_TTL = datetime.timedelta(minutes=5)  # botocore-resolved credentials are asked for again this often


def available() -> bool:
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
                expires = datetime.datetime.now(datetime.timezone.utc) + CREDENTIALS_TTL
                return {"access_key_id": access, "secret_access_key": secret, "token": token,
                        "expires_at": expires}
        self._pool: Any = None
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
        """Fetch each (RemoteFile, temporary path); ``on_done`` once per file, from this thread. Ctrl-C cancels
        what is in flight (asyncio.run waits for it) before it propagates."""
        from concurrent.futures import ThreadPoolExecutor

        keep_buffers()
        self._pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="rtjob-write") if WRITE_THREADS else None
        try:
            asyncio.run(self._all(jobs, on_progress or _ignore, on_done))
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._pool is None:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _all(self, jobs: list[tuple[Any, Path]], on_progress: Callable[[int], None],
                   on_done: Callable[[Any, Path, BaseException | None], None]) -> None:
        files = asyncio.Semaphore(FILES_IN_FLIGHT)
        requests = asyncio.Semaphore(REQUESTS_IN_FLIGHT)

        async def one(item: Any, target: Path) -> None:
            async with files:
                error: BaseException | None = None
                try:
                    await self._file(item, target, requests, on_progress)
                except _LocalError as failed:  # opening or writing the partial file
                    error = failed.error
                except Exception as exc:  # obstore's (its "not found" is a FileNotFoundError too)
                    error = transfer_error(exc)
                await self._io(on_done, item, target, error)

        await asyncio.gather(*(one(item, target) for item, target in jobs))

    async def _file(self, item: Any, target: Path, requests: asyncio.Semaphore,
                    on_progress: Callable[[int], None]) -> None:
        fd = await self._io(_open, target)
        try:
            if item.size <= PART_SIZE:
                await self._part(fd, item, None, requests, on_progress)
                return
            parts = [asyncio.ensure_future(self._part(fd, item, (start, min(start + PART_SIZE, item.size)),
                                                      requests, on_progress))
                     for start in range(0, item.size, PART_SIZE)]
            try:
                await asyncio.wait(parts, return_when=asyncio.FIRST_EXCEPTION)
            finally:  # one part failing (or Ctrl-C) stops the others before the file is closed
                for part in parts:
                    part.cancel()
                await asyncio.gather(*parts, return_exceptions=True)
            for part in parts:
                if not part.cancelled() and part.exception() is not None:
                    raise part.exception()  # type: ignore[misc]
        finally:
            os.close(fd)  # no flush: the rename makes the name appear only once every write is done

    async def _part(self, fd: int, item: Any, span: tuple[int, int] | None, requests: asyncio.Semaphore,
                    on_progress: Callable[[int], None]) -> None:
        import obstore
        from obstore.exceptions import GenericError

        options: dict[str, Any] = {"if_match": item.etag} if item.etag else {}
        if span is not None:
            options["range"] = span
        for attempt in range(ATTEMPTS):
            written = 0
            try:
                async with requests:
                    result = await obstore.get_async(self.store, item.key, options=options)  # type: ignore[arg-type]
                    offset = span[0] if span else 0
                    async for chunk in result.stream(min_chunk_size=CHUNK):
                        await self._io(_write, fd, chunk, offset)
                        offset += len(chunk)
                        written += len(chunk)
                        on_progress(len(chunk))
                return
            except GenericError:  # the body broke mid-stream (object_store has retried the request itself)
                on_progress(-written)
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
