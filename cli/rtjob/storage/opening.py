"""Which Store serves a location: a folder (LocalStore), else S3 (S3Store, imported only for an s3:// location:
botocore's and obstore's modules stay unloaded for a local run). Above stores.py and s3store.py, which it picks
from."""

from __future__ import annotations

from .location import Location
from .stores import LocalStore, Store


def open_store(location: Location, endpoint: str | None = None, concurrency: int = 16) -> Store:
    if location.scheme == "s3":
        from .s3store import S3Store

        return S3Store(location, endpoint, concurrency)
    return LocalStore(location, concurrency)
