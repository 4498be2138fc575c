"""Run storage: where a run's checkpoints and metrics live (``s3://bucket/prefix`` or a local folder).

Independent of the backend and of Ray (DESIGN: ``storage.pull(run) / results(run)``): the CLI turns a run
id into its storage URI through the backend's status, then everything here works on the URI alone.
boto3 / s3transfer are imported only when an S3 location is opened (the light client's ``s3`` extra).

Credentials come from the standard AWS chain (environment, ``~/.aws``, SSO, instance role); an
S3-compatible server (MinIO, moto, ...) is named by ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` or
the job's ``storage_endpoint``. Nothing here ever prints a credential.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import BadInput, RtjobError, Unreachable
from ..jobspec.run_env import endpoint_from_env
from .location import Location

# rtjob pull's own bookkeeping in a destination folder (never taken from storage).
PARTIAL_SUFFIX = ".rtjob-partial"
MANIFEST = ".rtjob-pull.jsonl"
LOCK = ".rtjob-pull.lock"


def is_bookkeeping(name: str) -> bool:
    """One of rtjob pull's own names (case-insensitively: on macOS ``.RTJOB-PULL.JSONL`` is the manifest)."""
    name = name.casefold()
    return name in (MANIFEST, LOCK) or PARTIAL_SUFFIX in name


def create_file(path: Path | str, append: bool = False) -> BinaryIO:
    """Open a file rtjob writes in a destination, never through a symbolic link planted under its name
    (O_NOFOLLOW: the open fails with ELOOP instead of writing wherever the link points)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o666), "ab" if append else "wb")


def open_regular(path: Path | str, follow: bool = False) -> BinaryIO:
    """Open a file to read it only if it is a regular file: O_NONBLOCK so that a FIFO cannot block the open
    (a FIFO swapped in after the listing would hang the pull), O_NOFOLLOW unless links are welcome."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW))
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


class Store:
    """One storage location: list it, read small files, download files to temporary paths."""

    location: Location
    refused: list[tuple[str, str]]  # (key, reason) found while listing (e.g. symlinks)
    special: list[tuple[str, str]]  # (key, kind) of FIFOs, sockets, devices in local storage: skipped, never opened
    engine = "copy"  # what moved the bytes: "copy" (local), "obstore", "crt" or "botocore" (S3)

    def describe(self) -> str:
        return self.location.uri

    def list_files(self) -> list[RemoteFile]:
        raise NotImplementedError

    def read(self, item: RemoteFile, limit: int) -> bytes:
        """A small file's bytes; more than ``limit`` is bad input."""
        raise NotImplementedError

    def download(self, jobs: list[tuple[RemoteFile, Path]], on_progress: ProgressFn | None,
                 on_done: DoneFn) -> None:
        """Write each file to its path (a temporary name); ``on_done`` once per file, from any thread;
        ``on_progress`` (if any) with each number of bytes written."""
        raise NotImplementedError

    # Small files rtjob itself keeps in a run's folder (its record, archived logs), by '/'-separated path.

    def put_bytes(self, rel: str, data: bytes) -> None:
        """Write (or replace) the file at ``rel`` whole: a reader sees the old file or the new one, never half."""
        raise NotImplementedError

    def get_bytes(self, rel: str, limit: int) -> bytes | None:
        """The file at ``rel`` (None: there is none); more than ``limit`` bytes is bad input."""
        raise NotImplementedError

    def list_dirs(self, rel: str = "") -> list[str]:
        """The names of the folders directly under ``rel`` (S3: one delimiter listing, never every key below)."""
        raise NotImplementedError

    def close(self) -> None:
        return None


def check_rel(rel: str) -> str:
    """A path rtjob names inside a location: '/'-separated plain segments (no '', '.', '..', backslash)."""
    parts = rel.split("/")
    if any(part in ("", ".", "..") or "\\" in part or "\0" in part for part in parts):
        raise BadInput(f"{rel!r}: not a plain relative path in storage")
    return rel


