"""Which Store serves a location: a folder (LocalStore), else S3 (S3Store, imported only for an s3:// location:
botocore's and obstore's modules stay unloaded for a local run). Above stores.py and s3store.py, which it picks
from; likewise ``objects_for`` above objects.py and objects_s3.py (a run's folder as conditional objects).

Importable on the cluster (stdlib and rtjob modules of the same rule at module level)."""

from __future__ import annotations

from .location import Location, parse_location
from .objects import LocalObjects, Objects
from .stores import LocalStore, Store


def open_store(location: Location, endpoint: str | None = None, concurrency: int = 16) -> Store:
    if location.scheme == "s3":
        from .s3store import S3Store

        return S3Store(location, endpoint, concurrency)
    return LocalStore(location, concurrency)


def objects_for(uri: str, endpoint: str | None = None, concurrency: int = 10, *, light: bool = False) -> Objects:
    """The objects of a folder: a local path (or file://) or s3://bucket/prefix (``endpoint``: an S3-compatible
    server's URL, else the environment's AWS_ENDPOINT_URL[_S3], else AWS; objects_s3.py says which S3 client).
    ``light``: a client's command that would spend more time importing botocore than talking to S3 (a listing)
    uses the stdlib's SigV4 where it serves as boto3 would (objects_s3.light_objects)."""
    location = parse_location(uri)
    if location.scheme == "file":
        return LocalObjects(location)
    from .objects_s3 import light_objects, s3_objects

    if light:
        found = light_objects(location, endpoint)
        if found is not None:
            return found
    return s3_objects(location, endpoint, concurrency=concurrency)
