"""S3 through the stdlib (objects_s3.py: where boto3 is missing, or a short command's light path): http.client
with the environment's keys, signed by s3light's SigV4 signer, S3's own conditional headers."""

from __future__ import annotations

import hashlib
import os
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.client import HTTPException, HTTPResponse
from typing import Any, BinaryIO
from urllib.parse import quote

from ..core.errors import BadInput
from . import s3light
from .location import Location
from .objects import Listed, Obj, PreconditionFailed
from .objects_s3_base import S3Base

_RETRIES = 3  # attempts for a connection failure or a 5xx (boto3 and pyarrow retry themselves)
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class SigV4Objects(S3Base):
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

