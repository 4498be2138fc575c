"""A run's folder on S3 as ``Objects``, from wherever it runs: the client or a node of the Ray cluster.

A cluster's image may lack boto3, so S3 is reached through the first of these that can write (``s3_objects``):

- ``boto3`` when importable: the full AWS credential chain; conditions are S3's own (``IfNoneMatch='*'``,
  ``IfMatch=<etag>``), a lost condition is HTTP 412 (409 ConditionalRequestConflict when two race).
- ``sigv4``: the stdlib (http.client, hashlib, hmac) with the keys in the environment (AWS_ACCESS_KEY_ID,
  AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), signed by s3light's SigV4 signer; the same conditional headers.
- ``pyarrow``: ``pyarrow.fs.S3FileSystem`` (the AWS C++ SDK's full credential chain, instance roles included: what
  Ray Train uses). pyarrow cannot send If-Match / If-None-Match, so a condition is emulated: the object's ETag
  is read (HeadObject), compared, then the object is written. That is not atomic: a writer that writes between
  the read and the write is lost. The run's writers tolerate it as a lost-update window (each writes its own
  objects; a record's writer reads it back).

The variable ``RTJOB_S3_OBJECTS`` (``boto3`` | ``sigv4`` | ``pyarrow``; unset or ``auto``: the order above)
picks one: tests use it, and so can a cluster whose boto3 is broken. When none can write, ``s3_objects`` raises
``NoS3Writer`` (one line; the caller falls back to the client writing).

The endpoint: the argument, else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS. The region: AWS_REGION /
AWS_DEFAULT_REGION, else us-east-1 (boto3: its own configuration first). A failure of S3 is one line
(core/errors.StorageError, transient or permanent as storage/s3errors.py classifies it) naming the object's URI,
never a credential; a caller that must not lose a write retries the transient ones (storage/retrying.py).

Importable on the cluster: the stdlib and rtjob modules of the same rule at module level; boto3 and pyarrow
are imported inside the implementation that uses them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.client import HTTPException, HTTPResponse
from typing import Any, BinaryIO
from urllib.parse import quote, urlsplit

from ..core import errors
from ..core.errors import BadInput, StorageError
from ..jobspec.run_env import endpoint_from_env
from . import s3light
from .location import Location
from .objects import PARTIAL_SUFFIX, Listed, Obj, Objects, PreconditionFailed, check_key
from .s3errors import _AUTH, _DENIED, first_line_of, no_bucket, transient_answer, transient_text

IMPL_VAR = "RTJOB_S3_OBJECTS"
IMPLS = ("boto3", "sigv4", "pyarrow")
_RETRIES = 3  # sigv4: attempts for a connection failure or a 5xx (boto3 and pyarrow retry themselves)
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class NoS3Writer(BadInput):
    """No S3 client here can write this location (the client side writes instead)."""


def s3_objects(location: Location, endpoint: str | None = None, impl: str | None = None,
               concurrency: int = 10) -> Objects:
    """The objects below ``location`` (an s3:// location), through ``impl`` or ``$RTJOB_S3_OBJECTS`` or the first
    of boto3, SigV4 with the environment's keys, pyarrow that is available here."""
    endpoint = endpoint or endpoint_from_env()
    if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
        raise BadInput(f"{endpoint!r}: an S3 endpoint is an http:// or https:// URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    choice = (impl or os.environ.get(IMPL_VAR) or "auto").strip().lower()
    if choice not in ("auto", *IMPLS):
        raise BadInput(f"{IMPL_VAR}={choice!r}: expected auto, boto3, sigv4 or pyarrow")
    if choice in ("auto", "boto3"):
        if _importable("boto3"):
            return Boto3Objects(location, endpoint, region, concurrency)
        if choice == "boto3":
            raise NoS3Writer(f"{location.uri}: {IMPL_VAR}=boto3, but boto3 cannot be imported here")
    if choice in ("auto", "sigv4"):
        target = s3light.keys_target(location.bucket, endpoint)
        if target is not None:
            return SigV4Objects(location, target)
        if choice == "sigv4":
            raise NoS3Writer(f"{location.uri}: {IMPL_VAR}=sigv4 needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                             "in the environment")
    if _importable("pyarrow.fs"):
        return PyArrowObjects(location, endpoint, region)
    raise NoS3Writer(f"{location.uri}: nothing here can write to S3 (no boto3, no pyarrow, no AWS_ACCESS_KEY_ID/"
                     "AWS_SECRET_ACCESS_KEY in the environment)")


def light_objects(location: Location, endpoint: str | None = None) -> Objects | None:
    """A client's objects through ``sigv4`` (the stdlib: no botocore to import, no client to build, ~0.5-1 s of a
    short command) where that serves exactly as boto3 would, as a pull's listing does (s3light.target_for): no
    ``RTJOB_S3_OBJECTS`` choice, keys, endpoint and region in the environment, no AWS config file that changes
    S3, no proxy for the endpoint (http.client does not use one). None: ``s3_objects`` decides."""
    from .engines import AWS_S3, proxy_reason

    if (os.environ.get(IMPL_VAR) or "auto").strip().lower() != "auto":
        return None
    endpoint = endpoint or endpoint_from_env()
    target = s3light.target_for(location.bucket, endpoint)
    if target is None or proxy_reason(endpoint or AWS_S3) is not None:
        return None
    return SigV4Objects(location, target)


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


class _S3(Objects):
    """What every implementation shares: keys below the location's prefix, the listing's filter, messages."""

    location: Location
    endpoint: str | None

    def _key(self, rel: str) -> str:
        check_key(rel)
        return f"{self.location.path}/{rel}" if self.location.path else rel

    def _prefix(self, prefix: str) -> str:
        """The key prefix of a folder's relative name ('' for the whole location)."""
        base = f"{self.location.path}/" if self.location.path else ""
        return base + (check_key(prefix.strip("/")) + "/" if prefix.strip("/") else "")

    def _listed(self, key: str, size: int, etag: str | None) -> Listed | None:
        base = f"{self.location.path}/" if self.location.path else ""
        if not key.startswith(base) or key.endswith(("/", PARTIAL_SUFFIX)):
            return None  # a folder marker or a temporary name
        return Listed(key[len(base):], size, etag)

    def _where(self, rel: str = "") -> str:
        return f"{self.uri.rstrip('/')}/{rel}" if rel else self.uri

    def _unreachable(self, rel: str, why: str, *, transient: bool = True) -> StorageError:
        at = f" at {self.endpoint}" if self.endpoint else ""
        return StorageError(f"{self._where(rel)}: S3{at} failed: {why}", transient=transient)

    def _answered(self, rel: str, status: int, code: str, why: str) -> StorageError:
        """S3 answered with an error: typed by its status and code (no bucket: the bucket's own line)."""
        if code == "NoSuchBucket":
            return no_bucket(self.location.bucket, self.endpoint)
        if code in _DENIED or code in _AUTH or status == 403:
            return self._unreachable(rel, why, transient=False)
        return self._unreachable(rel, why, transient=transient_answer(status, code))


# ---------------------------------------------------------------------------------------------
# boto3


_LOADER: Any = None  # botocore's loader of service models, shared: parsing them is most of a client's start-up


def _botocore_session() -> Any:
    """A new botocore session (credentials and config read afresh, as boto3's own) with the process's one model
    loader: a client starts ~3× faster (measured: 127 → 41 ms), and rtjob makes one per folder it opens."""
    global _LOADER
    import botocore.session

    session = botocore.session.get_session()
    if _LOADER is None:
        _LOADER = session.get_component("data_loader")
    else:
        session.register_component("data_loader", _LOADER)
    return session


class Boto3Objects(_S3):
    def __init__(self, location: Location, endpoint: str | None, region: str | None, concurrency: int = 10) -> None:
        import boto3
        from botocore.config import Config

        self.location, self.endpoint = location, endpoint
        session = boto3.session.Session(botocore_session=_botocore_session())
        self._client = session.client(
            "s3", endpoint_url=endpoint, region_name=region or session.region_name or "us-east-1",
            config=Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10, read_timeout=60,
                          max_pool_connections=max(10, concurrency)))  # a caller's threads share the client

    @contextlib.contextmanager
    def _errors(self, rel: str, if_match: str | None = None) -> Iterator[None]:
        """S3's failures worded; a lost condition is PreconditionFailed (S3 answers If-Match on an absent object
        with 404 NoSuchKey)."""
        import botocore.exceptions as bex

        try:
            yield
        except bex.ClientError as exc:
            code, status = _client_error(exc)
            if status == 412 or code in ("PreconditionFailed", "ConditionalRequestConflict") or (
                    if_match is not None and (status == 404 or code == "NoSuchKey")):
                raise PreconditionFailed(rel) from None
            raise self._answered(rel, status, code, f"{code or status}: "
                                 f"{first_line_of(exc.response['Error'].get('Message', ''))}") from None
        except bex.NoCredentialsError:
            raise self._unreachable(rel, "no AWS credentials found", transient=False) from None
        except (bex.PartialCredentialsError, bex.NoRegionError) as exc:
            raise self._unreachable(rel, errors.one_line(exc), transient=False) from None
        except (bex.BotoCoreError, OSError) as exc:
            raise self._unreachable(rel, errors.one_line(exc)) from None

    def _missing(self, exc: Exception) -> bool:
        import botocore.exceptions as bex

        return isinstance(exc, bex.ClientError) and (_client_error(exc)[1] == 404
                                                     or _client_error(exc)[0] in ("NoSuchKey", "NotFound"))

    def get(self, rel: str, limit: int) -> Obj | None:
        with self._errors(rel):
            try:
                response = self._client.get_object(Bucket=self.location.bucket, Key=self._key(rel))
            except Exception as exc:
                if self._missing(exc):
                    return None
                raise
            with contextlib.closing(response["Body"]) as body:
                data = body.read(limit + 1)
        if len(data) > limit:
            raise BadInput(f"{self._where(rel)}: larger than {limit} bytes")
        return Obj(data, response["ETag"])

    def _conditions(self, if_match: str | None, if_absent: bool) -> dict[str, str]:
        if if_match is not None:
            return {"IfMatch": if_match}
        return {"IfNoneMatch": "*"} if if_absent else {}

    def put(self, rel: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False) -> str:
        with self._errors(rel, if_match):
            response = self._client.put_object(Bucket=self.location.bucket, Key=self._key(rel), Body=data,
                                               **self._conditions(if_match, if_absent))
        return str(response["ETag"])

    def put_file(self, rel: str, path: str, *, if_match: str | None = None, if_absent: bool = False) -> str:
        key = self._key(rel)
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed below; its open error is worded apart from S3's)
        except OSError as exc:
            raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None
        with f, self._errors(rel, if_match):
            response = self._client.put_object(Bucket=self.location.bucket, Key=key, Body=f,
                                               **self._conditions(if_match, if_absent))
        return str(response["ETag"])

    def head(self, rel: str) -> str | None:
        with self._errors(rel):
            try:
                return str(self._client.head_object(Bucket=self.location.bucket, Key=self._key(rel))["ETag"])
            except Exception as exc:
                if self._missing(exc):
                    return None
                raise

    def list(self, prefix: str = "") -> list[Listed]:
        out: list[Listed] = []
        with self._errors(prefix):
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.location.bucket,
                                                                           Prefix=self._prefix(prefix))
            for page in pages:
                for item in page.get("Contents", []):
                    listed = self._listed(item["Key"], int(item.get("Size", 0)), item.get("ETag"))
                    if listed is not None:
                        out.append(listed)
        return sorted(out, key=lambda item: item.rel)

    def stream(self, rel: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        with self._errors(rel):
            response = self._client.get_object(Bucket=self.location.bucket, Key=self._key(rel))
            with contextlib.closing(response["Body"]) as body:
                yield from body.iter_chunks(chunk)

    def delete(self, rel: str) -> None:
        with self._errors(rel):
            self._client.delete_object(Bucket=self.location.bucket, Key=self._key(rel))

    def close(self) -> None:
        self._client.close()


def _client_error(exc: Any) -> tuple[str, int]:
    error = exc.response.get("Error", {}) or {}
    status = int((exc.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode") or 0)
    return str(error.get("Code", "")), status


# ---------------------------------------------------------------------------------------------
# The stdlib: SigV4 with the environment's keys (s3light's signer)


class SigV4Objects(_S3):
    def __init__(self, location: Location, target: s3light.Target) -> None:
        self.location, self.endpoint, self._target = location, target.endpoint, target

    def _request(self, method: str, rel: str, *, headers: dict[str, str] | None = None, data: bytes | None = None,
                 path: str | None = None) -> tuple[HTTPResponse, Any]:
        """The response (its body unread) and its connection, which the caller closes. ``data`` or the file at
        ``path`` is the body. Retries a connection failure or a 5xx, and a request signed for the wrong region
        once with the bucket's own."""
        key = quote(self._key(rel), safe="/-_.~")
        headers = dict(headers or {})
        if data is not None:
            payload = hashlib.sha256(data).hexdigest()
        elif path is not None:
            payload = s3light.UNSIGNED_PAYLOAD
        else:
            payload = s3light.EMPTY_SHA256
        moved = False
        for attempt in range(_RETRIES):
            target = self._target
            _, host, base = target.base()
            signed = s3light.sign(method, host, f"{base}/{key}", {}, target, headers=headers, payload_sha256=payload)
            conn = s3light.connect(target)
            try:
                if path is not None:
                    with self._source(path, conn) as f:
                        signed["Content-Length"] = str(os.fstat(f.fileno()).st_size)
                        conn.request(method, s3light.request_target(f"{base}/{key}"), body=f, headers=signed)
                else:
                    if data is not None or method == "PUT":
                        signed["Content-Length"] = str(len(data or b""))
                    conn.request(method, s3light.request_target(f"{base}/{key}"), body=data, headers=signed)
                response = conn.getresponse()
            except (OSError, HTTPException) as exc:
                conn.close()
                if attempt + 1 < _RETRIES:
                    time.sleep(0.2 * 4**attempt)
                    continue
                raise self._unreachable(rel, f"cannot connect ({type(exc).__name__})") from None
            if response.status in (301, 400) and not moved:
                body = response.read()
                conn.close()
                region = response.getheader("x-amz-bucket-region") or _error_field(body, "Region")
                retargeted = s3light.in_region(target, region)
                if retargeted is not None:
                    self._target, moved = retargeted, True
                    continue
                raise self._answered(rel, response.status, _error_field(body, "Code"),
                                     self._status(response, body))
            if response.status >= 500 and attempt + 1 < _RETRIES:
                response.read()
                conn.close()
                time.sleep(0.2 * 4**attempt)
                continue
            return response, conn
        raise self._unreachable(rel, "no answer")  # unreachable: the last attempt returns or raises

    @staticmethod
    def _source(path: str, conn: Any) -> BinaryIO:
        """The file to upload, open; one that cannot be opened is bad input, not a connection failure."""
        try:
            return open(path, "rb")  # noqa: SIM115 (the caller closes it)
        except OSError as exc:
            conn.close()
            raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None

    def _status(self, response: HTTPResponse, body: bytes) -> str:
        code = _error_field(body, "Code")
        return f"HTTP {response.status}" + (f" {code}" if code else "")

    def _done(self, rel: str, response: HTTPResponse, conn: Any, *, missing_ok: bool = False,
              conditional: bool = False) -> bytes | None:
        """The whole body of a success (None: a 404 where absence is an answer); a failure raised, worded.
        ``conditional``: an If-Match write, which S3 answers with 404 when the object is absent."""
        try:
            body = response.read()
        except (OSError, HTTPException) as exc:
            raise self._unreachable(rel, f"the answer was cut ({type(exc).__name__})") from None
        finally:
            conn.close()
        if 200 <= response.status < 300:
            return body
        if response.status == 404 and missing_ok:
            return None
        if response.status == 412 or (response.status == 409
                                      and _error_field(body, "Code") == "ConditionalRequestConflict") or (
                conditional and response.status == 404 and _error_field(body, "Code") == "NoSuchKey"):
            raise PreconditionFailed(rel)
        raise self._answered(rel, response.status, _error_field(body, "Code"), self._status(response, body))

    def get(self, rel: str, limit: int) -> Obj | None:
        response, conn = self._request("GET", rel)
        if response.status != 200:
            self._done(rel, response, conn, missing_ok=True)
            return None
        try:
            data = response.read(limit + 1)
        except (OSError, HTTPException) as exc:
            raise self._unreachable(rel, f"the answer was cut ({type(exc).__name__})") from None
        finally:
            conn.close()
        if len(data) > limit:
            raise BadInput(f"{self._where(rel)}: larger than {limit} bytes")
        return Obj(data, response.getheader("ETag") or "")

    @staticmethod
    def _conditions(if_match: str | None, if_absent: bool) -> dict[str, str]:
        if if_match is not None:
            return {"If-Match": if_match}
        return {"If-None-Match": "*"} if if_absent else {}

    def put(self, rel: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False) -> str:
        response, conn = self._request("PUT", rel, headers=self._conditions(if_match, if_absent), data=data)
        self._done(rel, response, conn, conditional=if_match is not None)
        return response.getheader("ETag") or ""

    def put_file(self, rel: str, path: str, *, if_match: str | None = None, if_absent: bool = False) -> str:
        response, conn = self._request("PUT", rel, headers=self._conditions(if_match, if_absent), path=path)
        self._done(rel, response, conn, conditional=if_match is not None)
        return response.getheader("ETag") or ""

    def head(self, rel: str) -> str | None:
        response, conn = self._request("HEAD", rel)
        if self._done(rel, response, conn, missing_ok=True) is None:
            return None
        return response.getheader("ETag") or ""

    def list(self, prefix: str = "") -> list[Listed]:
        try:
            files, _ = s3light.list_objects(self._target, self._prefix(prefix))
        except s3light.LightError as exc:
            if exc.status:
                raise self._answered(prefix, exc.status, exc.code, f"cannot list ({exc})") from None
            raise self._unreachable(prefix, f"cannot list ({exc})") from None
        out = [listed for key, size, etag in files if (listed := self._listed(key, size, etag)) is not None]
        return sorted(out, key=lambda item: item.rel)

    def stream(self, rel: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        response, conn = self._request("GET", rel)
        if response.status != 200:
            self._done(rel, response, conn)  # raises: a stream of an absent object is an error
            return
        try:
            while block := response.read(chunk):
                yield block
        except (OSError, HTTPException) as exc:
            raise self._unreachable(rel, f"the answer was cut ({type(exc).__name__})") from None
        finally:
            conn.close()

    def delete(self, rel: str) -> None:
        response, conn = self._request("DELETE", rel)
        self._done(rel, response, conn, missing_ok=True)


def _error_field(body: bytes, name: str) -> str:
    """A field (Code, Region) of S3's XML error body; '' if there is none. Never the Message: it can quote the
    request (a signature's string to sign)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return ""
    return (root.findtext(name) or root.findtext(f"{_NS}{name}") or "").strip()[:100]


# ---------------------------------------------------------------------------------------------
# pyarrow.fs.S3FileSystem: the AWS C++ SDK's credential chain; conditions emulated (not atomic)


class PyArrowObjects(_S3):
    def __init__(self, location: Location, endpoint: str | None, region: str | None) -> None:
        from pyarrow import fs

        self.location, self.endpoint = location, endpoint
        kwargs: dict[str, Any] = {}
        if endpoint:
            parts = urlsplit(endpoint)
            kwargs.update(endpoint_override=parts.netloc, scheme=parts.scheme)
            kwargs["region"] = region or "us-east-1"
        elif region:
            kwargs["region"] = region
        try:
            self._fs = fs.S3FileSystem(**kwargs)
        except (OSError, ValueError) as exc:
            raise self._unreachable("", first_line_of(str(exc)), transient=transient_text(str(exc))) from None
        self._fs_module = fs

    def _path(self, rel: str) -> str:
        return f"{self.location.bucket}/{self._key(rel)}"

    @contextlib.contextmanager
    def _errors(self, rel: str) -> Iterator[None]:
        try:
            yield
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as exc:  # pyarrow's IO errors are OSErrors, known by their text only
            raise self._unreachable(rel, first_line_of(str(exc)), transient=transient_text(str(exc))) from None

    def get(self, rel: str, limit: int) -> Obj | None:
        with self._errors(rel):
            try:
                with self._fs.open_input_file(self._path(rel)) as f:
                    etag = _etag_of(f.metadata())
                    data = f.read(limit + 1)
            except FileNotFoundError:
                return None
        if len(data) > limit:
            raise BadInput(f"{self._where(rel)}: larger than {limit} bytes")
        return Obj(data, etag)

    def _check(self, rel: str, if_match: str | None, if_absent: bool) -> None:
        """The emulated condition: read the ETag, compare (a write between this and the write is lost)."""
        if if_match is None and not if_absent:
            return
        current = self.head(rel)
        if (if_absent and current is not None) or (if_match is not None and current != if_match):
            raise PreconditionFailed(rel)

    def put(self, rel: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False) -> str:
        self._check(rel, if_match, if_absent)
        with self._errors(rel), self._fs.open_output_stream(self._path(rel)) as out:
            out.write(data)
        return self.head(rel) or ""

    def put_file(self, rel: str, path: str, *, if_match: str | None = None, if_absent: bool = False) -> str:
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed below; its open error is worded apart from S3's)
        except OSError as exc:
            raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None
        with f:
            self._check(rel, if_match, if_absent)
            with self._errors(rel), self._fs.open_output_stream(self._path(rel)) as out:
                while block := f.read(1 << 20):
                    out.write(block)
        return self.head(rel) or ""

    def head(self, rel: str) -> str | None:
        with self._errors(rel):
            try:
                with self._fs.open_input_file(self._path(rel)) as f:  # a HeadObject; nothing is read
                    return _etag_of(f.metadata())
            except FileNotFoundError:
                return None

    def list(self, prefix: str = "") -> list[Listed]:
        base = f"{self.location.bucket}/{self._prefix(prefix)}".rstrip("/")
        selector = self._fs_module.FileSelector(base, recursive=True, allow_not_found=True)
        out: list[Listed] = []
        with self._errors(prefix):
            for info in self._fs.get_file_info(selector):
                if info.type == self._fs_module.FileType.File:
                    key = info.path[len(self.location.bucket) + 1:]
                    listed = self._listed(key, int(info.size or 0), None)
                    if listed is not None:
                        out.append(listed)
        return sorted(out, key=lambda item: item.rel)

    def stream(self, rel: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        with self._errors(rel), self._fs.open_input_stream(self._path(rel)) as f:
            while block := f.read(chunk):
                yield block

    def delete(self, rel: str) -> None:
        with self._errors(rel), contextlib.suppress(FileNotFoundError):
            self._fs.delete_file(self._path(rel))


def _etag_of(metadata: Any) -> str:
    """The ETag among an input file's metadata (pyarrow passes HeadObject's)."""
    for name, value in (metadata or {}).items():
        name = name.decode() if isinstance(name, bytes) else str(name)
        if name.lower() == "etag":
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""
