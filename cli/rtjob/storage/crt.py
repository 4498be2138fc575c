"""``rtjob pull``'s second S3 engine (engines.py): the AWS Common Runtime's S3 client (``awscrt``), one GET per file.

Why: botocore spends ~3 ms of Python CPU on every GET (request building, signing, parsing, one GIL), so a pull
of thousands of small shards was CPU-bound at 3x s5cmd's time; the CRT does the HTTP, SigV4 signing, ranged
parts of large files, retries and the file writes in its own C threads (benchmarks/pull_bench.py measured the
engines side by side: botocore + s3transfer, this one, s5cmd).

What stays in rtjob (pull.py) and is engine-independent: the listing (botocore), key sanitising, the
``NAME.rtjob-partial`` + rename, the size check, the resumable manifest. This engine keeps the rest:
- every GET carries the listed ETag in If-Match (the CRT copies the request's headers onto each ranged part),
  so a file rewritten mid-pull fails with 412 instead of landing half-old;
- a link planted under a partial file's name fails the pull of that file (the CRT opens its file by name;
  leftovers of an earlier pull are removed, links refused, before any GET: destination.remove_partials);
- at most ``IN_FLIGHT`` files are open at a time (macOS allows 256 descriptors by default), and the CRT's
  buffers are capped by ``MEMORY_LIMIT``.
The endpoint, addressing style and region come from botocore's own rules (the URL botocore would send a probe
key's request to, caught before it is sent, gives the URL every key is appended to), and credentials from botocore's chain (env, profiles, SSO, roles),
asked again whenever the CRT signs, so expiring ones are refreshed.

Used where obstore is not (not installed, or RTJOB_S3_ENGINE=crt). Not used (the botocore engine instead,
botocore_engine.py): when awscrt is not installed, when a proxy is set for the endpoint (the CRT's S3 client does not
read HTTP(S)_PROXY), or with RTJOB_S3_ENGINE=botocore.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from .engines import (
    ENGINE_ENV,
    STATUS_CODES,
    TransferError,
    allowed,
    chosen_engine,
    custom_endpoint,
    proxy_reason,
)

MiB = 1024 * 1024
PART_SIZE = 8 * MiB  # ranged GETs of a large file (AWS's guidance: 8-16 MiB)
MEMORY_LIMIT = 256 * MiB  # the CRT's buffer pool: a 2 GiB pull stays within a few hundred MB
IN_FLIGHT = 64  # files being fetched at once (each holds an open file)
GBPS_PER_CORE = 0.5  # the CRT sizes its connection pool from a throughput target (see throughput_target())
_PROBE = "rtjob-probe-key"


def throughput_target() -> float:
    """Gbit/s the CRT is told to aim for: its recommendation for a known EC2 instance type, else 0.5 per core.
    The target sets its connection count: its default (10) opens ~10x more connections than a 2-core machine
    can drive, and then spends 3x the CPU per GB (kernel time: buffers and sockets) for no more speed
    (measured on 4 x 512 MiB from SeaweedFS: 9.5 s CPU at 5 Gbit/s, 3.2 s at 1 Gbit/s, s5cmd 2.6 s)."""
    from awscrt import s3

    with contextlib.suppress(Exception):  # an unknown platform: no recommendation
        recommended = s3.get_recommended_throughput_target_gbps()
        if recommended:
            return float(recommended)
    return max(1.0, GBPS_PER_CORE * (os.cpu_count() or 1))


def unusable_reason(endpoint_url: str) -> str | None:
    """Why the CRT engine cannot serve this endpoint here (None: it can)."""
    if not allowed("crt"):
        return f"{ENGINE_ENV}={chosen_engine()}"
    try:
        import awscrt.s3  # noqa: F401
    except ImportError:
        return "awscrt is not installed"
    reason = proxy_reason(endpoint_url)
    return f"{reason} (the CRT S3 client does not use it)" if reason else None


class CrtDownloader:
    """Downloads keys of one bucket to local paths with the CRT's S3 client."""

    def __init__(self, session: Any, client: Any, bucket: str, region: str | None = None) -> None:
        from awscrt import auth, io, s3

        region = region or client.meta.region_name or "us-east-1"
        if region != client.meta.region_name:  # the bucket lives elsewhere (its listing said so)
            client = session.create_client("s3", region_name=region, endpoint_url=custom_endpoint(str(client.meta.endpoint_url or "")),
                                            config=client.meta.config)
        url = urlsplit(_request_url(client, bucket, _PROBE))
        if not url.path.endswith("/" + _PROBE):
            raise RuntimeError(f"unexpected S3 URL shape for bucket {bucket!r}")
        self.url_prefix = url.path[: -len(_PROBE)]
        self.host = url.netloc
        credentials = session.get_credentials()

        def resolve() -> Any:
            frozen = credentials.get_frozen_credentials()  # refreshed by botocore when they expire
            return auth.AwsCredentials(frozen.access_key, frozen.secret_key, frozen.token)

        provider = auth.AwsCredentialsProvider.new_delegate(resolve)
        tls: Any = None
        if url.scheme == "https":
            options = io.TlsContextOptions()
            ca_bundle = session.get_config_variable("ca_bundle")
            if ca_bundle:
                options.override_default_trust_store_from_path(ca_filepath=ca_bundle)
            tls = io.ClientTlsContext(options).new_connection_options()
            tls.set_server_name(url.hostname or "")
        self.client = s3.S3Client(
            region=region,
            signing_config=s3.create_default_s3_signing_config(region=region, credential_provider=provider),
            tls_mode=s3.S3RequestTlsMode.ENABLED if url.scheme == "https" else s3.S3RequestTlsMode.DISABLED,
            tls_connection_options=tls,
            part_size=PART_SIZE,
            memory_limit=MEMORY_LIMIT,
            throughput_target_gbps=throughput_target(),
        )

    def download(self, jobs: list[tuple[Any, Path]], on_progress: Callable[[int], None] | None,
                 on_done: Callable[[Any, Path, BaseException | None], None]) -> None:
        """Fetch each (RemoteFile, temporary path); ``on_done`` once per file, from the CRT's threads.
        Ctrl-C cancels what is in flight and waits for it to stop before it propagates."""
        from awscrt import http, s3

        slots = threading.BoundedSemaphore(IN_FLIGHT)
        idle = threading.Condition()
        running: dict[int, Any] = {}
        counter = iter(range(len(jobs)))

        def finish(number: int, item: Any, target: Path, error: BaseException | None) -> None:
            try:
                on_done(item, target, error)
            finally:
                with idle:
                    running.pop(number, None)
                    idle.notify_all()
                slots.release()

        def start(item: Any, target: Path) -> None:
            number = next(counter)
            if os.path.islink(target):  # the CRT opens its file by name: a link planted there is refused
                finish(number, item, target, OSError(errno.ELOOP, "a symbolic link where rtjob writes its "
                                                                  "partial file", str(target)))
                return
            headers = [("Host", self.host)] + ([("If-Match", item.etag)] if item.etag else [])
            request = http.HttpRequest("GET", self.url_prefix + quote(item.key, safe="/~"),
                                       http.HttpHeaders(headers))

            def done(error: BaseException | None = None, **kwargs: Any) -> None:
                finish(number, item, target, _transfer_error(error, kwargs) if error is not None else None)

            with idle:
                running[number] = None  # taken out by finish(), which may run before make_request returns
            try:
                made = self.client.make_request(
                    type=s3.S3RequestType.GET_OBJECT, request=request, recv_filepath=str(target),
                    on_progress=on_progress, on_done=done)
            except Exception as exc:  # refused before it started (e.g. a malformed request)
                finish(number, item, target, exc)
                return
            with idle:
                if number in running:
                    running[number] = made

        try:
            for item, target in jobs:
                while not slots.acquire(timeout=0.5):  # a timeout keeps Ctrl-C deliverable
                    pass
                start(item, target)
            with idle:
                while running:
                    idle.wait(0.5)
        except BaseException:
            with idle:
                for request in list(running.values()):
                    if request is not None:
                        request.cancel()
                while running:
                    idle.wait(0.5)
            raise


