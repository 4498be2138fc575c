"""``rtjob pull``'s third S3 engine (engines.py), the one that serves every endpoint (proxies included): botocore,
and s3transfer for large files. Also the botocore client an S3 store lists, reads and writes with.

botocore and s3transfer are imported only when a client is made (the light client's ``s3`` extra).
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Any

from ..core.errors import BadInput
from .stores import DoneFn, ProgressFn, RemoteFile, create_file

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


def make_client(endpoint: str | None, concurrency: int) -> tuple[Any, Any]:
    """A botocore session and S3 client (``endpoint``: an S3-compatible server; None: AWS)."""
    try:  # botocore alone: s3transfer needs only its client, and boto3's import costs a re-pull ~0.1 s
        import botocore.config
        import botocore.session
    except ImportError:
        raise BadInput("S3 storage needs boto3: pip install 'rtjob[s3]'") from None
    config = botocore.config.Config(
        max_pool_connections=2 * concurrency + 4,  # small-file GETs and s3transfer's, side by side
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
    return session, session.create_client("s3", endpoint_url=endpoint or None, config=config)


class BotocoreDownloader:
    """Downloads keys of one bucket to local paths with a botocore client."""

    def __init__(self, client: Any, bucket: str, concurrency: int) -> None:
        self.client = client
        self.bucket = bucket
        self.concurrency = concurrency

    def download(self, jobs: list[tuple[RemoteFile, Path]], on_progress: ProgressFn | None,
                 on_done: DoneFn) -> None:
        """Large files through s3transfer (concurrent ranged GETs); small ones, most of a checkpoint tree, by one
        GET each on a thread pool beside it: s3transfer's per-transfer machinery (submission task, IO queue,
        its own temporary file and rename) cost ~3 ms of CPU per file, a third of the time of a pull of
        hundreds of small files here (benchmarks/pull_bench.py)."""
        from concurrent.futures import ThreadPoolExecutor

        progress = on_progress or _ignore
        small = [job for job in jobs if job[0].size < MULTIPART_THRESHOLD]
        large = [job for job in jobs if job[0].size >= MULTIPART_THRESHOLD]
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="rtjob-get")
        try:
            futures = [pool.submit(self._get_small, item, target, progress, on_done) for item, target in small]
            if large:
                self._transfer(large, progress, on_done)
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
                body = self.client.get_object(Bucket=self.bucket, Key=item.key, **extra)["Body"]
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
                futures.append(manager.download(self.bucket, item.key, str(target),
                                                subscribers=[Subscriber(item, target)]))
            for future in futures:
                with contextlib.suppress(Exception):  # already reported through on_done
                    future.result()
        except BaseException:
            manager.shutdown(cancel=True)
            raise
        manager.shutdown()


def _ignore(_: int) -> None:
    return None
