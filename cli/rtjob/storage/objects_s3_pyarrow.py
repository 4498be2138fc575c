"""S3 through ``pyarrow.fs.S3FileSystem`` (objects_s3.py: the last choice): the AWS C++ SDK's credential chain,
instance roles included; conditions emulated (HeadObject, compare, write: not atomic). pyarrow is imported inside."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from ..core.errors import BadInput
from .location import Location
from .objects import Listed, Obj, PreconditionFailed
from .objects_s3_base import S3Base
from .s3errors import first_line_of, transient_text


class PyArrowObjects(S3Base):
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