def _request_url(client: Any, bucket: str, key: str) -> str:
    """The URL botocore would send a GET of ``key`` to (endpoint rules, addressing style, region), built by
    botocore and caught before it is sent: nothing goes over the network."""
    from botocore.awsrequest import AWSResponse

    class NoBody:
        def stream(self, **_: Any) -> Any:
            return iter(())

    seen: list[str] = []

    def catch(request: Any, **_: Any) -> Any:
        seen.append(request.url)
        return AWSResponse(request.url, 200, {}, NoBody())

    event = "before-send.s3.HeadObject"
    client.meta.events.register_first(event, catch, unique_id="rtjob-url")
    try:
        client.head_object(Bucket=bucket, Key=key)
    finally:
        client.meta.events.unregister(event, unique_id="rtjob-url")
    return seen[0]


def _transfer_error(error: BaseException, details: dict[str, Any]) -> TransferError:
    """S3's error code and message from the response body (an XML ``<Error>``), else the CRT's error name."""
    status = details.get("status_code") or getattr(error, "status_code", None)
    body = details.get("error_body") or getattr(error, "body", None) or b""
    code, message = "", ""
    if body:
        try:
            root = ET.fromstring(body)
            code = (root.findtext("Code") or "").strip()
            message = (root.findtext("Message") or "").strip()
        except ET.ParseError:
            pass
    if not code and status:
        code = STATUS_CODES.get(int(status), f"HTTP{status}")
    if not code:
        code = str(getattr(error, "name", "") or type(error).__name__)
        message = str(getattr(error, "message", "") or error)
    return TransferError(code, message, int(status) if status else None)


