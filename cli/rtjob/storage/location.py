"""A storage location: ``s3://bucket/prefix``, ``file:///path`` or a local path."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..core.errors import BadInput

_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")


@dataclass(frozen=True)
class Location:
    """A storage location: ``s3`` (bucket + key prefix) or ``file`` (an absolute local path)."""

    scheme: str
    bucket: str
    path: str  # s3: key prefix without surrounding '/' ('' = the whole bucket); file: absolute path

    @property
    def uri(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.path}" if self.path else f"s3://{self.bucket}"
        return self.path

    @property
    def name(self) -> str:
        """The last path segment (a run's id for a run's location)."""
        tail = self.path.rstrip("/").rsplit("/", 1)[-1]
        return tail or self.bucket or "storage"


def parse_location(text: str) -> Location:
    """``s3://bucket/prefix``, ``file:///abs/path`` or a local path; anything else is bad input."""
    text = text.strip()
    if text.startswith("s3://"):
        bucket, _, prefix = text[len("s3://"):].partition("/")
        if not _BUCKET_RE.match(bucket):
            raise BadInput(f"{text!r} is not an S3 URI: expected s3://bucket/prefix")
        return Location("s3", bucket, prefix.strip("/"))
    if text.startswith("file://"):
        path = text[len("file://"):]
        if not path.startswith("/"):
            raise BadInput(f"{text!r}: a file:// URI needs an absolute path (file:///path)")
        return Location("file", "", os.path.normpath(path))
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise BadInput(f"{text!r}: rtjob reads run storage from s3://bucket/prefix or a local path, not {scheme}://")
    if not text:
        raise BadInput("an empty storage location")
    return Location("file", "", os.path.abspath(os.path.expanduser(text)))