def open_store(location: Location, endpoint: str | None = None, concurrency: int = 16) -> Store:
    if location.scheme == "s3":
        return S3Store(location, endpoint, concurrency)
    return LocalStore(location, concurrency)


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
                if os.path.islink(os.path.join(dirpath, name)):
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
        with open_regular(item.key) as f:
            return read_capped(f, limit, item.key)

    def download(self, jobs: list[tuple[RemoteFile, Path]], on_progress: ProgressFn | None,
                 on_done: DoneFn) -> None:
        from concurrent.futures import ThreadPoolExecutor

        progress = on_progress or _ignore

        def copy(item: RemoteFile, target: Path) -> None:
            error: BaseException | None = None
            try:
                with open_regular(item.key) as src, create_file(target) as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                        progress(len(chunk))
            except OSError as exc:
                error = exc
            on_done(item, target, error)

        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="rtjob-copy") as pool:
            for future in [pool.submit(copy, item, target) for item, target in jobs]:
                future.result()


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
            tmp = os.path.join(folder, f".{os.path.basename(target)}.{os.urandom(4).hex()}{PARTIAL_SUFFIX}")
            try:
                with create_file(tmp) as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            raise BadInput(f"{target}: cannot write ({exc.strerror or exc})") from None

    def get_bytes(self, rel: str, limit: int) -> bytes | None:
        path = self._path(rel)
        try:
            with open_regular(path) as f:
                return read_capped(f, limit, path)
        except (FileNotFoundError, NotADirectoryError):
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


# Transfer settings: parts of 16 MiB above 16 MiB (fewer, larger ranged GETs than the CLI's 8 MiB),
# many requests in flight (checkpoint trees are hundreds of small files: latency-bound, not bandwidth-bound).
MULTIPART_THRESHOLD = 16 * 1024 * 1024
MULTIPART_CHUNKSIZE = 16 * 1024 * 1024
IO_CHUNK = 1024 * 1024
DOWNLOAD_ATTEMPTS = 3


@functools.cache
def _data_loader() -> Any:
    """botocore's service models, loaded once per process: a fresh session re-reads them (~0.1-0.2 s a client),
    and a command that reads a run's record, logs and checkpoints opens several stores. Only data is shared:
    each store's session still resolves its own credentials."""
    import botocore.loaders

    return botocore.loaders.create_loader()


