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

Each implementation has its module (objects_s3_boto3.py, objects_s3_sigv4.py, objects_s3_pyarrow.py, on what they
share: objects_s3_base.py), imported only when it is chosen. Importable on the cluster: the stdlib and rtjob modules
of the same rule at module level; boto3 and pyarrow are imported inside the implementation that uses them.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from ..core.errors import BadInput
from ..jobspec.run_env import endpoint_from_env
from . import s3light
from .location import Location
from .objects import Objects

IMPL_VAR = "RTJOB_S3_OBJECTS"
IMPLS = ("boto3", "sigv4", "pyarrow")


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
            from .objects_s3_boto3 import Boto3Objects

            return Boto3Objects(location, endpoint, region, concurrency)
        if choice == "boto3":
            raise NoS3Writer(f"{location.uri}: {IMPL_VAR}=boto3, but boto3 cannot be imported here")
    if choice in ("auto", "sigv4"):
        target = s3light.keys_target(location.bucket, endpoint)
        if target is not None:
            from .objects_s3_sigv4 import SigV4Objects

            return SigV4Objects(location, target)
        if choice == "sigv4":
            raise NoS3Writer(f"{location.uri}: {IMPL_VAR}=sigv4 needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                             "in the environment")
    if _importable("pyarrow.fs"):
        from .objects_s3_pyarrow import PyArrowObjects

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
    from .objects_s3_sigv4 import SigV4Objects

    return SigV4Objects(location, target)


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True
