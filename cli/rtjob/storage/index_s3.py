"""A folder of an S3 bucket as ``Objects`` (objects.py) for the run index (index.py), through botocore as
s3store.py uses it: conditional PUTs (``IfNoneMatch='*'``, ``IfMatch``), GET, HEAD, delimiter-free listings and
DELETE. botocore is imported only when the client is made (botocore_engine.make_client).

Importable on the cluster: the stdlib and rtjob's own modules at module level only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..core.errors import BadInput, RtjobError
from ..jobspec.run_env import endpoint_from_env
from .location import Location
from .objects import Listed, Obj, Objects, PreconditionFailed, check_key

_ABSENT = {"NoSuchKey", "404", "NotFound"}
_LOST = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}  # 409: a concurrent conditional write


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str((response.get("Error", {}) or {}).get("Code", ""))


class BotocoreObjects(Objects):
    """``s3://bucket/prefix`` as Objects; every failure other than absent or a lost condition is one line
    (s3errors.s3_error: exit 3 for storage that cannot be reached)."""

    def __init__(self, location: Location, endpoint: str | None = None, concurrency: int = 16) -> None:
        self.location = location
        self.endpoint = endpoint or endpoint_from_env()
        self.concurrency = concurrency
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            from .botocore_engine import make_client

            self._client = make_client(self.endpoint, self.concurrency)[1]
        return self._client

    def describe(self) -> str:
        return self.location.uri + (f" at {self.endpoint}" if self.endpoint else "")

    def _key(self, rel: str) -> str:
        return f"{self.location.path}/{check_key(rel)}" if self.location.path else check_key(rel)

    def _error(self, exc: Exception) -> RtjobError:
        from .s3errors import s3_error

        return s3_error(exc, self)  # type: ignore[arg-type]  # s3_error needs only describe()

    def get(self, rel: str, limit: int) -> Obj | None:
        try:
            answer = self.client.get_object(Bucket=self.location.bucket, Key=self._key(rel))
            data = answer["Body"].read(limit + 1)
        except Exception as exc:
            if _code(exc) in _ABSENT:
                return None
            raise self._error(exc) from None
        if len(data) > limit:
            raise BadInput(f"{self.location.uri}/{rel}: larger than {limit} bytes")
        return Obj(data, str(answer.get("ETag", "")))

    def put(self, rel: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False) -> str:
        conditions: dict[str, str] = {}
        if if_absent:
            conditions["IfNoneMatch"] = "*"
        if if_match is not None:
            conditions["IfMatch"] = if_match
        try:
            answer = self.client.put_object(Bucket=self.location.bucket, Key=self._key(rel), Body=data, **conditions)
        except Exception as exc:
            if conditions and _code(exc) in _LOST:
                raise PreconditionFailed(rel) from None
            raise self._error(exc) from None
        return str(answer.get("ETag", ""))

    def put_file(self, rel: str, path: str, *, if_match: str | None = None, if_absent: bool = False) -> str:
        with open(path, "rb") as f:  # the index's objects are small: one PUT (botocore streams the file)
            return self.put(rel, f, if_match=if_match, if_absent=if_absent)  # type: ignore[arg-type]

    def head(self, rel: str) -> str | None:
        try:
            return str(self.client.head_object(Bucket=self.location.bucket, Key=self._key(rel)).get("ETag", ""))
        except Exception as exc:
            if _code(exc) in _ABSENT:
                return None
            raise self._error(exc) from None

    def list(self, prefix: str = "") -> list[Listed]:
        base = f"{self.location.path}/" if self.location.path else ""
        full = base + (check_key(prefix).rstrip("/") + "/" if prefix else "")
        out: list[Listed] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.location.bucket,
                                                                              Prefix=full):
                for item in page.get("Contents", []) or []:
                    out.append(Listed(item["Key"][len(base):], int(item["Size"]), str(item.get("ETag", ""))))
        except Exception as exc:
            raise self._error(exc) from None
        return sorted(out, key=lambda item: item.rel)

    def stream(self, rel: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        try:
            body = self.client.get_object(Bucket=self.location.bucket, Key=self._key(rel))["Body"]
        except Exception as exc:
            raise self._error(exc) from None
        while block := body.read(chunk):
            yield block

    def delete(self, rel: str) -> None:
        try:
            self.client.delete_object(Bucket=self.location.bucket, Key=self._key(rel))
        except Exception as exc:
            if _code(exc) not in _ABSENT:
                raise self._error(exc) from None