class S3Store(Store):
    """An S3 location. botocore is imported only when needed: a pull whose credentials and endpoint the
    environment gives (s3light.target_for) lists through s3light and reads through obstore without it."""

    def __init__(self, location: Location, endpoint: str | None = None, concurrency: int = 16) -> None:
        self.location = location
        self.endpoint = endpoint or endpoint_from_env()  # the client's AWS_ENDPOINT_URL[_S3], if any
        self.concurrency = concurrency
        self.refused = []
        self.special = []
        self.bucket_region: str | None = None  # as the listing's response says (AWS: where the bucket lives)
        self.engine = ""  # which engine downloaded: set by download()
        self._botocore: tuple[Any, Any] | None = None  # (session, client), made on first use
        self._obstore: Any = None
        self.light = self._light_target()

    def _light_target(self) -> Any:
        from . import s3light
        from .engines import allowed, proxy_reason
        from .obstore_engine import available

        if not allowed("obstore") or proxy_reason(self.endpoint or "https://s3.amazonaws.com") or not available():
            return None
        return s3light.target_for(self.location.bucket, self.endpoint)

    @property
    def session(self) -> Any:
        return self._clients()[0]

    @property
    def client(self) -> Any:
        return self._clients()[1]

    def _clients(self) -> tuple[Any, Any]:
        if self._botocore is not None:
            return self._botocore
        try:  # botocore alone: s3transfer needs only its client, and boto3's import costs a re-pull ~0.1 s
            import botocore.config
            import botocore.session
        except ImportError:
            raise BadInput("S3 storage needs boto3: pip install 'rtjob[s3]'") from None
        config = botocore.config.Config(
            max_pool_connections=2 * self.concurrency + 4,  # small-file GETs and s3transfer's, side by side
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
            user_agent_extra="rtjob",
        )
        session = botocore.session.get_session()
        session.register_component("data_loader", _data_loader())
        # Timestamps stay strings (as the AWS CLI does): rtjob reads no LastModified, and dateutil's parsing of
        # every listed key's cost ~0.25 ms of CPU each, a quarter of the listing of a 2,000-file checkpoint.
        session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
        client = session.create_client("s3", endpoint_url=self.endpoint or None, config=config)
        self._botocore = (session, client)
        return self._botocore

    def describe(self) -> str:
        return f"{self.location.uri}" + (f" at {self.endpoint}" if self.endpoint else "")

    def _prefix(self) -> str:
        return f"{self.location.path}/" if self.location.path else ""

    def list_files(self) -> list[RemoteFile]:
        prefix = self._prefix()
        if self.light is not None:
            from .s3light import LightError, list_objects

            try:
                listed, region = list_objects(self.light, prefix)
            except LightError:
                self.light = None  # botocore from here on: it lists again, and words whatever went wrong
            else:
                self.bucket_region = region
                return [RemoteFile(key, key[len(prefix):], size, etag) for key, size, etag in listed]
        files: list[RemoteFile] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix
            ):
                headers = (page.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
                self.bucket_region = headers.get("x-amz-bucket-region") or self.bucket_region
                for obj in page.get("Contents", []) or []:
                    key = obj["Key"]
                    files.append(RemoteFile(key, key[len(prefix):], int(obj["Size"]), str(obj.get("ETag", ""))))
        except Exception as exc:
            raise s3_error(exc, self) from None
        return files

    def read(self, item: RemoteFile, limit: int) -> bytes:
        where = f"{self.location.uri}/{item.rel}"
        if item.size > limit:  # refused before the GET: the listing says how big it is
            raise too_large(where, limit)
        if self.light is not None:
            try:
                data = self._obstore_engine().read(item.key, limit)
            except Exception:  # botocore reads it instead, and words what went wrong
                pass
            else:
                return read_capped(io.BytesIO(data), limit, where)
        try:
            body = self.client.get_object(Bucket=self.location.bucket, Key=item.key)["Body"]
            return read_capped(body, limit, where)
        except Exception as exc:
            raise s3_error(exc, self) from None

    def _key(self, rel: str) -> str:
        return self._prefix() + check_rel(rel)

    def put_bytes(self, rel: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.location.bucket, Key=self._key(rel), Body=data)
        except Exception as exc:
            raise s3_error(exc, self) from None

    def get_bytes(self, rel: str, limit: int) -> bytes | None:
        import botocore.exceptions as bex

        try:
            body = self.client.get_object(Bucket=self.location.bucket, Key=self._key(rel))["Body"]
            return read_capped(body, limit, f"{self.location.uri}/{rel}")
        except bex.ClientError as exc:
            if str((exc.response.get("Error", {}) or {}).get("Code", "")) in ("NoSuchKey", "404"):
                return None
            raise s3_error(exc, self) from None
        except Exception as exc:
            raise s3_error(exc, self) from None

    def list_dirs(self, rel: str = "") -> list[str]:
        prefix = self._key(rel) + "/" if rel else self._prefix()
        names: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix, Delimiter="/"
            ):
                for common in page.get("CommonPrefixes", []) or []:
                    name = common["Prefix"][len(prefix):].rstrip("/")
                    if name:  # "prefix//x" lists an empty folder name: nothing rtjob wrote
                        names.append(name)
        except Exception as exc:
            raise s3_error(exc, self) from None
        return sorted(names)

    def download(self, jobs: list[tuple[RemoteFile, Path]], on_progress: ProgressFn | None,
                 on_done: DoneFn) -> None:
        """Through the first engine (engines.py) that can serve the endpoint: obstore, the AWS CRT, botocore."""
        from . import crt, obstore_engine
        from .engines import allowed, proxy_reason

        endpoint_url = self.endpoint or "https://s3.amazonaws.com"
        if allowed("obstore") and obstore_engine.available() and not proxy_reason(endpoint_url):
            try:
                engine: Any = self._obstore_engine()
            except Exception as exc:
                raise s3_error(exc, self) from None
            self.engine = "obstore"
            engine.download(jobs, on_progress, on_done)
            return
        if crt.unusable_reason(self.client.meta.endpoint_url) is None:
            try:
                engine = crt.CrtDownloader(self.session, self.client, self.location.bucket, self.bucket_region)
            except Exception as exc:
                raise s3_error(exc, self) from None
            self.engine = "crt"
            engine.download(jobs, on_progress, on_done)
            return
        self.engine = "botocore"
        self._download_botocore(jobs, on_progress or _ignore, on_done)

    def _obstore_engine(self) -> Any:
        """obstore for this bucket: with the environment's credentials where s3light serves this pull, else with
        botocore's (its whole chain: profiles, SSO, roles), endpoint and the region the listing reported."""
        from .obstore_engine import ObstoreDownloader
        from .s3light import virtual_hostable

        if self._obstore is not None:
            return self._obstore
        bucket = self.location.bucket
        if self.light is not None:
            target = self.light
            self._obstore = ObstoreDownloader(
                bucket, endpoint=target.endpoint, region=target.region, virtual_host=target.virtual_host,
                static=(target.access_key, target.secret_key, target.token), ca_bundle=target.ca_bundle)
            return self._obstore
        from .engines import custom_endpoint

        session, client = self._clients()
        credentials = session.get_credentials()
        if credentials is None:
            import botocore.exceptions

            raise botocore.exceptions.NoCredentialsError()

        def provider() -> tuple[str, str, str | None]:
            frozen = credentials.get_frozen_credentials()  # refreshed by botocore when they expire
            return frozen.access_key, frozen.secret_key, frozen.token

        endpoint = custom_endpoint(str(client.meta.endpoint_url or ""))
        self._obstore = ObstoreDownloader(
            bucket, endpoint=endpoint, region=self.bucket_region or client.meta.region_name or "us-east-1",
            virtual_host=endpoint is None and virtual_hostable(bucket), provider=provider,
            ca_bundle=session.get_config_variable("ca_bundle"))
        return self._obstore

    def _download_botocore(self, jobs: list[tuple[RemoteFile, Path]], on_progress: ProgressFn,
                           on_done: DoneFn) -> None:
        """Large files through s3transfer (concurrent ranged GETs); small ones, most of a checkpoint tree, by one
        GET each on a thread pool beside it: s3transfer's per-transfer machinery (submission task, IO queue,
        its own temporary file and rename) cost ~3 ms of CPU per file, a third of the time of a pull of
        hundreds of small files here (benchmarks/pull_bench.py)."""
        from concurrent.futures import ThreadPoolExecutor

        small = [job for job in jobs if job[0].size < MULTIPART_THRESHOLD]
        large = [job for job in jobs if job[0].size >= MULTIPART_THRESHOLD]
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="rtjob-get")
        try:
            futures = [pool.submit(self._get_small, item, target, on_progress, on_done) for item, target in small]
            if large:
                self._transfer(large, on_progress, on_done)
            for future in futures:
                future.result()  # _get_small reports its errors through on_done; this re-raises only bugs
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # Ctrl-C: finish only the GETs already running
            raise
        pool.shutdown()

    def _get_small(self, item: RemoteFile, target: Path, on_progress: ProgressFn, on_done: DoneFn) -> None:
        from s3transfer.utils import S3_RETRYABLE_DOWNLOAD_ERRORS

        error: BaseException | None = None
        for attempt in range(DOWNLOAD_ATTEMPTS):
            written = 0
            try:
                # If-Match: a file rewritten since the listing fails instead of landing with the old size/ETag.
                extra = {"IfMatch": item.etag} if item.etag else {}
                body = self.client.get_object(Bucket=self.location.bucket, Key=item.key, **extra)["Body"]
                with create_file(target) as out:
                    for chunk in body.iter_chunks(IO_CHUNK):
                        out.write(chunk)
                        written += len(chunk)
                        on_progress(len(chunk))
                error = None
                break
            except S3_RETRYABLE_DOWNLOAD_ERRORS as exc:  # the stream broke mid-body: read the file again
                on_progress(-written)
                error = exc
            except BaseException as exc:  # reported per file; the pull goes on with the rest
                error = exc
                break
            if attempt + 1 == DOWNLOAD_ATTEMPTS:
                break
        on_done(item, target, error)

    def _transfer(self, jobs: list[tuple[RemoteFile, Path]], on_progress: ProgressFn, on_done: DoneFn) -> None:
        from s3transfer.manager import TransferConfig, TransferManager
        from s3transfer.subscribers import BaseSubscriber

        class Subscriber(BaseSubscriber):
            def __init__(self, item: RemoteFile, target: Path) -> None:
                self.item, self.target = item, target

            def on_queued(self, future: Any, **kwargs: Any) -> None:
                # Size and ETag from the listing: no HEAD per file, and every ranged GET of a large file
                # carries If-Match, so a file rewritten mid-pull fails instead of mixing two versions.
                future.meta.provide_transfer_size(self.item.size)
                if self.item.etag:
                    future.meta.provide_object_etag(self.item.etag)

            def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
                on_progress(bytes_transferred)

            def on_done(self, future: Any, **kwargs: Any) -> None:
                error: BaseException | None = None
                try:
                    future.result()
                except BaseException as exc:  # reported per file; the pull goes on with the rest
                    error = exc
                on_done(self.item, self.target, error)

        config = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD,
            multipart_chunksize=MULTIPART_CHUNKSIZE,
            max_request_concurrency=self.concurrency,
            max_submission_concurrency=4,
            # 1 MiB writes (s3transfer's default is 256 KiB): a quarter of the queue hand-offs, which cost the
            # client ~15% of its CPU on a 2-core machine; at most 128 chunks (128 MiB) wait for the disk.
            max_io_queue_size=128,
            io_chunksize=IO_CHUNK,
            num_download_attempts=DOWNLOAD_ATTEMPTS,
        )
        manager = TransferManager(self.client, config)
        futures = []
        try:
            for item, target in jobs:
                # s3transfer writes a randomly named temporary file and renames it onto the target: a rename
                # replaces a link planted there, it never writes through it.
                futures.append(manager.download(self.location.bucket, item.key, str(target),
                                                subscribers=[Subscriber(item, target)]))
            for future in futures:
                with contextlib.suppress(Exception):  # already reported through on_done
                    future.result()
        except BaseException:
            manager.shutdown(cancel=True)
            raise
        manager.shutdown()


_DENIED = {"AccessDenied", "AllAccessDisabled", "403", "Forbidden"}
_AUTH = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
         "InvalidClientTokenId", "AuthorizationHeaderMalformed"}


def s3_error(exc: BaseException, store: S3Store) -> RtjobError:
    """One line, exit 3 for storage that cannot be reached or read; never a credential in it."""
    import botocore.exceptions as bex

    where = store.describe()
    if isinstance(exc, RtjobError):
        return exc
    if isinstance(exc, bex.NoCredentialsError):
        return Unreachable(f"{where}: no AWS credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                           "AWS_PROFILE, or use an instance role)")
    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", ""))
        message = _one_line(str(error.get("Message") or code))
        if code == "NoSuchBucket":
            return Unreachable(f"bucket {store.location.bucket!r} does not exist"
                               + (f" at {store.endpoint}" if store.endpoint else ""))
        if code in _DENIED:
            return Unreachable(f"access denied to {where}: {message}")
        if code in _AUTH:
            return Unreachable(f"authentication failed for {where} ({code}): {message}")
        return Unreachable(f"{where}: {code}: {message}")
    if isinstance(exc, (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ConnectionClosedError)):
        return Unreachable(f"cannot reach the S3 endpoint {store.endpoint or 'of AWS'} ({where})")
    if isinstance(exc, bex.BotoCoreError):
        return Unreachable(f"{where}: {_one_line(str(exc))}")
    if isinstance(exc, OSError):
        return Unreachable(f"{where}: {_one_line(str(exc))}")
    return Unreachable(f"{where}: {type(exc).__name__}: {_one_line(str(exc))}")


def describe_error(exc: BaseException) -> tuple[str, str]:
    """(code, short credential-free description) of a per-file transfer error."""
    from .engines import TransferError

    if isinstance(exc, TransferError):
        return exc.code, f"{exc.code}: {_one_line(exc.message)}" if exc.message else exc.code
    try:
        import botocore.exceptions as bex
    except ImportError:  # local storage: an OSError
        return type(exc).__name__, f"{type(exc).__name__}: {_one_line(str(exc))}"
    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", "error"))
        return code, f"{code}: {_one_line(str(error.get('Message', '')))}"
    return type(exc).__name__, f"{type(exc).__name__}: {_one_line(str(exc))}"


def is_denial(code: str) -> bool:
    """An error code that means these credentials may not read this storage."""
    return code in _DENIED or code in _AUTH


def _ignore(_: int) -> None:
    return None


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:300]
